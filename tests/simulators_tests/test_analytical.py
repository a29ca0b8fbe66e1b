"""The analytical simulator: hand-computed cases and invariants."""

from __future__ import annotations

import dataclasses
import math

import pytest

from autotune import catalog
from autotune.simulators import ClusterSpec
from autotune.simulators import DeviceSpec
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import LinkSpec
from autotune.simulators import ModelSpec
from autotune.simulators import TrainSpec
from autotune.simulators.analytical import AnalyticalSimulator
from autotune.simulators.analytical import gemm_time_s
from autotune.simulators.collectives import all_gather_time_s
from autotune.simulators.collectives import all_reduce_time_s
from autotune.simulators.collectives import all_to_all_time_s
from autotune.simulators.collectives import deepep_time_s
from autotune.simulators.collectives import p2p_time_s
from autotune.simulators.collectives import place_group
from autotune.simulators.states import tied_embedding_grad_bytes
from tests.simulators_tests._specs import analytical
from tests.simulators_tests._specs import make_train

GIB = 1024**3

TINY = ModelSpec(
    name="tiny",
    num_layers=2,
    hidden_size=64,
    ffn_hidden_size=256,
    num_attention_heads=4,
    num_kv_heads=4,
    head_dim=16,
    vocab_size=1000,
)
DEVICE = DeviceSpec(
    name="dev",
    bf16_tflops=100.0,
    fp16_tflops=100.0,
    fp32_tflops=25.0,
    memory_gib=80.0,
    memory_gbps=2000.0,
    matmul_efficiency=0.5,
    memory_efficiency=0.8,
)
SWITCH = LinkSpec(bandwidth_gbps=100.0, latency_us=10.0, efficiency=0.8)
NIC = LinkSpec(bandwidth_gbps=25.0, latency_us=20.0, efficiency=0.5)


def cluster(nodes: int = 1, intra: LinkSpec = SWITCH) -> ClusterSpec:
    return ClusterSpec(
        name="test",
        device=DEVICE,
        devices_per_node=8,
        num_nodes=nodes,
        intra_node=intra,
        inter_node=NIC,
    )


def test_gemm_roofline_compute_and_memory_bound() -> None:
    big = gemm_time_s(8192, 8192, 8192, DEVICE, "bf16")
    assert big == pytest.approx(2 * 8192**3 / (100e12 * 0.5))
    # A 1-row GEMM reads the whole weight: memory-bound.
    thin = gemm_time_s(1, 8192, 8192, DEVICE, "bf16")
    assert thin == pytest.approx(2 * (8192 + 8192 * 8192 + 8192) / (2000e9 * 0.8))


def test_memory_of_a_tiny_model_by_hand() -> None:
    """Every memory term of a 2-layer model on one device, worked out by hand."""
    train = make_train(seq_len=32, global_batch_size=1)
    layout = Layout(distributed_optimizer=False)
    pred = analytical().simulate(Job(model=TINY, cluster=cluster(), train=train), layout)
    # Parameters: attention 64*(64+2*64) + 64*64 = 16384; SwiGLU 3*64*256 = 49152; two
    # RMSNorms 128 -> 65664 per layer; 2 layers + embedding 64000 + output 64000 + final norm 64.
    params = 2 * 65664 + 64000 + 64000 + 64
    assert TINY.num_params == params == 259392
    mem = pred.memory_breakdown_gib
    assert mem["weights"] * GIB == pytest.approx(2 * params)
    assert mem["gradients"] * GIB == pytest.approx(4 * params)
    assert mem["optimizer"] * GIB == pytest.approx(12 * params)
    # Saved per token and layer: 4 norm tensors 4*2*64 = 512; Q, K, V and attention output
    # 2*(64+128+64) = 512; fp32 log-sum-exp 4*4 = 16; SwiGLU gate, up, product 2*3*256 = 1536.
    per_token_layer = 512 + 512 + 16 + 1536
    assert mem["activations"] * GIB == pytest.approx(per_token_layer * 32 * 2)
    # Working set: one layer's activations in its backward, or the logits (6 B each) during the
    # loss backward, whichever is larger: here the logits, 32 * 1000 * 6 > 2576 * 32.
    assert mem["working"] * GIB == pytest.approx(max(per_token_layer * 32, 32 * 1000 * 6))
    # The allocator loses 15% of what it reserves for what the step allocates and frees again
    # (activations and the working set; megatron_core keeps its gradients in one buffer); the
    # test device has no runtime memory and its cluster no communicator buffers.
    churning = per_token_layer * 32 * 2 + 32 * 1000 * 6
    assert mem["fragmentation"] * GIB == pytest.approx(churning * 0.15 / 0.85)
    assert mem["reserved"] == 0.0
    assert pred.memory_gib == pytest.approx(sum(mem.values()))


def test_what_a_rank_holds_outside_its_tensors() -> None:
    """The runtime's part and one buffer per communicator: dp 2 x tp 2 x pp 2 of a tied model
    uses the world, TP, DP, two point-to-point, the embedding and the model-parallel group."""
    held = dataclasses.replace(
        cluster(),
        device=dataclasses.replace(DEVICE, runtime_memory_gib=1.25),
        communicator_buffer_gib=0.5,
    )
    tied = dataclasses.replace(TINY, tied_embeddings=True)
    train = make_train(seq_len=32, global_batch_size=8)
    job = Job(model=tied, cluster=held, train=train)
    one = analytical().simulate(job, Layout(distributed_optimizer=False))
    assert one.memory_breakdown_gib["reserved"] == pytest.approx(1.25 + 0.5)  # the world group
    split = Layout(dp=2, tp=2, pp=2, distributed_optimizer=False)
    many = analytical().simulate(job, split)
    assert many.memory_breakdown_gib["reserved"] == pytest.approx(1.25 + 7 * 0.5)
    fixed = AnalyticalSimulator(
        dataclasses.replace(analytical().constants, reserved_memory_gib=4.0)
    ).simulate(job, split)  # a calibration's fixed figure
    assert fixed.memory_breakdown_gib["reserved"] == 4.0


def test_megatron_deepspeed_keeps_its_logits_in_fp32_twice_over() -> None:
    """GPTModelPipe casts the logits to fp32 and DeepSpeed keeps the last stage's two output
    buffers past their backward: 14 bytes per logit against Megatron-Core's 6 (the working
    set of this model is the logits', 32 tokens x 1000)."""
    for framework, per_logit in (("megatron_core", 6), ("megatron_deepspeed", 14)):
        train = make_train(framework, seq_len=32, global_batch_size=1)
        pred = analytical().simulate(
            Job(model=TINY, cluster=cluster(), train=train), Layout(distributed_optimizer=False)
        )
        assert pred.memory_breakdown_gib["working"] * GIB == pytest.approx(32 * 1000 * per_logit)


def test_unfused_attention_past_the_fused_kernel_keeps_an_fp32_softmax() -> None:
    """Past the framework's fused_softmax_max_seq Megatron's FusedScaleMaskSoftmax runs
    PyTorch's softmax in fp32: autograd keeps its fp32 output (4 B) and the 16-bit copy that
    multiplies V (2 B) per score, where the fused kernel keeps one 16-bit output (2 B). Two
    layers of 4 heads at s = 64 and micro-batch 2 (8 softmax batches, a multiple of the
    kernel's 8 per block at 64 keys): 2 x 2 x 64 x 4 x 64 scores, 4 B more each
    (docs/reference.md 3.3)."""
    fused = make_train(seq_len=64, global_batch_size=2, flash_attention=False)
    wide = dataclasses.replace(
        fused, framework=dataclasses.replace(fused.framework, fused_softmax_max_seq=32)
    )
    assert (fused.softmax_in_fp32(TINY, 2, 1), wide.softmax_in_fp32(TINY, 2, 1)) == (False, True)
    layout = Layout(micro_batch=2, distributed_optimizer=False)
    a = (
        analytical()
        .simulate(Job(model=TINY, cluster=cluster(), train=fused), layout)
        .memory_breakdown_gib
    )
    b = (
        analytical()
        .simulate(Job(model=TINY, cluster=cluster(), train=wide), layout)
        .memory_breakdown_gib
    )
    assert (b["activations"] - a["activations"]) * GIB == pytest.approx(2 * 2 * 64 * 4 * 64 * 4)
    big = dataclasses.replace(
        TINY,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=32,
        head_dim=128,
        ffn_hidden_size=11008,
    )
    long = make_train(seq_len=8192, global_batch_size=1, flash_attention=False)
    unfit = dataclasses.replace(
        long, framework=dataclasses.replace(long.framework, fused_softmax_max_seq=8192)
    )
    layout = Layout(distributed_optimizer=False)
    slow = analytical().simulate(Job(model=big, cluster=cluster(), train=long), layout).step_time_s
    assert (
        slow
        > analytical().simulate(Job(model=big, cluster=cluster(), train=unfit), layout).step_time_s
    )


def test_a_tied_embedding_gradient_is_reduced_in_the_dtype_it_is_accumulated_in() -> None:
    """vocab / tp x hidden elements: Megatron reduces its main_grad (fp32 by default);
    DeepSpeed's BF16_Optimizer (no ZeRO) reduces its fp32 copy; under ZeRO-1 the bf16 gradient
    autograd made (docs/reference.md 7.2)."""
    tied = dataclasses.replace(TINY, tied_embeddings=True)
    layout = Layout(dp=2, tp=2, pp=2, distributed_optimizer=False)
    elements = 1000 / 2 * 64
    core = make_train("megatron_core", seq_len=32, global_batch_size=8)
    deepspeed = make_train("megatron_deepspeed", seq_len=32, global_batch_size=8)
    assert tied_embedding_grad_bytes(tied, core, layout) == elements * 4
    assert tied_embedding_grad_bytes(tied, deepspeed, layout) == elements * 4  # BF16_Optimizer
    zero1 = dataclasses.replace(layout, distributed_optimizer=True)
    assert tied_embedding_grad_bytes(tied, deepspeed, zero1) == elements * 2
    assert tied_embedding_grad_bytes(TINY, core, layout) == 0.0  # untied
    assert tied_embedding_grad_bytes(tied, core, dataclasses.replace(layout, pp=1, dp=4)) == 0.0


def test_distributed_optimizer_shards_states_by_dp() -> None:
    train = make_train(seq_len=32, global_batch_size=8)
    sim = analytical()
    job = Job(model=TINY, cluster=cluster(), train=train)
    plain = sim.simulate(job, Layout(dp=8, distributed_optimizer=False))
    sharded = sim.simulate(job, Layout(dp=8, distributed_optimizer=True))
    assert sharded.memory_breakdown_gib["optimizer"] == pytest.approx(
        plain.memory_breakdown_gib["optimizer"] / 8
    )


def test_all_reduce_alpha_beta_inside_a_switch_node() -> None:
    group = place_group(8, 1, 8)
    assert (group.per_node, group.nodes) == (8, 1)
    nbytes = 1e9
    expected = 2 * 7 / 8 * nbytes / (100e9 * 0.8) + 10e-6
    assert all_reduce_time_s(nbytes, group, cluster()) == pytest.approx(expected)


def test_all_reduce_across_nodes_is_hierarchical() -> None:
    """Reduce-scatter in the node, 1/8 of the data across 2 nodes, all-gather in the node."""
    group = place_group(16, 1, 8)
    assert (group.per_node, group.nodes) == (8, 2)
    nbytes = 1e9
    intra = 2 * 7 / 8 * nbytes / (100e9 * 0.8) + 10e-6
    inter = 2 * 1 / 2 * (nbytes / 8) / (25e9 * 0.5) + 20e-6
    assert all_reduce_time_s(nbytes, group, cluster(2)) == pytest.approx(intra + inter)


def test_a_group_over_whole_nodes_crosses_at_the_measured_whole_node_bandwidth() -> None:
    """Jean Zay's case (docs/reference.md 1.4): four 100 Gb/s links per node on paper, 5.07
    GB/s measured by an all-reduce over whole nodes. A group holding every GPU of its nodes
    crosses at the measured figure (here 5 GB/s per node); one with half of each node at its
    NICs' share, as without the figure."""
    measured = dataclasses.replace(
        cluster(2), inter_node=dataclasses.replace(NIC, whole_node_gbps=5.0)
    )
    nbytes = 1e9
    intra = 2 * 7 / 8 * nbytes / (100e9 * 0.8) + 10e-6
    inter = 2 * 1 / 2 * nbytes / 5e9 + 20e-6
    whole = place_group(16, 1, 8)
    assert all_reduce_time_s(nbytes, whole, measured) == pytest.approx(intra + inter)
    half = place_group(8, 2, 8)
    assert (half.per_node, half.nodes) == (4, 2)
    assert all_reduce_time_s(nbytes, half, measured) == all_reduce_time_s(nbytes, half, cluster(2))


def test_a_measured_latency_slope_adds_per_further_rank_and_level() -> None:
    """With ``step_latency_us`` each rank beyond the first of a level adds to the call's
    latency (SimuMax's B200 fits, docs/reference.md 1.6): 8 in the node, 2 nodes."""
    sloped = cluster(2, dataclasses.replace(SWITCH, step_latency_us=3.0))
    nic = dataclasses.replace(NIC, step_latency_us=4.0)
    sloped = dataclasses.replace(sloped, inter_node=nic)
    nbytes = 1e9
    node = place_group(8, 1, 8)
    flat = all_gather_time_s(nbytes, node, cluster())
    assert all_gather_time_s(nbytes, node, sloped) == pytest.approx(flat + 7 * 3e-6)
    both = place_group(16, 1, 8)
    plain = all_reduce_time_s(nbytes, both, cluster(2))
    assert all_reduce_time_s(nbytes, both, sloped) == pytest.approx(plain + 7 * 3e-6 + 1 * 4e-6)


def test_full_mesh_group_uses_only_its_own_links() -> None:
    """A TP group of 4 on the 910B full mesh has 3 links of 28 GB/s, not 196 GB/s."""
    mesh = LinkSpec(
        bandwidth_gbps=196.0,
        latency_us=0.0,
        efficiency=1.0,
        topology="full_mesh",
        peer_link_gbps=28.0,
    )
    assert mesh.group_bandwidth_gbps(4) == pytest.approx(84.0)
    assert mesh.group_bandwidth_gbps(8) == pytest.approx(196.0)
    assert mesh.group_bandwidth_gbps(2) == pytest.approx(28.0)


def test_all_to_all_strided_group_spans_nodes() -> None:
    """EP=4 at stride 4 on 8-device nodes: 2 members per node, 2 nodes."""
    group = place_group(4, 4, 8)
    assert (group.per_node, group.nodes) == (2, 2)
    send = 4e8
    intra = send * 1 / 4 / (100e9 * 0.8)
    inter = send * 2 / 4 / (25e9 * 0.5)
    assert all_to_all_time_s(send, group, cluster(2)) == pytest.approx(max(intra, inter) + 20e-6)


def test_deepep_sends_a_token_once_per_node_by_hand() -> None:
    """EP=32 over 4 nodes, top-8: a token reaches 3 (1 - (3/4)^8) = 2.70 other nodes, once
    each, against the all-to-all's 8 x 3/4 = 6 copies; in the node, the copies for the 7 local
    peers (8 x 7/32 of a token) and those forwarded to them (6 x 7/8)."""
    group = place_group(32, 1, 8)
    assert (group.per_node, group.nodes) == (8, 4)
    token_bytes, copies = 1e8, 8
    remote = 3 * (1 - 0.75**8)
    inter = token_bytes * remote / (25e9 * 0.5)
    intra = token_bytes * (8 * 7 / 32 + 6 * 7 / 8) / (100e9 * 0.8)
    expected = max(inter, intra) + 20e-6
    assert deepep_time_s(token_bytes, copies, group, cluster(4)) == pytest.approx(expected)
    plain = all_to_all_time_s(token_bytes * copies, group, cluster(4))
    assert plain == pytest.approx(token_bytes * 6 / (25e9 * 0.5) + 20e-6)  # 2.2x the bytes
    inside = place_group(8, 1, 8)  # one node: DeepEP's NVLink kernels are the all-to-all
    assert deepep_time_s(token_bytes, copies, inside, cluster()) == all_to_all_time_s(
        token_bytes * copies, inside, cluster()
    )


LLAMA = ModelSpec(
    name="llama-ish",
    num_layers=16,
    hidden_size=2048,
    ffn_hidden_size=5632,
    num_attention_heads=16,
    num_kv_heads=4,
    head_dim=128,
    vocab_size=32000,
)
MOE = ModelSpec(
    name="moe-ish",
    num_layers=8,
    hidden_size=1024,
    ffn_hidden_size=4096,
    num_attention_heads=8,
    num_kv_heads=8,
    head_dim=128,
    vocab_size=32000,
    num_experts=8,
    moe_top_k=2,
    expert_ffn_hidden_size=1408,
    shared_expert_ffn_hidden_size=1408,
    first_dense_layers=1,
)
TRAIN = make_train(seq_len=4096, global_batch_size=64)


@pytest.mark.parametrize("model", [LLAMA, MOE])
def test_more_tp_never_raises_weight_memory(model: ModelSpec) -> None:
    sim = analytical()
    weights = [
        sim.simulate(
            Job(model=model, cluster=cluster(2), train=TRAIN), Layout.resolve(16, tp=tp)
        ).memory_breakdown_gib["weights"]
        for tp in (1, 2, 4, 8)
    ]
    assert weights == sorted(weights, reverse=True)


@pytest.mark.parametrize("model", [LLAMA, MOE])
def test_more_recompute_never_raises_activation_memory(model: ModelSpec) -> None:
    sim = analytical()
    layouts = [
        Layout.resolve(16, tp=2, pp=2, recompute=rc) for rc in ("none", "selective", "full")
    ]
    acts = [
        sim.simulate(Job(model=model, cluster=cluster(2), train=TRAIN), lay).memory_breakdown_gib[
            "activations"
        ]
        for lay in layouts
    ]
    assert acts[0] >= acts[1] >= acts[2]
    assert acts[2] < acts[0] / 5


def test_full_recompute_adds_one_forward() -> None:
    """Recompute time of a full-recompute layout equals its forward compute (no comm)."""
    train = make_train(seq_len=2048, global_batch_size=8)
    sim = analytical()
    job = Job(model=LLAMA, cluster=cluster(), train=train)
    full = sim.simulate(job, Layout(dp=8, recompute="full"))
    none = sim.simulate(job, Layout(dp=8))
    assert full.breakdown["compute"] == pytest.approx(none.breakdown["compute"])
    # Forward is about a third of forward + backward (GEMMs: exactly 1 of 3).
    ratio = full.breakdown["recompute"] / full.breakdown["compute"]
    assert 0.25 < ratio < 0.4


def test_bubble_shrinks_with_virtual_stages() -> None:
    sim = analytical()
    job = Job(model=LLAMA, cluster=cluster(2), train=TRAIN)
    plain = sim.simulate(job, Layout.resolve(16, tp=2, pp=4))
    interleaved = sim.simulate(job, Layout.resolve(16, tp=2, pp=4, vpp=2))
    stages = plain.detail["stage_time_s"]
    assert plain.breakdown["bubble"] == pytest.approx(sum(stages) - max(stages))
    # Interleaving divides the fill-and-drain by v (each chunk also sends v times the p2p).
    chunks = interleaved.detail["stage_time_s"]
    assert interleaved.breakdown["bubble"] == pytest.approx((sum(chunks) - max(chunks)) / 2)
    assert interleaved.breakdown["bubble"] < 0.6 * plain.breakdown["bubble"]


@pytest.mark.parametrize(
    "kw",
    [
        {"tp": 8},
        {"tp": 2, "pp": 4, "vpp": 2},
        {"tp": 2, "cp": 2, "recompute": "full"},
        {"pp": 2, "distributed_optimizer": False},
    ],
)
def test_breakdown_sums_to_step_time_and_mfu_is_a_fraction(kw: dict[str, object]) -> None:
    pred = analytical().simulate(
        Job(model=LLAMA, cluster=cluster(2), train=TRAIN), Layout.resolve(16, **kw)
    )
    assert sum(pred.breakdown.values()) == pytest.approx(pred.step_time_s)
    assert all(v >= 0 for v in pred.breakdown.values())
    assert 0 < pred.mfu < 1
    tokens = TRAIN.tokens_per_step / pred.step_time_s / 16
    assert pred.tokens_per_s_per_device == pytest.approx(tokens)


def test_moe_expert_parallel_shards_experts_and_adds_all_to_all() -> None:
    sim = analytical()
    job = Job(model=MOE, cluster=cluster(2), train=TRAIN)
    one = sim.simulate(
        job,
        Layout.resolve(16, tp=2, sequence_parallel=True),
    )
    four = sim.simulate(job, Layout.resolve(16, tp=2, ep=4))
    assert one.breakdown["ep_comm"] == 0
    assert four.breakdown["ep_comm"] > 0
    assert four.memory_breakdown_gib["weights"] < one.memory_breakdown_gib["weights"]


@pytest.mark.parametrize("dispatcher", ["alltoall", "allgather"])
def test_moe_dispatchers_by_hand(dispatcher: str) -> None:
    """Megatron-Core's all-to-all dispatcher gathers over TP the top-k copies that arrived by
    the EP all-to-all; the allgather one gathers each token once over TP x EP (a TP stage, then
    an EP stage of ep times the tokens), and both reduce-scatter back; shared experts gather the
    tokens over TP as a dense MLP does (docs/reference.md 7.7). By hand on one device-bound MoE
    layer: TP all-reduces 1 (attention) + k or 1 (routed) + 1 (shared)."""
    from autotune.simulators.analytical.layer import layer_times_s
    from autotune.simulators.analytical.stages import LayerCost

    c = analytical("simulator.host_op_overhead_us=0.001").constants
    train = make_train(seq_len=4096, global_batch_size=64, moe_dispatcher=dispatcher)
    layout = Layout.resolve(16, tp=2, ep=4)
    two = cluster(2)
    times = LayerCost(
        *layer_times_s(Job(model=MOE, cluster=two, train=train), True, layout, c),
        activation_bytes=0.0,
        input_bytes=0.0,
    )
    token_bytes = 4096 * MOE.hidden_size * 2  # one micro-batch of bf16 tokens
    tp_one = all_reduce_time_s(token_bytes, layout.group("tp", 8), two)
    ep_group = layout.group("ep", 8)
    if dispatcher == "alltoall":
        tp_transfers = 1 + MOE.moe_top_k + 1
        ep_s = 2 * all_to_all_time_s(MOE.moe_top_k * token_bytes / 2, ep_group, two)
    else:
        tp_transfers = 1 + 1 + 1
        ep_s = all_reduce_time_s(4 * token_bytes, ep_group, two)
    assert times.tp_forward_s == pytest.approx(tp_transfers * tp_one)
    assert times.tp_backward_s == pytest.approx(tp_transfers * tp_one)
    assert times.ep_forward_s == times.ep_backward_s == pytest.approx(ep_s)


def test_expert_tensor_parallelism_by_hand() -> None:
    """TP 2 with ETP 1 (MoE parallel folding): attention and shared experts gather over TP as
    before; the routed experts run whole on each rank, on the copies its own 1/TP of the
    tokens sent (no expert TP gather), so their GEMMs do the same FLOPs on half the tokens at
    twice the width, and a rank holds twice the expert weights of ETP 2."""
    from autotune.simulators.analytical.layer import layer_times_s
    from autotune.simulators.analytical.stages import LayerCost

    c = analytical("simulator.host_op_overhead_us=0.001").constants
    two = cluster(2)
    folded, shared_tp = Layout.resolve(16, tp=2, ep=4, etp=1), Layout.resolve(16, tp=2, ep=4)
    assert (folded.expert_dp, shared_tp.expert_dp) == (4, 2)

    def times(layout: Layout) -> LayerCost:
        return LayerCost(
            *layer_times_s(Job(model=MOE, cluster=two, train=TRAIN), True, layout, c),
            activation_bytes=0,
            input_bytes=0,
        )

    token_bytes = 4096 * MOE.hidden_size * 2  # one micro-batch of bf16 tokens
    tp_one = all_reduce_time_s(token_bytes, folded.group("tp", 8), two)
    assert times(folded).tp_forward_s == pytest.approx(2 * tp_one)  # attention + shared
    assert times(shared_tp).tp_forward_s == pytest.approx((2 + MOE.moe_top_k) * tp_one)
    assert times(folded).ep_forward_s == pytest.approx(times(shared_tp).ep_forward_s)
    sim = analytical()
    weights = {
        etp: sim.simulate(Job(model=MOE, cluster=two, train=TRAIN), lay).memory_breakdown_gib[
            "weights"
        ]
        for etp, lay in ((1, folded), (2, shared_tp))
    }
    # 7 MoE layers (one dense first) of 8 experts over EP 4: 2 experts of 3 matrices of h x f
    # per rank, ETP splits f.
    expert_params = 7 * 2 * 3 * MOE.hidden_size * MOE.expert_ffn_hidden_size
    per_param = TRAIN.framework.state_bytes_per_param["bf16"]["distributed"].weight
    extra = expert_params * (1 - 1 / 2) * per_param / GIB
    assert weights[1] - weights[2] == pytest.approx(extra)


def test_tp_group_on_full_mesh_is_slower_than_on_a_switch() -> None:
    mesh = LinkSpec(
        bandwidth_gbps=100.0,
        latency_us=10.0,
        efficiency=0.8,
        topology="full_mesh",
        peer_link_gbps=100.0 / 7,
    )
    sim = analytical()
    lay = Layout.resolve(8, tp=2)
    switch = sim.simulate(Job(model=LLAMA, cluster=cluster(), train=TRAIN), lay).breakdown[
        "tp_comm"
    ]
    meshed = sim.simulate(
        Job(model=LLAMA, cluster=cluster(intra=mesh), train=TRAIN), lay
    ).breakdown["tp_comm"]
    assert math.isclose(meshed / switch, 7.0, rel_tol=0.05)


def test_deterministic_and_from_config_rejects_unknown_constants() -> None:
    sim = analytical("simulator.attention_efficiency=0.5")
    lay = Layout.resolve(16, tp=4, pp=2)
    job = Job(model=LLAMA, cluster=cluster(2), train=TRAIN)
    assert sim.simulate(job, lay) == sim.simulate(job, lay)
    from autotune.simulators import SpecError

    constants = {**catalog.simulator_constants("analytical"), "attention_eficiency": 0.5}
    with pytest.raises(SpecError, match="unknown key.s. attention_eficiency"):
        AnalyticalSimulator.from_config(constants)
    constants.pop("attention_eficiency")
    constants.pop("reserved_memory_gib")
    with pytest.raises(SpecError, match="missing key.s. reserved_memory_gib"):
        AnalyticalSimulator.from_config(constants)


def test_host_dispatch_bounds_a_tiny_layer() -> None:
    """Kernels of a 64-wide layer take nanoseconds: each pass costs ops x host overhead."""
    c = analytical().constants
    train = make_train(seq_len=32, global_batch_size=1)
    job = Job(model=TINY, cluster=cluster(), train=train)
    pred = analytical().simulate(job, Layout(recompute="none"))
    host = 33 * 20e-6  # 33 eager ops per layer forward, 20 us each (analytical.yaml)
    host_backward = 55 * 20e-6  # 55 autograd nodes per layer backward
    assert c.host_ops_per_layer_forward * c.host_op_overhead_us * 1e-6 == pytest.approx(host)
    assert c.host_ops_per_layer_backward * c.host_op_overhead_us * 1e-6 == pytest.approx(
        host_backward
    )
    # Logits: forward + 2 backward GEMMs of 32 x 64 x 1000, plus 2 passes over 6 B per logit.
    logits = 3 * gemm_time_s(32, 64, 1000, DEVICE, "bf16") + 2 * 32 * 1000 * 6 / (2000e9 * 0.8)
    # Two layers, each a forward and a backward pass at the host's pace.
    assert pred.breakdown["compute"] == pytest.approx(2 * (host + host_backward) + logits)
    # Without the host bound the same layers are far faster (the GPU work is sub-microsecond
    # plus 16 launches of 4 us forward, twice that backward).
    fast = analytical("simulator.host_op_overhead_us=0").simulate(job, Layout(recompute="none"))
    assert fast.breakdown["compute"] < pred.breakdown["compute"] / 2


def test_collectives_fill_the_device_idle_time_of_a_host_bound_layer() -> None:
    """While the host sets a layer's pace, the TP all-reduces run in the device's idle time:
    exposed only beyond it (the hierarchical simulator's max(device with collectives, host))."""
    from autotune.simulators.analytical.layer import layer_times_s

    train = make_train(seq_len=32, global_batch_size=2)
    layout = Layout.resolve(2, tp=2, recompute="none")
    bound = analytical()
    free = analytical("simulator.host_op_overhead_us=0")
    # (forward, backward, core, tp forward, tp backward, ...) of one dense layer
    job = Job(model=TINY, cluster=cluster(), train=train)
    host = layer_times_s(job, False, layout, bound.constants)
    device = layer_times_s(job, False, layout, free.constants)
    tp_one = all_reduce_time_s(32 * 64 * 2, layout.group("tp", 8), cluster())
    assert device[3] == pytest.approx(2 * tp_one) and device[4] == pytest.approx(2 * tp_one)
    idle_forward, idle_backward = host[0] - device[0], host[1] - device[1]
    assert idle_forward > 2 * tp_one and idle_backward > 2 * tp_one  # 20 us per host op
    assert host[3] == 0.0 and host[4] == 0.0
    # A layer whose kernels outlast the host's dispatch keeps every collective exposed.
    wide = dataclasses.replace(TINY, hidden_size=8192, ffn_hidden_size=32768)
    big = make_train(seq_len=4096, global_batch_size=2)
    times = layer_times_s(
        Job(model=wide, cluster=cluster(), train=big), False, layout, bound.constants
    )
    assert times[3] == pytest.approx(
        2 * all_reduce_time_s(4096 * 8192 * 2, layout.group("tp", 8), cluster())
    )


def test_unfused_attention_by_hand() -> None:
    """Megatron's pre-flash attention: score-matrix traffic when the stack runs no flash, with
    and without attention dropout. Micro-batch 2, so that the 2 x 4 softmax batches are a
    multiple of the fused kernel's 8 per block at 32 keys (at micro-batch 1 the kernel does
    not run: :mod:`autotune.simulators.fused_softmax`)."""
    from autotune.simulators.analytical.layer import _unfused_attention_s

    train = make_train(seq_len=32, global_batch_size=2, flash_attention=False, dropout=0.1)
    plain = dataclasses.replace(train, dropout=None)  # TINY is no GPT: no dropout
    c = analytical().constants
    forward, backward = _unfused_attention_s(TINY, 64, train, Layout(micro_batch=2), DEVICE, c)
    # 2 x 4 heads x 32 queries x 32 keys = 8192 scores; HBM 2000 GB/s x 0.8 = 1.6e12 B/s.
    # QK^T + PV, no causal skip: 2 * 2*32*(64+64)/2 FLOPs per token x 64 tokens = 524288 FLOPs
    # at 100 TF x 0.5 = 10.5 ns, below their 4 B/score = 20.5 ns of traffic. Softmax 4 and
    # dropout 5 B/score forward, 6 and 5 backward.
    assert forward == pytest.approx(4 * 8192 / 1.6e12 + 9 * 8192 / 1.6e12)
    assert backward == pytest.approx(8 * 8192 / 1.6e12 + 11 * 8192 / 1.6e12)
    forward, backward = _unfused_attention_s(TINY, 64, plain, Layout(micro_batch=2), DEVICE, c)
    assert forward == pytest.approx(4 * 8192 / 1.6e12 + 4 * 8192 / 1.6e12)
    assert backward == pytest.approx(8 * 8192 / 1.6e12 + 6 * 8192 / 1.6e12)
    # Saved for backward: 5 B per score (softmax output, dropout mask and output), per token
    # 4 heads x 32 keys x 5 = 640 B on top of the flash-attention tensors of the memory test
    # but flash's fp32 log-sum-exp (4 heads x 4 B), and the 1-byte masks of the two hidden
    # dropouts (2 x 64); without dropout 2 B per score.
    layout = Layout(micro_batch=2, recompute="none", distributed_optimizer=False)
    fused = make_train(seq_len=32, global_batch_size=2)
    new_mem = (
        analytical()
        .simulate(Job(model=TINY, cluster=cluster(), train=fused), layout)
        .memory_breakdown_gib
    )
    lse = 4 * 4
    for run, per_token in ((train, 640 + 2 * 64 - lse), (plain, 4 * 32 * 2 - lse)):
        old_mem = (
            analytical()
            .simulate(Job(model=TINY, cluster=cluster(), train=run), layout)
            .memory_breakdown_gib
        )
        extra = (old_mem["activations"] - new_mem["activations"]) * GIB
        assert extra == pytest.approx(per_token * 64 * 2)


def test_unfused_attention_gemms_run_at_their_tiles_and_waves() -> None:
    """The same products on a device of 108 SMs, where they are compute-bound: 4 heads of 128,
    seq 2048, micro-batch 1. QK^T and dP write 4 x [2048, 2048]: 4 x 128 tiles of 256 x 128 =
    512, five waves of which the last is 80/108 full (512/540). PV, dQ, dK and dV write
    4 x [2048, 128] with K = 2048: 32 tiles of 256 x 128, split three ways over K, 96 blocks in
    one wave of 108 (96/108). Forward: half the FLOPs at each; backward: dP at the first, the
    other three at the second."""
    from autotune.simulators.analytical.layer import _unfused_attention_s

    model = dataclasses.replace(TINY, hidden_size=512, head_dim=128)
    train = make_train(seq_len=2048, global_batch_size=1, flash_attention=False, dropout=0.1)
    sms = dataclasses.replace(DEVICE, sm_count=108)
    constants = analytical().constants
    plain = _unfused_attention_s(model, 2048, train, Layout(), DEVICE, constants)
    tiled = _unfused_attention_s(model, 2048, train, Layout(), sms, constants)
    flops = 2.0 * model.core_attention_flops_per_token(2048) * 2048  # QK^T and PV
    peak = 100e12 * 0.5
    scores = 4 * 2048 * 2048
    assert flops / peak > 4 * scores / 1.6e12  # the GEMMs outlast their traffic
    forward_rest = 9 * scores / 1.6e12
    backward_rest = 11 * scores / 1.6e12
    assert plain == pytest.approx((flops / peak + forward_rest, 2 * flops / peak + backward_rest))
    score_w, narrow_w = 512 / 540, 96 / 108
    assert tiled[0] == pytest.approx(
        flops / 2 * (1 / score_w + 1 / narrow_w) / peak + forward_rest
    )
    assert tiled[1] == pytest.approx(
        flops / 2 * (1 / score_w + 3 / narrow_w) / peak + backward_rest
    )


def test_a_device_without_flash_kernels_runs_unfused_attention() -> None:
    no_flash = DeviceSpec(
        name="v100-like",
        bf16_tflops=0.0,
        fp16_tflops=100.0,
        fp32_tflops=25.0,
        memory_gib=80.0,
        memory_gbps=2000.0,
        matmul_efficiency=0.5,
        memory_efficiency=0.8,
        supports_flash_attention=False,
    )
    old = ClusterSpec(
        name="old",
        device=no_flash,
        devices_per_node=8,
        num_nodes=1,
        intra_node=SWITCH,
        inter_node=NIC,
    )
    new = dataclasses.replace(
        old, device=dataclasses.replace(no_flash, supports_flash_attention=True)
    )
    train = make_train(seq_len=2048, global_batch_size=8, precision="fp16")
    assert train.uses_flash_attention(new) and not train.uses_flash_attention(old)
    sim = analytical()
    slow = sim.simulate(
        Job(model=LLAMA, cluster=old, train=train), Layout(dp=8)
    ).memory_breakdown_gib["activations"]
    fast = sim.simulate(
        Job(model=LLAMA, cluster=new, train=train), Layout(dp=8)
    ).memory_breakdown_gib["activations"]
    assert slow > fast


def test_pipeline_p2p_sends_a_tp_slice_and_all_gathers_it_by_hand() -> None:
    """Scatter/gather p2p (Narayanan et al. 2021 sec. 4.1; DeepSpeed is_pipe_partitioned).

    tp2 pp2 dp4 on 2 nodes of 8: a stage spans 8 ranks, so the p2p crosses nodes. Each TP rank
    sends its half of the boundary activation, 128 tokens x 64 x 2 B / 2 = 8192 B, over the NIC
    (25 GB/s x 0.5, 20 us), and the receiver all-gathers the full 16384 B over its TP pair in the
    node (1/2 x 16384 B at 100 GB/s x 0.8, 10 us). Forward and backward each do both; m = 2.
    DeepSpeed's schedule trades the activation and the gradient one after the other: each
    boundary costs two sends and 1.5 gathers (docs/reference.md 7.3).
    """
    train = make_train("megatron_deepspeed", seq_len=128, global_batch_size=8)
    layout = dataclasses.replace(Layout.resolve(16, tp=2, pp=2), sequence_parallel=False)
    job = Job(model=TINY, cluster=cluster(2), train=train)
    pred = analytical().simulate(job, layout)
    send = 8192 / 12.5e9 + 20e-6
    gather = 0.5 * 16384 / 80e9 + 10e-6
    m = 8 // (layout.dp * layout.micro_batch)
    assert pred.breakdown["pp_comm"] == pytest.approx(m * 2 * (2 * send + 1.5 * gather))
    # Megatron-Core sends the whole activation from every TP rank, no gather (reference 7.3).
    core = make_train("megatron_core", seq_len=128, global_batch_size=8)
    pred = analytical().simulate(Job(model=TINY, cluster=cluster(2), train=core), layout)
    assert pred.breakdown["pp_comm"] == pytest.approx(m * 2 * (16384 / 12.5e9 + 20e-6))
    # With sequence parallelism the boundary is already a 1/t slice: no all-gather.
    sp = analytical().simulate(
        job,
        dataclasses.replace(layout, sequence_parallel=True),
    )
    assert sp.breakdown["pp_comm"] == pytest.approx(m * 2 * 2 * send)


def test_a_pipeline_rank_pays_the_network_only_on_the_boundaries_that_cross_it() -> None:
    """1F1B exchanges with the next stage, then with the previous one, blocking. The rank
    whose links are slowest pays its two boundaries: both over the network with a stage per
    node, one over it when two stages share a node (ranks 0, 4 | 8, 12), none inside one."""
    train = make_train(seq_len=2048, global_batch_size=8)
    send = 2048 * 64 * 2  # tokens x hidden x 2 B, the whole activation (tp 1)
    near, far = (p2p_time_s(send, same_node, cluster(2)) for same_node in (True, False))
    assert far > 2 * near
    expected = {
        (16, 8, 2): 2 * far,  # stages 8 ranks apart: a node each
        (16, 4, 4): far + near,  # 4 apart: two per node
        (8, 2, 4): 2 * near,  # the whole pipeline in one node
    }
    for (world, dp, pp), per_microbatch in expected.items():
        layout = Layout.resolve(world, dp=dp, pp=pp)
        model = dataclasses.replace(TINY, num_layers=pp)
        pred = analytical().simulate(
            Job(model=model, cluster=cluster(world // 8), train=train), layout
        )
        m = 8 // dp
        assert pred.breakdown["pp_comm"] == pytest.approx(m * per_microbatch), (world, dp, pp)


def test_interleaved_sends_hide_behind_the_next_chunk_where_the_framework_overlaps_them() -> None:
    """The interleaved schedule exchanges with both neighbours once per chunk. Megatron-Core
    runs that beside the next chunk's compute (overlap_p2p_comm, on with vpp), so a send
    shorter than a chunk costs nothing; Megatron-LM's 2021 schedule blocks on it."""
    model = dataclasses.replace(
        TINY, num_layers=8, hidden_size=2048, ffn_hidden_size=8192, head_dim=512
    )
    layout = Layout.resolve(16, dp=8, pp=2, vpp=2, sequence_parallel=False)
    far = p2p_time_s(2048 * 2048 * 2, False, cluster(2))  # a stage per node: every link crosses
    for framework, per_microbatch in (("megatron_core", 0.0), ("megatron_lm", 2 * far)):
        train = make_train(framework, seq_len=2048, global_batch_size=16)
        job = Job(model=model, cluster=cluster(2), train=train)
        pred = analytical().simulate(job, layout)
        assert pred.breakdown["pp_comm"] == pytest.approx(2 * per_microbatch), framework
        # Without virtual stages both run blocking 1F1B.
        flat = dataclasses.replace(layout, vpp=1)
        pred = analytical().simulate(job, flat)
        assert pred.breakdown["pp_comm"] == pytest.approx(2 * 2 * far), framework


def test_a_gpt_layer_keeps_korthikanti_s_activations_and_nemotron_no_dropout_masks() -> None:
    """With SP and flash attention a GPT layer keeps 34/t bytes per token and hidden size
    (Korthikanti et al. 2022 Table 2 without the attention scores), the two 1-byte hidden
    dropout masks among them; Nemotron-4's layer, LayerNorm and a non-gated MLP too but no
    dropout, keeps 2/t less per token and hidden size."""
    from autotune.simulators.analytical.layer import layer_bytes

    gpt = catalog.load_model("gpt3_175b")
    nemotron = dataclasses.replace(gpt, qkv_bias=False)  # Nemotron-4's block at GPT-3's size
    assert gpt.is_gpt_family and not nemotron.is_gpt_family
    assert not catalog.load_model("nemotron4_340b").is_gpt_family
    assert not catalog.load_model("llama2_7b").is_gpt_family
    train = make_train(seq_len=2048, global_batch_size=8)
    layout = Layout(dp=2, tp=4, sequence_parallel=True)
    c = analytical().constants
    h, tokens, heads = gpt.hidden_size, 2048, gpt.num_attention_heads
    lse = 4 * heads / 4  # flash attention's fp32 log-sum-exp per head and token
    saved = layer_bytes(Job(model=gpt, cluster=cluster(), train=train), False, layout, c)[0]
    assert saved == pytest.approx(tokens * (34 * h / 4 + lse))
    saved = layer_bytes(Job(model=nemotron, cluster=cluster(), train=train), False, layout, c)[0]
    assert saved == pytest.approx(tokens * (32 * h / 4 + lse))
    # A GPT run without dropout (BLOOM's, NeMo 2's GPT-3) keeps no masks either.
    no_dropout = dataclasses.replace(train, dropout=0.0)
    saved = layer_bytes(Job(model=gpt, cluster=cluster(), train=no_dropout), False, layout, c)[0]
    assert saved == pytest.approx(tokens * (32 * h / 4 + lse))


def test_a_selectively_recomputed_layer_holds_its_rebuilt_scores_in_its_backward() -> None:
    """Selective recompute drops the unfused path's attention scores from what a layer keeps,
    and rebuilds them in its backward: the working set is the whole layer's activations, as
    the hierarchical simulator records it (benchmarks/bench_memory_agreement.py)."""
    from autotune.simulators.analytical.layer import layer_bytes

    unfused = make_train(seq_len=4096, global_batch_size=64, flash_attention=False)
    layout = Layout.resolve(16, tp=2, pp=2, recompute="selective")
    c = analytical().constants
    job = Job(model=LLAMA, cluster=cluster(2), train=unfused)
    kept, _, scores = layer_bytes(job, False, layout, c)
    whole = layer_bytes(
        job,
        False,
        Layout.resolve(16, tp=2, pp=2),
        c,
    )[0]
    assert scores > 0 and kept + scores == pytest.approx(whole)  # no log-sum-exp unfused
    pred = analytical().simulate(job, layout)
    assert pred.memory_breakdown_gib["working"] == pytest.approx((kept + scores) / GIB)


def test_fp8_casts_by_hand() -> None:
    """Llama-2-7B at tp=1: the forward casts each linear input (QKV, proj, fc1 read h, fc2
    reads f), the backward each output gradient (3h, h, 2f, h); 2 bytes read, 1 written.
    Where the layer keeps its high-precision input (torchao), the backward casts it again."""
    from autotune.simulators.analytical.layer import _fp8_cast_bytes

    model = catalog.load_model("llama2_7b")
    h, f, tokens = model.hidden_size, model.ffn_hidden_size, 4096.0
    forward, backward = _fp8_cast_bytes(model, False, tokens, Layout(), act=2, kept=True)
    assert forward == pytest.approx(3 * tokens * (3 * h + f))
    assert backward == pytest.approx(3 * tokens * (5 * h + 2 * f))
    again = _fp8_cast_bytes(model, False, tokens, Layout(), act=2, kept=False)
    assert again == pytest.approx((forward, backward + forward))


def test_a_tied_embedding_syncs_its_gradient_between_the_end_stages() -> None:
    """At dp 1 the step's DP time is the tied embedding's all-reduce between the first and the
    last stage: vocab / tp x hidden gradients in the reduction's dtype, over 2 ranks."""
    tied = dataclasses.replace(TINY, num_layers=4, tied_embeddings=True)
    train = make_train(seq_len=32, global_batch_size=4)
    layout = Layout.resolve(8, dp=1, tp=2, pp=4)
    job = Job(model=tied, cluster=cluster(), train=train)
    pred = analytical().simulate(job, layout)
    group = layout.group("embedding", 8)
    assert (group.size, group.stride) == (2, 6)  # stages 0 and 3, tp 2 apart per stage
    expected = all_reduce_time_s(1000 / 2 * 64 * 4, group, cluster())  # fp32 main grads
    assert pred.breakdown["dp_comm"] == pytest.approx(expected)
    untied = dataclasses.replace(tied, tied_embeddings=False)
    assert (
        analytical()
        .simulate(Job(model=untied, cluster=cluster(), train=train), layout)
        .breakdown["dp_comm"]
        == 0.0
    )
    # Without pipelining the one copy needs no sync.
    flat = Layout.resolve(8, dp=1, tp=8)
    assert analytical().simulate(job, flat).breakdown["dp_comm"] == 0.0


def test_a_group_that_does_not_fill_its_last_node_is_priced_at_its_emptiest_node() -> None:
    # 6 members 2 apart on nodes of 8: ranks 0, 2, 4, 6 | 8, 10; the second node's two
    # members carry half the data each over the network.
    group = place_group(6, 2, 8)
    assert (group.per_node, group.nodes) == (2, 3)
    assert place_group(8, 2, 8).nodes == 2 and place_group(4, 2, 8).nodes == 1
    # 12 consecutive ranks: 0-7 | 8-11, and the next group 12-15 | 16-23.
    assert (place_group(12, 1, 8).per_node, place_group(12, 1, 8).nodes) == (4, 3)


def test_a_tensor_parallel_group_that_straddles_two_nodes_pays_the_network() -> None:
    """TP 3 on nodes of 8: the group of ranks 6, 7 | 8 crosses nodes, and every TP group
    waits for it, so TP 3 costs more than TP 4, which stays inside a node."""
    assert (place_group(3, 1, 8).per_node, place_group(3, 1, 8).nodes) == (1, 3)
    nbytes = 64e6
    tp3 = all_reduce_time_s(nbytes, place_group(3, 1, 8), cluster())
    tp4 = all_reduce_time_s(nbytes, place_group(4, 1, 8), cluster())
    assert tp3 > 2 * tp4
    # The simulator prices whole layouts the same way, on 3 nodes of 8.
    model = dataclasses.replace(
        TINY,
        hidden_size=3072,
        ffn_hidden_size=12288,
        num_attention_heads=12,
        num_kv_heads=12,
        head_dim=256,
    )
    train = make_train(seq_len=2048, global_batch_size=24)
    tp_comm = {
        tp: analytical()
        .simulate(
            Job(model=model, cluster=cluster(nodes=3), train=train), Layout.resolve(24, tp=tp)
        )
        .breakdown["tp_comm"]
        for tp in (2, 3, 4)
    }
    assert tp_comm[3] > 2 * tp_comm[4] and tp_comm[4] > tp_comm[2]


def test_each_activation_checkpoint_adds_its_host_calls_where_the_host_sets_the_pace() -> None:
    """Megatron's CheckpointFunction issues 3 torch calls in the forward and 11 in the
    backward of each recomputed layer: a host-bound layer pays them, a device-bound one
    hides them."""
    from autotune.simulators.analytical.layer import layer_times_s
    from autotune.simulators.analytical.stages import LayerCost

    c = analytical().constants
    assert (c.host_ops_per_checkpoint_forward, c.host_ops_per_checkpoint_backward) == (3, 11)
    train = make_train(seq_len=32, global_batch_size=1)
    layout = Layout(recompute="full")

    def checkpoint_s(model: ModelSpec, step: TrainSpec) -> float:
        times = layer_times_s(Job(model=model, cluster=cluster(), train=step), False, layout, c)
        return LayerCost(*times, activation_bytes=0.0, input_bytes=0.0).checkpoint_s

    assert checkpoint_s(TINY, train) == pytest.approx((3 + 11) * 20e-6)
    wide = dataclasses.replace(TINY, hidden_size=8192, ffn_hidden_size=32768)
    assert checkpoint_s(wide, make_train(seq_len=4096, global_batch_size=1)) == 0.0
    # A step with full recompute of the tiny model: every layer of every micro-batch pays it.
    free = analytical(
        "simulator.host_ops_per_checkpoint_forward=0",
        "simulator.host_ops_per_checkpoint_backward=0",
    )
    paid = (
        analytical()
        .simulate(Job(model=TINY, cluster=cluster(), train=train), layout)
        .breakdown["recompute"]
    )
    unpaid = free.simulate(Job(model=TINY, cluster=cluster(), train=train), layout).breakdown[
        "recompute"
    ]
    assert paid - unpaid == pytest.approx(TINY.num_layers * (3 + 11) * 20e-6)


def test_a_recomputed_forward_and_its_backward_are_one_host_device_phase() -> None:
    """The host issues a recomputed forward and then the backward without a pause, so where the
    forward alone is host-bound and the backward device-bound, the device's backlog absorbs the
    host's lead: the pair lasts max(device sum, host sum), not the sum of two maxima (as the
    hierarchical simulator's chunk phases). By hand, on a layer without collectives."""
    from autotune.simulators.analytical.layer import layer_times_s

    layout = Layout(recompute="full")
    train = make_train(seq_len=2048, global_batch_size=1)
    quiet = analytical(
        "simulator.host_op_overhead_us=0.001",
        "simulator.host_ops_per_checkpoint_forward=0",
        "simulator.host_ops_per_checkpoint_backward=0",
    ).constants
    job = Job(model=TINY, cluster=cluster(), train=train)
    device_fwd, device_bwd = layer_times_s(job, False, layout, quiet)[:2]
    host_fwd, host_bwd = 2 * device_fwd, device_bwd / 2  # a host-bound forward only
    ops = (1000, round(1000 * host_bwd / host_fwd))
    overhead = host_fwd / ops[0] * 1e6
    mixed = dataclasses.replace(
        quiet,
        host_op_overhead_us=overhead,
        host_ops_per_layer_forward=ops[0],
        host_ops_per_layer_backward=ops[1],
    )
    times = layer_times_s(job, False, layout, mixed)
    host_bwd = ops[1] * overhead * 1e-6
    assert times[:2] == pytest.approx(
        (host_fwd, device_bwd)
    )  # forward host-, backward device-bound
    together = max(device_fwd + device_bwd, host_fwd + host_bwd)
    assert times[10] == pytest.approx(host_fwd + device_bwd - together)  # the saving
    assert times[10] == pytest.approx(host_fwd - device_fwd)  # the forward's idle, absorbed
    simulator = AnalyticalSimulator(mixed)
    recomputed = simulator.simulate(job, layout)
    plain = simulator.simulate(job, Layout(recompute="none"))
    extra = recomputed.breakdown["recompute"]
    assert extra == pytest.approx(TINY.num_layers * device_fwd)  # only the device's own time
    assert plain.breakdown["recompute"] == 0.0


def test_full_recompute_repeats_each_forward_collective_once() -> None:
    """Full recompute reruns a layer's forward, its two TP all-reduces included: they count
    once more with the TP time, not a second time inside the recompute (which is the forward's
    compute). The hierarchical simulator, which replays the recorded forward, agrees."""
    llama = dataclasses.replace(catalog.load_model("llama2_7b"), num_layers=4)
    ascend = catalog.load_cluster("ascend", ["cluster.num_nodes=1"])
    train = make_train("mindspeed", seq_len=4096, global_batch_size=8)
    runs = {
        (name, recompute): catalog.load_simulator(name).simulate(
            Job(model=llama, cluster=ascend, train=train),
            Layout.resolve(8, tp=8, recompute=recompute),
        )
        for name in ("analytical", "hierarchical")
        for recompute in ("none", "full")
    }
    plain, full = runs["analytical", "none"].breakdown, runs["analytical", "full"].breakdown
    assert full["tp_comm"] == pytest.approx(1.5 * plain["tp_comm"])  # 2 + 2 + 2 all-reduces
    assert full["compute"] == pytest.approx(plain["compute"])

    def added(name: str) -> float:
        with_full, without = runs[name, "full"].breakdown, runs[name, "none"].breakdown
        return sum(with_full[k] - without[k] for k in ("recompute", "tp_comm"))

    assert added("analytical") == pytest.approx(added("hierarchical"), rel=0.05)
