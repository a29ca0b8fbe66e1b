"""The hierarchical simulator end to end: breakdown, memory, recompute, trace, profiled costs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from autotune import catalog
from autotune.simulators import BREAKDOWN_KEYS
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import ModelSpec
from autotune.simulators import SpecError
from autotune.simulators.collectives import all_reduce_time_s
from autotune.simulators.device_memory import reserved_bytes
from autotune.simulators.hierarchical import HierarchicalSimulator
from autotune.simulators.hierarchical.cost import CommCost
from autotune.simulators.hierarchical.cost import RooflineCost
from autotune.simulators.hierarchical.graph import layer_shapes
from autotune.simulators.hierarchical.intra_stage import phase
from autotune.simulators.registry import make_simulator
from tests.simulators_tests._specs import ascend
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model as catalog_model

compile_mod = pytest.importorskip("autotune.simulators.hierarchical.compile")

MODEL = ModelSpec(
    name="tiny-llama",
    num_layers=8,
    hidden_size=512,
    ffn_hidden_size=1376,
    num_attention_heads=8,
    num_kv_heads=4,
    head_dim=64,
    vocab_size=2048,
)
CLUSTER = ascend(2)
TRAIN = make_train(seq_len=1024, global_batch_size=32)
JOB = Job(model=MODEL, cluster=CLUSTER, train=TRAIN)
# A model of tiny kernels, where the host's dispatch sets every layer's pace.
MICRO = ModelSpec(
    name="micro",
    num_layers=2,
    hidden_size=64,
    ffn_hidden_size=128,
    num_attention_heads=2,
    num_kv_heads=2,
    head_dim=32,
    vocab_size=128,
)
MICRO_TRAIN = make_train(seq_len=64, global_batch_size=64)


def constants(**changes: Any) -> dict[str, Any]:
    values = catalog.simulator_constants("hierarchical")
    return {**values, **changes}


SIM = HierarchicalSimulator.from_config(constants())


def simulate(sim: HierarchicalSimulator = SIM, **layout: Any):  # noqa: ANN201
    lay = Layout.resolve(CLUSTER.num_devices, **layout)
    assert lay.violations(JOB) == []
    return sim.simulate(JOB, lay)


def test_registry_builds_it_from_the_yaml() -> None:
    sim = make_simulator("hierarchical", constants())
    assert isinstance(sim, HierarchicalSimulator) and sim.name == "hierarchical"


def test_unknown_or_bad_constants_are_user_errors() -> None:
    with pytest.raises(SpecError, match="unknown key"):
        HierarchicalSimulator.from_config(constants(schedul="1f1b"))
    with pytest.raises(SpecError, match="schedule"):
        HierarchicalSimulator.from_config(constants(schedule="zigzag"))


@pytest.mark.parametrize(
    "layout",
    [
        dict(tp=2, pp=2),
        dict(tp=4, pp=2, vpp=2, recompute="full"),
        dict(tp=2, pp=4, cp=2, recompute="selective"),
        dict(pp=2, distributed_optimizer=False, micro_batch=2),
    ],
)
def test_breakdown_sums_to_step_time(layout: dict[str, Any]) -> None:
    prediction = simulate(**layout)
    assert set(prediction.breakdown) == set(BREAKDOWN_KEYS)
    assert sum(prediction.breakdown.values()) == pytest.approx(prediction.step_time_s)
    assert all(value >= 0 for value in prediction.breakdown.values())
    assert sum(prediction.memory_breakdown_gib.values()) == pytest.approx(prediction.memory_gib)
    assert max(prediction.detail["rank_time_s"]) == pytest.approx(prediction.step_time_s)
    assert 0 < prediction.mfu < 1


def test_deterministic_and_remembered_by_its_constants_job_and_layout() -> None:
    first = simulate(tp=2, pp=2)
    assert simulate(tp=2, pp=2) is first
    HierarchicalSimulator.forget_predictions()
    again = simulate(tp=2, pp=2)
    assert again is not first and again.as_dict() == first.as_dict()
    assert simulate(HierarchicalSimulator.from_config(constants()), tp=2, pp=2) is again
    slower = HierarchicalSimulator.from_config(constants(host_op_overhead_us=1000.0))
    assert simulate(slower, tp=2, pp=2).step_time_s > again.step_time_s


def test_more_tp_never_raises_weight_memory() -> None:
    weights = [simulate(tp=tp, pp=2).memory_breakdown_gib["weights"] for tp in (1, 2, 4, 8)]
    assert weights == sorted(weights, reverse=True)


def test_full_recompute_adds_exactly_one_forward() -> None:
    plain, full = simulate(tp=2, pp=2), simulate(tp=2, pp=2, recompute="full")
    assert full.breakdown["recompute"] > 0 == plain.breakdown["recompute"]
    assert full.memory_breakdown_gib["activations"] < plain.memory_breakdown_gib["activations"]
    # the recomputed time is the layers' forward time (compute and TP comm) per micro-batch
    lay = Layout.resolve(CLUSTER.num_devices, tp=2, pp=2)
    graph = compile_mod.compile_layer(layer_shapes(JOB, lay)["dense"])
    roofline = RooflineCost(
        device=CLUSTER.device, precision="bf16", efficiency=SIM.constants.efficiency
    )
    forward = phase(graph.forward, roofline, CommCost(cluster=CLUSTER, layout=lay), False)
    per_stage = MODEL.num_layers // 2 * lay.num_microbatches(TRAIN)
    assert full.breakdown["recompute"] == pytest.approx(per_stage * forward.duration_s)


def test_selective_recompute_repeats_only_core_attention() -> None:
    plain, selective = simulate(tp=2, pp=2), simulate(tp=2, pp=2, recompute="selective")
    core = selective.breakdown["recompute"]
    assert 0 < core < 0.2 * plain.breakdown["compute"]


def test_vpp_shrinks_the_bubble_and_gpipe_holds_more_activations() -> None:
    one, two = simulate(tp=2, pp=4), simulate(tp=2, pp=4, vpp=2)
    assert two.breakdown["bubble"] < one.breakdown["bubble"]
    assert two.detail["schedule"] == "interleaved"
    gpipe = HierarchicalSimulator.from_config(constants(schedule="gpipe"))
    assert (
        simulate(gpipe, tp=2, pp=4).memory_breakdown_gib["activations"]
        > one.memory_breakdown_gib["activations"]
    )


def test_interleaved_sends_block_only_where_the_framework_does_not_overlap_them() -> None:
    """Megatron-Core runs interleaved pipeline sends beside the next chunk; Megatron-LM's 2021
    schedule and every plain 1F1B block on them (docs/reference.md 7.3)."""
    layout = Layout.resolve(CLUSTER.num_devices, tp=2, pp=4, vpp=2)
    pp_comm = {
        framework: SIM.simulate(
            Job(
                model=MODEL,
                cluster=CLUSTER,
                train=dataclasses.replace(TRAIN, framework=catalog.load_framework(framework)),
            ),
            layout,
        ).breakdown["pp_comm"]
        for framework in ("megatron_core", "megatron_lm")
    }
    assert pp_comm["megatron_lm"] > 2 * pp_comm["megatron_core"]


def test_trace_is_valid_json_with_events_on_every_rank(tmp_path: Path) -> None:
    lay = Layout.resolve(CLUSTER.num_devices, tp=2, pp=4, vpp=2)
    path = SIM.write_trace(JOB, lay, tmp_path / "trace.json")
    document = json.loads(path.read_text())
    spans = [e for e in document["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == set(range(4))
    assert {e["cat"] for e in spans} == {"compute", "p2p", "dp"}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    compute = [e for e in spans if e["cat"] == "compute" and e["pid"] == 0]
    assert len(compute) == 2 * 2 * lay.num_microbatches(TRAIN)


def test_the_timeline_is_kept_only_when_asked() -> None:
    """A search keeps every prediction: the plain one leaves the per-block timeline out."""
    lay = Layout.resolve(CLUSTER.num_devices, tp=2, pp=4, vpp=2)
    plain = SIM.simulate(JOB, lay)
    traced = SIM.simulate_timeline(JOB, lay)
    assert "timeline" not in plain.detail and "timeline" in traced.detail
    assert plain.as_dict() == traced.as_dict()
    assert {k: v for k, v in traced.detail.items() if k != "timeline"} == dict(plain.detail)


def test_profiled_table_replaces_roofline_times(tmp_path: Path) -> None:
    lay = Layout.resolve(CLUSTER.num_devices, tp=2, pp=2)
    graph_ops = [
        op
        for shape in layer_shapes(JOB, lay).values()
        for op in compile_mod.compile_layer(shape).forward
        if op.category == "matmul"
    ]
    table = tmp_path / "ops.csv"
    rows = ["op,shapes,dtype,device,time_us"]
    rows += [f'{op.name},"{op.signature}",{op.dtype},test,50000' for op in graph_ops]
    table.write_text("\n".join(rows) + "\n")
    profiled = HierarchicalSimulator.from_config(constants(op_costs=str(table)))
    base, slow = simulate(tp=2, pp=2), simulate(profiled, tp=2, pp=2)
    assert 0 < slow.detail["profiled_op_fraction"] < 1
    assert slow.breakdown["compute"] > base.breakdown["compute"]


def test_host_dispatch_bounds_a_tiny_layer() -> None:
    """A layer of tiny kernels lasts its host calls x the per-call host overhead."""
    tiny, train = MICRO, MICRO_TRAIN
    lay = Layout.resolve(CLUSTER.num_devices, pp=1)
    job = Job(model=tiny, cluster=CLUSTER, train=train)
    assert lay.violations(job) == [] and lay.num_microbatches(train) == 4
    free = HierarchicalSimulator.from_config(constants(host_op_overhead_us=0.0))
    bound = free.simulate(job, lay).step_time_s
    host = SIM.simulate(job, lay)
    graphs = [compile_mod.compile_layer(s) for s in layer_shapes(job, lay).values()]
    counts = {g.shape.kind: g.host_forward + g.host_backward for g in graphs}
    ops = counts["embedding"] + counts["head"] + tiny.num_layers * counts["dense"]
    per_microbatch = ops * SIM.constants.host_op_overhead_us * 1e-6
    compute = host.breakdown["compute"] + host.breakdown["tp_comm"]
    assert host.step_time_s > 3 * bound
    assert compute == pytest.approx(lay.num_microbatches(train) * per_microbatch)


def test_each_activation_checkpoint_adds_its_host_calls_to_a_host_bound_layer() -> None:
    """Full recompute of a tiny layer: the forward pass and the backward with the
    recomputation each last their recorded calls plus the checkpoint's 3 and 11."""
    tiny, train = MICRO, MICRO_TRAIN
    plain = Layout.resolve(CLUSTER.num_devices, pp=1)
    full = dataclasses.replace(plain, recompute="full")
    free = HierarchicalSimulator.from_config(
        constants(host_ops_per_checkpoint_forward=0, host_ops_per_checkpoint_backward=0)
    )
    job = Job(model=tiny, cluster=CLUSTER, train=train)
    checkpointed = SIM.simulate(job, full).step_time_s
    uncounted = free.simulate(job, full).step_time_s
    per_step = plain.num_microbatches(train) * tiny.num_layers * (3 + 11) * 20e-6
    assert checkpointed - uncounted == pytest.approx(per_step)
    # Without recompute there is no checkpoint to pay for.
    assert SIM.simulate(job, plain) == free.simulate(job, plain)


def test_memory_includes_the_reserve_and_the_logits_working_set() -> None:
    plain = simulate(tp=2, pp=2)
    lay22 = Layout.resolve(CLUSTER.num_devices, tp=2, pp=2)
    derived = reserved_bytes(MODEL, CLUSTER, lay22) / 2**30  # the runtime and 6 communicators
    assert derived == pytest.approx(CLUSTER.device.runtime_memory_gib + 6 * 0.37)
    assert plain.memory_breakdown_gib["reserved"] == pytest.approx(derived)
    none = HierarchicalSimulator.from_config(constants(reserved_memory_gib=0.0))
    assert plain.memory_gib - simulate(none, tp=2, pp=2).memory_gib == pytest.approx(derived)
    kept = 1 - SIM.constants.allocator_fragmentation  # what the allocator can reuse
    # pp=1: the held activations of one micro-batch plus max(one layer's, the logits)
    lay = Layout.resolve(CLUSTER.num_devices, tp=8, pp=1)
    layer = compile_mod.compile_layer(layer_shapes(JOB, lay)["dense"]).saved_bytes
    per_logit = TRAIN.seq_len * MODEL.vocab_size / 8
    assert (
        per_logit * TRAIN.framework.logits_bytes(lay.tp, TRAIN.compute_dtype)
        < layer
        < per_logit * 100
    )
    wide = dataclasses.replace(TRAIN.framework, vocab_parallel_logits_bytes_per_element=100)
    big = dataclasses.replace(TRAIN, framework=wide)
    extra = (
        SIM.simulate(Job(model=MODEL, cluster=CLUSTER, train=big), lay).memory_gib
        - simulate(tp=8, pp=1).memory_gib
    )
    assert extra == pytest.approx((per_logit * 100 - layer) / kept / 2**30, rel=1e-6)


def test_unfused_attention_is_slower_and_needs_more_memory() -> None:
    lay = Layout.resolve(CLUSTER.num_devices, tp=2, pp=2)
    flash = SIM.simulate(JOB, lay)
    unfused_train = make_train(seq_len=1024, global_batch_size=32, flash_attention=False)
    unfused = SIM.simulate(Job(model=MODEL, cluster=CLUSTER, train=unfused_train), lay)
    assert unfused.step_time_s > flash.step_time_s
    assert unfused.memory_breakdown_gib["activations"] > flash.memory_breakdown_gib["activations"]


@pytest.mark.parametrize(("fp32", "per_score"), [(False, 2), (True, 6)])
def test_an_unfused_attention_keeps_per_score_what_autograd_saves(
    fp32: bool, per_score: int
) -> None:
    """By hand, 1 x 4 heads x 64 x 64 scores of 16-bit Q, K, V (4 x 64 x 16 x 2 B each): the
    fused softmax keeps its 16-bit output (2 B a score); past the fused kernel PyTorch's fp32
    softmax keeps its fp32 output and the 16-bit copy that multiplies V (6 B); the causal mask
    its masked fill keeps is built once per batch for every layer and head, so no layer's
    (docs/reference.md 3.3)."""
    import torch

    from autotune.simulators.hierarchical.kernels import unfused_attention
    from autotune.simulators.hierarchical.record import Recorder

    recorder = Recorder()
    with recorder, recorder.saving([]):
        q = torch.empty(1, 64, 4, 16, device="meta", dtype=torch.bfloat16, requires_grad=True)
        k, v = (
            torch.empty(1, 4, 64, 16, device="meta", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(2)
        )
        unfused_attention(q, k, v, cp=1, dropout=False, fp32=fp32)
    inputs = 3 * 4 * 64 * 16 * 2
    assert recorder.saved_bytes(selective=False) == inputs + 4 * 64 * 64 * per_score


def test_a_tied_embedding_syncs_its_gradient_between_the_end_stages(tmp_path: Path) -> None:
    """At dp 1 there is no DP reduction: the first and last ranks' DP time is the tied
    embedding's all-reduce (vocab / tp x hidden, fp32 main grads), the middle ranks' none."""
    tied = dataclasses.replace(MODEL, tied_embeddings=True)
    lay = Layout.resolve(CLUSTER.num_devices, dp=1, tp=4, pp=4)
    job = Job(model=tied, cluster=CLUSTER, train=TRAIN)
    pred = SIM.simulate(job, lay)
    nbytes = 2048 / 4 * 512 * 4  # MindSpeed, the cluster's framework: fp32 gradients
    expected = all_reduce_time_s(nbytes, lay.group("embedding", 8), CLUSTER)
    assert lay.group("embedding", 8).nodes == 2  # first and last stage on different nodes
    per_rank = [b["dp_comm"] for b in pred.detail["rank_breakdown_s"]]
    assert per_rank == pytest.approx([expected, 0.0, 0.0, expected])
    untied = SIM.simulate(JOB, lay).detail["rank_breakdown_s"]
    assert [b["dp_comm"] for b in untied] == [0.0] * 4
    trace = json.loads(SIM.write_trace(job, lay, tmp_path / "t.json").read_text())
    spans = [e for e in trace["traceEvents"] if e.get("name") == "tied embedding grads"]
    assert sorted(e["pid"] for e in spans) == [0, 3]


def test_expert_tp_keeps_whole_experts_and_etp_equal_to_tp_prices_as_before() -> None:
    """Mixtral 8x7B on 32 ranks, TP 4, EP 8: with ETP 1 each rank keeps its one expert whole,
    3 x 4096 x 14336 weights per layer instead of a quarter of them (bf16: 2 bytes each) in
    each of the 4 layers; ETP = TP spelt out is the default layout and prices the same."""
    mixtral = catalog_model("mixtral_8x7b", num_layers=4)
    cluster = ascend(4)
    train = make_train(seq_len=4096, global_batch_size=64)
    layouts = [
        Layout.resolve(32, tp=4, ep=8, sequence_parallel=True, **etp)
        for etp in ({}, {"etp": 4}, {"etp": 1})
    ]
    assert layouts[1] == layouts[0] and layouts[2].expert_dp == 4
    job = Job(model=mixtral, cluster=cluster, train=train)
    assert all(lay.violations(job) == [] for lay in layouts)
    default, spelt, whole = (SIM.simulate(job, lay) for lay in layouts)
    assert spelt.as_dict() == default.as_dict()
    extra = 4 * 3 * 4096 * 14336 * (1 - 1 / 4) * 2 / 2**30
    weights = whole.memory_breakdown_gib["weights"] - default.memory_breakdown_gib["weights"]
    assert weights == pytest.approx(extra, rel=1e-9)
