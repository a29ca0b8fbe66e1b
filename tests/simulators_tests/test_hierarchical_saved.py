"""What the hierarchical recorder counts as saved where a kernel stand-in copies its inputs or
context parallelism exchanges them, by hand and against the analytical simulator."""

from __future__ import annotations

import dataclasses

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

from tests.simulators_tests.test_hierarchical_compile import TINY_MLA  # noqa: E402

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


# ---- Bug C: the shared experts' input is the router's, one tensor at TP > 1 ------------------


def _saved_once(sp: bool) -> float:
    """Saved bytes of a ``[1, 64, 32]`` bf16 norm output that one linear layer saves as it is
    (the router) and another after entering the TP region of 2 ranks (a shared expert's fc1:
    copy-to-region without SP, the sequence all-gather with it)."""
    recorder = record.Recorder()
    weight = torch.empty(8, 32, dtype=torch.bfloat16, device="meta", requires_grad=True)
    with recorder, recorder.saving(exclude=[weight]):
        x = torch.empty(1, 64, 32, dtype=torch.bfloat16, device="meta", requires_grad=True)
        normed = x * 1.0
        torch.nn.functional.linear(normed, weight)
        entered = (
            kernels.gather(normed, "tp", 2) if sp else kernels.copy_to_region(normed, "tp", 2)
        )
        torch.nn.functional.linear(entered, weight)
    return recorder.saved_bytes(selective=False)


@pytest.mark.parametrize("sp", [False, True], ids=["tp", "tp-sp"])
def test_a_tensor_saved_as_it_is_and_in_the_tp_region_is_saved_once(sp: bool) -> None:
    """Megatron's copy to the TP region is the identity in forward and its sequence-parallel
    linear layer keeps the local shard it gathers from: either way the layer in the region
    saves the very tensor the other one saved (the norm output, 64 x 32 bf16), not a copy."""
    assert _saved_once(sp) == 64 * 32 * 2


def _deepseek_moe(sp: bool, shared: bool) -> float:
    """Saved bytes of a DeepSeek-V2-Lite MoE layer at TP 2, with its shared experts or not."""
    train = make_train(seq_len=1024, global_batch_size=8)
    cluster = catalog.load_cluster("h100", ["cluster.num_nodes=1"])
    job = Job(model=catalog.load_model("deepseek_v2_lite"), cluster=cluster, train=train)
    layout = Layout(tp=2, dp=4, sequence_parallel=sp, recompute="none")
    shape = layer_shapes(job, layout)["moe"]
    if not shared:
        shape = dataclasses.replace(shape, shared_ffn=0)
    return float(compile_mod.compile_layer(shape).saved_bytes)


@pytest.mark.parametrize("sp", [False, True], ids=["tp2", "tp2-sp"])
def test_deepseek_shared_experts_keep_the_routers_input_by_hand(sp: bool) -> None:
    """The shared experts (2816 wide, 1408 per TP rank) add to the MoE layer what their fc1
    output (SwiGLU's input, 2 x 1408 wide) and fc2 input (1408 wide) hold over the whole
    sequence (gathered with SP), bf16: their fc1 input is the pre-MLP norm output the router
    saved already (one norm output more before: 1024 x 2048 x 2 bytes, or its SP half)."""
    tokens, width = 1024, 2816 // 2
    added = _deepseek_moe(sp, shared=True) - _deepseek_moe(sp, shared=False)
    assert added == tokens * 3 * width * 2


@pytest.mark.parametrize("sp", [False, True], ids=["tp2", "tp2-sp"])
def test_dense_layer_keeps_its_norm_output_once_as_the_analytical_one(sp: bool) -> None:
    """The dense layer's norm output feeds QKV and the MLP through the TP region, saved once
    there already: a Llama layer keeps what the analytical simulator prices (within its
    small extras, 0.02%), at TP 2 with and without SP."""
    train = make_train(seq_len=1024, global_batch_size=8)
    cluster = catalog.load_cluster("h100", ["cluster.num_nodes=1"])
    job = Job(model=catalog.load_model("llama3_8b"), cluster=cluster, train=train)
    layout = Layout(tp=2, dp=4, sequence_parallel=sp, recompute="none")
    assert not layout.violations(job)
    saved = compile_mod.compile_layer(layer_shapes(job, layout)["dense"]).saved_bytes
    kept = layer_bytes_with_modules(job, False, layout, analytical().constants)[0]
    assert saved == pytest.approx(kept, rel=0.001)


# ---- Bug D: the CP ring sends K and V as one buffer ------------------------------------------


@pytest.mark.parametrize("fused", [True, False], ids=["flash", "unfused"])
def test_cp_ring_sends_keys_and_values_together_once_a_pass(fused: bool) -> None:
    """Transformer Engine concatenates K and V into one buffer per ring step (MLA's wider K
    too): one send-receive a pass of (cp - 1) x (K + V) bytes, twice that in backward (K and
    V with their gradients), so a pass pays one ring's link latencies, not two."""
    cp, s, heads = 4, 128, 8
    recorder = record.Recorder()

    def empty(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, dtype=torch.bfloat16, device="meta", requires_grad=True)

    with recorder, recorder.saving(exclude=[]):
        q, k, v = empty(1, s, heads, 48), empty(1, heads, s, 48), empty(1, heads, s, 32)
        attend = kernels.core_attention if fused else kernels.unfused_attention
        out = attend(q, k, v, cp) if fused else attend(q, k, v, cp, False)
        forward = [(op.name, op.bytes) for op in recorder.ops if op.group == "cp"]
        recorder.ops.clear()
        out.backward(torch.empty_like(out))
    backward = [(op.name, op.bytes) for op in recorder.ops if op.group == "cp"]
    kv = s * heads * (48 + 32) * 2 * (cp - 1)
    assert forward == [("ring_send_recv", kv)]
    assert backward == [("ring_send_recv", 2 * kv)]
