"""Compile stage: operator graphs of the hierarchical simulator agree with ModelSpec."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from simulators import Layout
from simulators import ModelSpec
from simulators import TrainSpec
from simulators.hierarchical.graph import layer_shapes

compile_mod = pytest.importorskip("simulators.hierarchical.compile")

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
TRAIN = TrainSpec(seq_len=512, global_batch_size=8)


def graph_flops_per_token(model: ModelSpec, layout: Layout, train: TrainSpec) -> float:
    """Model FLOPs of one micro-batch summed over the ranks of one model replica, per token."""
    shapes = layer_shapes(model, layout, train)
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
    sp = compile_mod.compile_layer(
        layer_shapes(TINY_LLAMA, Layout(tp=2, dp=4, sequence_parallel=True), TRAIN)["dense"]
    )
    plain = compile_mod.compile_layer(layer_shapes(TINY_LLAMA, Layout(tp=2, dp=4), TRAIN)["dense"])
    names = lambda ops: [op.name for op in ops if op.category == "comm"]  # noqa: E731
    assert names(sp.forward) == ["all_gather", "reduce_scatter"] * 2
    assert sorted(names(sp.backward)) == sorted(["all_gather", "reduce_scatter"] * 2)
    assert names(plain.forward) == ["all_reduce"] * 2 == names(plain.backward)


def test_fused_attention_backward_counts_model_flops_without_rescore() -> None:
    graph = compile_mod.compile_layer(layer_shapes(TINY_LLAMA, Layout(dp=8), TRAIN)["dense"])
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
    plain = compile_mod.compile_layer(layer_shapes(TINY_LLAMA, Layout(tp=2, dp=4), TRAIN)["dense"])
    sp = compile_mod.compile_layer(
        layer_shapes(TINY_LLAMA, Layout(tp=2, dp=4, sequence_parallel=True), TRAIN)["dense"]
    )
    assert sp.saved_bytes < plain.saved_bytes
    assert sp.selective_saved_bytes < sp.saved_bytes
    assert sp.input_bytes == TRAIN.seq_len // 2 * TINY_LLAMA.hidden_size * 2


def test_expert_params_are_sharded_by_ep() -> None:
    one = compile_mod.compile_layer(layer_shapes(TINY_MOE, Layout(dp=8), TRAIN)["moe"])
    four = compile_mod.compile_layer(layer_shapes(TINY_MOE, Layout(dp=8, ep=4), TRAIN)["moe"])
    assert one.expert_params == TINY_MOE.expert_params_per_layer
    assert four.expert_params * 4 == one.expert_params
    assert one.params == four.params == TINY_MOE.moe_layer_non_expert_params


def test_hierarchical_package_imports_without_torch() -> None:
    code = (
        "import json, sys\n"
        "import simulators, simulators.hierarchical\n"
        "print(json.dumps('torch' in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) is False


UNFUSED = TrainSpec(seq_len=512, global_batch_size=8, flash_attention=False)


def test_unfused_attention_records_the_score_matrices_and_saves_more() -> None:
    layout = Layout(tp=2, dp=4)
    flash = compile_mod.compile_layer(layer_shapes(TINY_GPT, layout, TRAIN)["dense"])
    unfused = compile_mod.compile_layer(layer_shapes(TINY_GPT, layout, UNFUSED)["dense"])
    heads, s = TINY_GPT.num_attention_heads // 2, TRAIN.seq_len
    scores = heads * s * s  # one micro-batch: [heads, s, s] per rank
    core = [op for op in unfused.forward if op.region == "core"]
    names = [op.name.split(".")[1] for op in core]
    assert names[:4] == ["bmm", "_softmax", "native_dropout", "bmm"]
    softmax = next(op for op in core if "_softmax" in op.name)
    assert softmax.bytes == 2 * 2 * scores  # reads and writes the bf16 s x s scores
    dropout = next(op for op in core if "native_dropout" in op.name)
    assert dropout.bytes == (2 + 2 + 1) * scores  # in, out and the 1-byte mask
    # Korthikanti Table 2: softmax output (2), dropout mask (1) and output (2) per score
    # flash instead keeps its output and the folded queries (bf16, s x heads x d each) and the
    # fp32 log-sum-exp per head and query
    flash_only = 2 * 2 * s * heads * TINY_GPT.head_dim + 4 * heads * s
    assert unfused.saved_bytes - flash.saved_bytes + flash_only == pytest.approx(
        5 * scores, rel=1e-4
    )
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
