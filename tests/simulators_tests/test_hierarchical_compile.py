"""Compile stage: operator graphs of the hierarchical simulator agree with ModelSpec."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import ModelSpec
from autotune.simulators import TrainSpec
from autotune.simulators.hierarchical.graph import layer_shapes
from tests.simulators_tests._specs import ascend
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model as catalog_model

compile_mod = pytest.importorskip("autotune.simulators.hierarchical.compile")

TINY_LLAMA = ModelSpec(
    name="tiny-llama",
    num_layers=4,
    hidden_size=256,
    ffn_hidden_size=688,
    num_attention_heads=8,
    num_kv_heads=2,
    head_dim=32,
    vocab_size=1024,
)
TINY_GPT = ModelSpec(
    name="tiny-gpt",
    num_layers=2,
    hidden_size=256,
    ffn_hidden_size=1024,
    num_attention_heads=8,
    num_kv_heads=8,
    head_dim=32,
    vocab_size=512,
    activation="gelu",
    norm="layernorm",
    qkv_bias=True,
)
TINY_MOE = ModelSpec(
    name="tiny-moe",
    num_layers=4,
    hidden_size=256,
    ffn_hidden_size=512,
    num_attention_heads=8,
    num_kv_heads=4,
    head_dim=32,
    vocab_size=1024,
    num_experts=8,
    moe_top_k=2,
    expert_ffn_hidden_size=128,
    shared_expert_ffn_hidden_size=128,
    first_dense_layers=1,
)
TINY_MLA = ModelSpec(
    name="tiny-mla",
    num_layers=2,
    hidden_size=256,
    ffn_hidden_size=512,
    num_attention_heads=8,
    num_kv_heads=8,
    head_dim=48,
    vocab_size=1024,
    attention="mla",
    q_lora_rank=96,
    kv_lora_rank=64,
    qk_nope_head_dim=32,
    qk_rope_head_dim=16,
    v_head_dim=32,
)
TRAIN = make_train(seq_len=512, global_batch_size=8)
CLUSTER = ascend(1)  # fused attention where the step asks for it; nothing else it sets


def graph_flops_per_token(model: ModelSpec, layout: Layout, train: TrainSpec) -> float:
    """Model FLOPs of one micro-batch summed over the ranks of one model replica, per token."""
    shapes = layer_shapes(Job(model=model, cluster=CLUSTER, train=train), layout)
    graphs = {kind: compile_mod.compile_layer(s) for kind, s in shapes.items()}
    counts = {"embedding": 1, "head": 1, "dense": model.num_dense_layers}
    counts["moe"] = model.num_moe_layers
    per_rank = sum(counts[kind] * graph.model_flops() for kind, graph in graphs.items())
    return per_rank * layout.tp * layout.cp / (layout.micro_batch * train.seq_len)


@pytest.mark.parametrize(
    ("model", "layout"),
    [
        (TINY_LLAMA, Layout(dp=8)),
        (TINY_LLAMA, Layout(tp=2, dp=4, sequence_parallel=True)),
        (TINY_LLAMA, Layout(tp=2, cp=2, dp=2, micro_batch=2, sequence_parallel=True)),
        (TINY_GPT, Layout(tp=2, dp=4)),
        (TINY_MOE, Layout(dp=8, ep=4)),
        (TINY_MOE, Layout(tp=2, dp=4, ep=2, sequence_parallel=True)),
        (TINY_MLA, Layout(dp=8)),
        (TINY_MLA, Layout(cp=2, dp=4)),
    ],
    ids=[
        "gqa",
        "gqa-tp-sp",
        "gqa-tp-cp-mbs2",
        "mha-gelu-tp",
        "moe-ep",
        "moe-tp-ep",
        "mla",
        "mla-cp",
    ],
)
def test_graph_flops_match_model_spec(model: ModelSpec, layout: Layout) -> None:
    expected = model.flops_per_token(TRAIN.seq_len)
    assert graph_flops_per_token(model, layout, TRAIN) == pytest.approx(expected, rel=0.02)


def test_graph_records_tp_collectives_in_megatron_places() -> None:
    job = Job(model=TINY_LLAMA, cluster=CLUSTER, train=TRAIN)
    sp = compile_mod.compile_layer(
        layer_shapes(
            job,
            Layout(tp=2, dp=4, sequence_parallel=True),
        )["dense"]
    )
    plain = compile_mod.compile_layer(layer_shapes(job, Layout(tp=2, dp=4))["dense"])
    names = lambda ops: [op.name for op in ops if op.category == "comm"]  # noqa: E731
    assert names(sp.forward) == ["all_gather", "reduce_scatter"] * 2
    assert sorted(names(sp.backward)) == sorted(["all_gather", "reduce_scatter"] * 2)
    assert names(plain.forward) == ["all_reduce"] * 2 == names(plain.backward)


def test_fused_attention_backward_counts_model_flops_without_rescore() -> None:
    graph = compile_mod.compile_layer(
        layer_shapes(Job(model=TINY_LLAMA, cluster=CLUSTER, train=TRAIN), Layout(dp=8))["dense"]
    )
    (fwd,) = [op for op in graph.forward if op.category == "attention"]
    (bwd,) = [op for op in graph.backward if op.category == "attention"]
    assert bwd.model_flops == pytest.approx(2 * fwd.model_flops)
    assert bwd.flops == pytest.approx(2.5 * fwd.flops)
    # causal: half of the s x s score matrix (core_attention_flops_per_token)
    tokens = TRAIN.seq_len
    assert fwd.model_flops == pytest.approx(
        TINY_LLAMA.core_attention_flops_per_token(tokens) * tokens
    )


def test_saved_activations_shrink_with_selective_and_sequence_parallel() -> None:
    job = Job(model=TINY_LLAMA, cluster=CLUSTER, train=TRAIN)
    plain = compile_mod.compile_layer(layer_shapes(job, Layout(tp=2, dp=4))["dense"])
    sp = compile_mod.compile_layer(
        layer_shapes(
            job,
            Layout(tp=2, dp=4, sequence_parallel=True),
        )["dense"]
    )
    assert sp.saved_bytes < plain.saved_bytes
    assert sp.input_bytes == TRAIN.seq_len // 2 * TINY_LLAMA.hidden_size * 2
    # Selective recompute drops what only the flash kernel keeps (its Q, K, V copies, the
    # fp32 log-sum-exp, two RNG words) and keeps the checkpoint's inputs, the rotated Q and K
    # and V, as large as those copies: the log-sum-exp and the RNG words are the difference.
    heads, s = TINY_LLAMA.num_attention_heads // 2, TRAIN.seq_len
    assert sp.selective_saved_bytes - sp.saved_bytes == -(4 * heads * s + 2 * 8)


def test_expert_params_are_sharded_by_ep() -> None:
    job = Job(model=TINY_MOE, cluster=CLUSTER, train=TRAIN)
    one = compile_mod.compile_layer(layer_shapes(job, Layout(dp=8))["moe"])
    four = compile_mod.compile_layer(layer_shapes(job, Layout(dp=8, ep=4))["moe"])
    assert one.expert_params == TINY_MOE.expert_params_per_layer
    assert four.expert_params * 4 == one.expert_params
    assert one.params == four.params == TINY_MOE.moe_layer_non_expert_params


@pytest.mark.parametrize("dispatcher", ["alltoall", "allgather"])
def test_expert_tp_1_puts_whole_experts_on_each_rank_by_hand(dispatcher: str) -> None:
    """Mixtral 8x7B (hidden 4096, 8 experts of FFN 14336, top-2) on 32 ranks, TP 4 with SP,
    EP 8: one expert per rank, and each rank holds 4096 / 4 = 1024 tokens. With ETP = TP its
    expert is a quarter wide (3584) and computes the 2 x 1024 copies of each of the 4
    expert-TP ranks, gathered: 8192; with ETP 1 it is whole (14336) and computes its own
    2048 copies, no gather. The same FLOPs: 2 x 4096 x copies x 3 x width (SwiGLU gate and
    up, then down) forward, twice that backward."""
    mixtral = catalog_model("mixtral_8x7b", num_layers=4)
    train = make_train(seq_len=4096, global_batch_size=64, moe_dispatcher=dispatcher)
    layouts = [Layout.resolve(32, tp=4, ep=8, etp=e, sequence_parallel=True) for e in (None, 1)]
    tp_wide, whole = (
        layer_shapes(Job(model=mixtral, cluster=CLUSTER, train=train), lay)["moe"]
        for lay in layouts
    )
    assert (tp_wide.etp, tp_wide.expert_ffn, tp_wide.expert_tokens) == (4, 3584, 8192)
    assert (whole.etp, whole.expert_ffn, whole.expert_tokens) == (1, 14336, 2048)
    assert whole.shared_ffn == tp_wide.shared_ffn and whole.heads == tp_wide.heads
    graphs = [compile_mod.compile_layer(shape) for shape in (tp_wide, whole)]
    forward = 2 * 4096 * 8192 * 3 * 3584
    assert forward == 2 * 4096 * 2048 * 3 * 14336
    for graph in graphs:  # the experts' grouped GEMMs are the layer's only bmm (flash attention)
        assert sum(op.flops for op in graph.forward if op.name == "aten.bmm.default") == forward
        assert sum(op.flops for op in graph.backward if op.name == "aten.bmm.default") == (
            2 * forward
        )
    assert graphs[0].model_flops() == graphs[1].model_flops()
    groups = [{op.group for op in g.forward + g.backward if op.category == "comm"} for g in graphs]
    assert groups[0] == {"tp", "ep", "etp"} and groups[1] == {"tp", "ep"}
    # Routed weights per rank: num_experts / ep = 1 expert of 3 x 4096 x 14336, not split by TP.
    assert graphs[1].expert_params == 3 * 4096 * 14336 == mixtral.expert_params_per_layer // 8
    assert graphs[0].expert_params * 4 == graphs[1].expert_params
    assert graphs[0].params == graphs[1].params  # attention, router: split by TP either way


def test_hierarchical_package_imports_without_torch() -> None:
    code = (
        "import json, sys\n"
        "import autotune.simulators.hierarchical\n"
        "print(json.dumps('torch' in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) is False


UNFUSED = make_train(seq_len=512, global_batch_size=8, flash_attention=False)


def test_unfused_attention_records_the_score_matrices_and_saves_more() -> None:
    layout = Layout(tp=2, dp=4)
    flash = compile_mod.compile_layer(
        layer_shapes(Job(model=TINY_GPT, cluster=CLUSTER, train=TRAIN), layout)["dense"]
    )
    unfused = compile_mod.compile_layer(
        layer_shapes(Job(model=TINY_GPT, cluster=CLUSTER, train=UNFUSED), layout)["dense"]
    )
    heads, s = TINY_GPT.num_attention_heads // 2, TRAIN.seq_len
    scores = heads * s * s  # one micro-batch: [heads, s, s] per rank
    core = [op for op in unfused.forward if op.region == "core"]
    names = [op.name.split(".")[1] for op in core]
    assert names[:4] == ["bmm", "_softmax", "native_dropout", "bmm"]
    softmax = next(op for op in core if "_softmax" in op.name)
    assert softmax.bytes == 2 * 2 * scores  # reads and writes the bf16 s x s scores
    dropout = next(op for op in core if "native_dropout" in op.name)
    assert dropout.bytes == (2 + 2 + 1) * scores  # in, out and the 1-byte mask
    # Korthikanti Table 2: softmax output (2), dropout mask (1) and output (2) per score.
    # Both paths keep Q, K, V and the attention output once each (flash its contiguous
    # copies and its output, which the projection reads; unfused the views of the fused QKV
    # output and the projection's input); flash adds its fp32 log-sum-exp per head and query
    # and its two int64 RNG words.
    flash_only = 4 * heads * s + 2 * 8
    assert unfused.saved_bytes - flash.saved_bytes + flash_only == pytest.approx(5 * scores)
    # selective recompute drops the score tensors again
    assert unfused.selective_saved_bytes < flash.saved_bytes
    # the full s x s product is executed; Megatron's model FLOPs count the causal half
    gemm = [op for op in core if "bmm" in op.name]
    assert sum(op.flops for op in gemm) == pytest.approx(2 * 2 * scores * TINY_GPT.head_dim)
    assert sum(op.model_flops for op in gemm) == pytest.approx(sum(op.flops for op in gemm) / 2)
    assert not any(op.category == "attention" for op in unfused.forward + unfused.backward)


@pytest.mark.parametrize(
    ("model", "layout"),
    [(TINY_GPT, Layout(tp=2, dp=4)), (TINY_LLAMA, Layout(dp=4, micro_batch=2))],
    ids=["mha-tp", "gqa-mbs2"],
)
def test_unfused_graph_model_flops_match_model_spec(model: ModelSpec, layout: Layout) -> None:
    expected = model.flops_per_token(UNFUSED.seq_len)
    assert graph_flops_per_token(model, layout, UNFUSED) == pytest.approx(expected, rel=0.02)


def test_gpt_layer_host_calls_by_hand() -> None:
    """Python-level calls of Megatron's GPT layer (unfused attention), counted by hand.

    Before core attention: layer_norm, qkv linear, split, 3 views, transpose of K and of V (8).
    Core (unfused): transpose K, bmm, softmax, dropout, bmm, view, permute, reshape (8).
    After: out linear, bias-dropout-add (one jit-fused call), layer_norm, fc1 linear, gelu,
    fc2 linear, bias-dropout-add (7). TP adds 4 region autograd Functions and 2 all-reduces.
    """
    for tp, forward in ((1, 23), (2, 29)):
        shape = layer_shapes(Job(model=TINY_GPT, cluster=CLUSTER, train=UNFUSED), Layout(tp=tp))[
            "dense"
        ]
        graph = compile_mod.compile_layer(shape)
        assert (graph.host_forward, graph.host_core) == (forward, 8)
        assert graph.host_backward > graph.host_forward  # autograd nodes incl. weight grads


def test_gpt_layer_has_no_rope_and_two_hidden_dropouts() -> None:
    """GPT (LayerNorm + GeLU): no rotary muls; 3 dropouts (attention + 2 hidden), and the two
    hidden-dropout masks add 2 sbh bytes to the saved activations (Korthikanti Table 2)."""
    shape = layer_shapes(Job(model=TINY_GPT, cluster=CLUSTER, train=UNFUSED), Layout())["dense"]
    assert shape.gpt
    names = [op.name for op in compile_mod.compile_layer(shape).forward]
    assert "aten.mul.Tensor" not in names
    assert names.count("aten.native_dropout.default") == 3
    llama = layer_shapes(Job(model=TINY_LLAMA, cluster=CLUSTER, train=TRAIN), Layout())["dense"]
    assert not llama.gpt
    assert "aten.mul.Tensor" in [op.name for op in compile_mod.compile_layer(llama).forward]


def test_flash_swiglu_layer_saved_bytes_by_hand() -> None:
    """Saved bytes of a flash SwiGLU layer (tp 1, bf16), storages deduplicated.

    Per token: norm inputs 2 x 2h and fp32 stats 2 x 2 x 4; qkv and fc1 inputs (norm outputs)
    2 x 2h; flash keeps q 2h, contiguous k and v 2 x 2 g d, its output 2h (a view the out
    projection reads) and an fp32 LSE per head (4 heads); fused SwiGLU keeps its input 2 x 2f;
    fc2 input 2f; the RNG seed and offset. silu's output and the whole QKV output are not kept.
    """
    shape = layer_shapes(Job(model=TINY_LLAMA, cluster=CLUSTER, train=TRAIN), Layout())["dense"]
    h, f, d = 256, 688, 32
    g, heads = 2, 8
    per_token = 2 * h * 6 + 2 * 2 * 4 + 2 * 2 * g * d + 4 * heads + 2 * 2 * f + 2 * f
    tokens = shape.micro_batch * shape.seq_q
    seed_offset = 2 * 8  # the kernel's int64 RNG seed and offset
    assert compile_mod.compile_layer(shape).saved_bytes == tokens * per_token + seed_offset


def test_fp8_layer_runs_linear_gemms_in_fp8_and_saves_their_inputs_in_one_byte() -> None:
    """FP8 (Transformer Engine): the same layer as the bf16 hand count above, but the QKV and
    fc1 inputs (norm outputs, 2 x h) and the fc2 input (f) are kept in 1 byte instead of 2,
    and the out projection keeps an FP8 copy of the flash output (h), which flash still keeps
    in bf16 for its own backward (docs/reference.md 7.6)."""
    fp8 = make_train(seq_len=512, global_batch_size=8, precision="fp8")
    bf16 = compile_mod.compile_layer(
        layer_shapes(Job(model=TINY_LLAMA, cluster=CLUSTER, train=TRAIN), Layout())["dense"]
    )
    shape = layer_shapes(Job(model=TINY_LLAMA, cluster=CLUSTER, train=fp8), Layout())["dense"]
    graph = compile_mod.compile_layer(shape)
    h, f = 256, 688
    tokens = shape.micro_batch * shape.seq_q
    assert graph.saved_bytes == bf16.saved_bytes - tokens * (2 * h + f) + tokens * h
    gemms = [op for op in graph.forward + graph.backward if op.category == "matmul"]
    assert {op.dtype for op in gemms} == {"fp8"}  # no router, no output layer in a dense layer
    assert len(gemms) == 3 * 4  # QKV, out, fc1, fc2: forward, input and weight gradients
    assert graph.model_flops() == pytest.approx(bf16.model_flops())


def test_recorded_gemms_carry_their_shape() -> None:
    """Each matmul keeps (batch, rows, depth, cols) for its tile and wave quantization: the
    forward QKV projection is tokens x h by h x (heads + 2 kv heads) x d, and the unfused
    attention's batched products keep one batch entry per local head."""
    shape = layer_shapes(Job(model=TINY_LLAMA, cluster=CLUSTER, train=TRAIN), Layout())["dense"]
    graph = compile_mod.compile_layer(shape)
    gemms = [op for op in graph.forward + graph.backward if op.category == "matmul"]
    assert gemms
    for op in gemms:
        assert op.gemm is not None
        batch, rows, depth, cols = op.gemm
        assert 2 * batch * rows * depth * cols == pytest.approx(op.flops)
    tokens = shape.micro_batch * shape.seq_q
    assert (1, tokens, 256, (8 + 2 * 2) * 32) in {op.gemm for op in graph.forward}
    unfused = make_train(seq_len=512, global_batch_size=8, flash_attention=False)
    gpt = compile_mod.compile_layer(
        layer_shapes(Job(model=TINY_GPT, cluster=CLUSTER, train=unfused), Layout())["dense"]
    )
    batched = [op.gemm for op in gpt.forward if op.gemm and op.gemm[0] > 1]
    assert batched and all(b == 8 * shape.micro_batch for b, *_ in batched)


def test_a_storage_key_names_one_storage_while_recording() -> None:
    """Freed storages are kept alive: a new tensor never inherits a dead one's address (the
    FP8 rows of the benchmark changed memory between runs before)."""
    import torch

    from autotune.simulators.hierarchical.record import Recorder
    from autotune.simulators.hierarchical.record import _storage

    keys = set()
    with Recorder():
        for _ in range(20):
            tensor = torch.empty(4, device="meta")
            keys.add(_storage(tensor))
            del tensor
    assert len(keys) == 20


@pytest.mark.parametrize("model", [TINY_MOE, TINY_GPT], ids=lambda m: m.name)
def test_a_canonical_shape_records_the_same_graph(model: ModelSpec) -> None:
    """Graphs are cached by canonical shape: resetting what a kind does not read changes
    nothing it records, and layouts that differ only there (EP for the embedding, the head
    and dense layers) share one graph."""
    from autotune.simulators.hierarchical.record import Recorder

    for ep in (1, 2):
        lay = Layout.resolve(8, tp=2, ep=ep) if model is TINY_MOE else Layout.resolve(8, tp=2)
        for shape in layer_shapes(Job(model=model, cluster=CLUSTER, train=TRAIN), lay).values():
            canonical = shape.canonical()
            assert canonical.canonical() == canonical
            plain, reset = (compile_mod.trace_layer(s, Recorder()) for s in (shape, canonical))
            assert (plain.forward, plain.backward) == (reset.forward, reset.backward)
            assert plain.saved_bytes == reset.saved_bytes and plain.params == reset.params
            assert plain.host_forward == reset.host_forward
    shapes = [
        layer_shapes(
            Job(model=TINY_MOE, cluster=CLUSTER, train=TRAIN), Layout.resolve(8, tp=2, ep=ep)
        )
        for ep in (1, 2)
    ]
    for kind in ("embedding", "head"):
        assert shapes[0][kind] != shapes[1][kind]
        assert compile_mod.compile_layer(shapes[0][kind]) is compile_mod.compile_layer(
            shapes[1][kind]
        )
