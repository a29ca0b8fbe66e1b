"""What the hierarchical recorder counts as saved where a kernel stand-in copies its inputs or
context parallelism exchanges them, by hand and against the analytical simulator."""

from __future__ import annotations

import pytest

from autotune import catalog
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import ModelSpec
from autotune.simulators.analytical.recompute import freed_bytes
from autotune.simulators.analytical.recompute import layer_bytes_with_modules
from autotune.simulators.hierarchical.graph import layer_shapes
from tests.simulators_tests._specs import analytical
from tests.simulators_tests._specs import ascend
from tests.simulators_tests._specs import make_train

torch = pytest.importorskip("torch")
compile_mod = pytest.importorskip("autotune.simulators.hierarchical.compile")
kernels = pytest.importorskip("autotune.simulators.hierarchical.kernels")
record = pytest.importorskip("autotune.simulators.hierarchical.record")

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
TINY_MHA = ModelSpec(
    name="tiny-mha",
    num_layers=2,
    hidden_size=256,
    ffn_hidden_size=688,
    num_attention_heads=8,
    num_kv_heads=8,
    head_dim=32,
    vocab_size=1024,
)
UP = dict(recompute="selective", recompute_modules=("mla_up_proj",))
GIB = 1024**3


# ---- Bug A: mla_up_proj frees the Q, K and V core attention saved --------------------------


def test_mla_up_proj_frees_the_queries_keys_and_values_the_kernel_saved_by_hand() -> None:
    """The flash stand-in saves its own contiguous Q, K and V; Megatron's kernel saves the
    tensors it is given, which the up-projection checkpoint discards: the layer keeps the Q,
    K and V bytes less, counted by hand, as the analytical simulator frees."""
    train = make_train(seq_len=512, global_batch_size=8)
    job = Job(model=TINY_MLA, cluster=ascend(1), train=train)
    plain, up = (
        compile_mod.compile_layer(layer_shapes(job, layout)["dense"])
        for layout in (Layout(dp=8), Layout(dp=8, **UP))  # type: ignore[arg-type]
    )
    m = TINY_MLA
    heads, qk = m.num_attention_heads, m.qk_nope_head_dim + m.qk_rope_head_dim
    qkv = train.seq_len * heads * (qk + qk + m.v_head_dim) * 2  # bf16 Q, K and V
    assert plain.saved_bytes - up.selective_saved_bytes == qkv
    assert freed_bytes(job, False, Layout(dp=8, **UP)) == qkv  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "modules",
    [("mla_up_proj",), ("layernorm", "mla_up_proj", "moe_act", "shared_experts", "mlp")],
    ids=["mla_up_proj", "five-modules"],
)
def test_mla_up_proj_peak_matches_the_analytical_one(modules: tuple[str, ...]) -> None:
    """DeepSeek-V2-Lite on one H100 node at TP 1, micro-batch 1 (1.6-1.7% apart before)."""
    cluster = catalog.load_cluster("h100", ["cluster.num_nodes=1"])
    job = Job(
        model=catalog.load_model("deepseek_v2_lite"),
        cluster=cluster,
        train=make_train(seq_len=4096, global_batch_size=256),
    )
    layout = Layout(dp=8, recompute="selective", recompute_modules=modules)
    assert not layout.violations(job)
    peaks = [
        catalog.load_simulator(name, ()).simulate(job, layout).memory_gib
        for name in ("hierarchical", "analytical")
    ]
    assert peaks[0] == pytest.approx(peaks[1], rel=0.005)


# ---- Bug B: unfused attention runs the framework's CP exchange ------------------------------


def _unfused(cp: int, exchange: str, style: str | None = None, groups: int = 8) -> tuple:
    """(saved bytes, CP collectives as (name, bytes), output shape) of unfused attention on
    this rank's ``[1, 256, 8, 32]`` queries and ``[1, groups, 256, 32]`` keys and values."""
    recorder = record.Recorder()
    b, s, heads, d = 1, 256, 8, 32

    def empty(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, dtype=torch.bfloat16, device="meta", requires_grad=True)

    with recorder, recorder.saving(exclude=[]):
        q, k, v = empty(b, s, heads, d), empty(b, groups, s, d), empty(b, groups, s, d)
        out = kernels.unfused_attention(q, k, v, cp, False, exchange=exchange, a2a_style=style)
    comms = [(op.name, op.bytes) for op in recorder.ops if op.group == "cp"]
    return recorder.saved_bytes(selective=False), comms, tuple(out.shape)


@pytest.mark.parametrize("style", ["deepspeed", "te"])
def test_unfused_ulysses_keeps_local_sized_keys_and_values_by_hand(style: str) -> None:
    """Under a2a the heads are split over CP and the sequence gathered: the batched GEMMs
    save Q, K and V of this rank's size (not K and V cp times over, as the ring's gather)
    and the softmax output ``[heads / cp, s, s]``; four all-to-alls (Q, K, V, output) of
    the local tensors, no ring."""
    cp, s, heads, d = 4, 256, 8, 32
    local = s * heads * d * 2  # one of Q, K, V on this rank, bf16
    probs = heads // cp * (s * cp) ** 2 * 2
    saved, comms, shape = _unfused(cp, "a2a", style)
    assert saved == 3 * local + probs
    assert comms == [("all_to_all", local)] * 4
    assert shape == (1, s, heads * d)
    ring_saved, ring_comms, _ = _unfused(cp, "p2p")
    assert ring_saved == (1 + 2 * cp) * local + probs  # K and V gathered cp-fold
    assert {name for name, _ in ring_comms} == {"ring_send_recv"}


def test_unfused_ulysses_splits_or_repeats_the_kv_heads_by_style() -> None:
    """GQA (2 KV heads, 8 query heads, CP 2): DeepSpeed's style repeats K and V to the query
    heads before their all-to-alls, Transformer Engine's exchanges the KV heads as they are
    (a quarter of the bytes) and the unfused path repeats them after; the batched GEMMs save
    the repeated K and V either way."""
    cp, s, d = 2, 256, 32
    q = s * 8 * d * 2
    probs = 8 // cp * (s * cp) ** 2 * 2
    deepspeed, ds_comms, _ = _unfused(cp, "a2a", "deepspeed", groups=2)
    te, te_comms, _ = _unfused(cp, "a2a", "te", groups=2)
    assert deepspeed == te == 3 * q + probs
    assert [size for _, size in ds_comms] == [q] * 4
    assert [size for _, size in te_comms] == [q, q / 4, q / 4, q]


def test_megatron_deepspeed_unfused_ulysses_layer_matches_the_analytical_one() -> None:
    """Megatron-DeepSpeed runs DeepSpeed-Ulysses around its unfused core attention: four
    all-to-alls, no ring, and a layer keeps what the analytical simulator prices (not the
    kernel output a flash kernel keeps for this style: the unfused backward reads its
    probabilities and V)."""
    train = make_train(
        "megatron_deepspeed", seq_len=512, global_batch_size=8, flash_attention=False
    )
    cluster = catalog.load_cluster("v100", ["cluster.num_nodes=1"])
    job = Job(model=TINY_MHA, cluster=cluster, train=train)
    constants = analytical().constants
    for layout in (Layout(cp=4, dp=2), Layout(cp=4, dp=2, recompute="selective")):
        assert not layout.violations(job)
        graph = compile_mod.compile_layer(layer_shapes(job, layout)["dense"])
        assert [op.name for op in graph.forward if op.group == "cp"] == ["all_to_all"] * 4
        kept = layer_bytes_with_modules(job, False, layout, constants)[0]
        selective = layout.recompute == "selective"
        saved = graph.selective_saved_bytes if selective else graph.saved_bytes
        assert saved == pytest.approx(kept, rel=0.01)
