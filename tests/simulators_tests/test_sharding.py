"""Sharded data parallelism (docs/decisions/0049): the layout's one spelling, the rules, the
memory of each ZeRO stage by hand, the per-layer gathers and reduce-scatters, and both
simulators agreeing on what the shards keep."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from autotune import catalog
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import SpecError
from autotune.simulators.analytical.sharding import ShardComm
from autotune.simulators.analytical.sharding import sharded_dp_s
from autotune.simulators.analytical.stages import FLOATS
from autotune.simulators.collectives import GroupPlacement
from autotune.simulators.collectives import all_gather_time_s
from autotune.simulators.collectives import all_reduce_time_s
from autotune.simulators.collectives import reduce_scatter_time_s
from autotune.simulators.hierarchical import HierarchicalSimulator
from tests.simulators_tests._specs import analytical
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model

GIB = 2**30
LLAMA = model("llama3_8b")  # 32 dense layers, tied: no; 8B parameters
H100_2 = catalog.load_cluster("h100", ["cluster.num_nodes=2"])  # 16 GPUs
CORE = make_train("megatron_core", seq_len=4096, global_batch_size=64)
DEEPSPEED = make_train("megatron_deepspeed", seq_len=4096, global_batch_size=64)
CORE_JOB = Job(model=LLAMA, cluster=H100_2, train=CORE)
DEEPSPEED_JOB = Job(model=LLAMA, cluster=H100_2, train=DEEPSPEED)


def _rank_params(tp: int) -> float:
    """Every parameter of Llama-3-8B on one TP rank of a single pipeline stage."""
    layers = LLAMA.num_layers * LLAMA.dense_layer_params
    head = LLAMA.vocab_size * LLAMA.hidden_size  # its own output layer (untied)
    return (layers + LLAMA.embedding_params + head) / tp + LLAMA.hidden_size


# ---- the layout ------------------------------------------------------------------------------


def test_zero_stage_0_and_1_are_the_distributed_optimizers_to_spell() -> None:
    assert Layout.resolve(16, zero_stage=1) == Layout.resolve(16)
    assert Layout.resolve(16, zero_stage=0) == Layout.resolve(16, distributed_optimizer=False)
    assert Layout(zero_stage=1).zero_stage is None
    assert [Layout.resolve(16, zero_stage=s).sharding for s in (0, 1, 2, 3)] == [0, 1, 2, 3]
    assert Layout.resolve(16, zero_stage=3).describe().endswith("do zero3")
    assert Layout.resolve(16, dp_replicate=2).describe().endswith("do hsdp2")


@pytest.mark.parametrize(
    ("values", "words"),
    [
        (dict(zero_stage=2, distributed_optimizer=False), "needs distributed_optimizer=true"),
        (dict(zero_stage=0), "zero_stage=0 contradicts distributed_optimizer=true"),
        (dict(zero_stage=4), "zero_stage=4 is not one of 0, 1, 2, 3"),
        (dict(dp_replicate=0), "dp_replicate=0 must be > 0"),
        (dict(zero_stage=True), "zero_stage=True must be an integer"),
    ],
)
def test_a_sharding_meaningless_on_its_own_is_a_spec_error(values: dict, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        Layout(**values)


def test_hybrid_groups_split_the_data_parallel_ranks_in_megatrons_order() -> None:
    lay = Layout.resolve(16, tp=2, dp_replicate=2)  # dp 8: two replicas of 4
    assert (lay.dp_shard, lay.edp_shard) == (4, 4)
    assert lay.group("dp_shard", 8) == GroupPlacement(4, 2, 4, 1)  # one node's 4 ranks
    assert (lay.group("dp_replicate", 8).size, lay.group("dp_replicate", 8).stride) == (2, 8)
    full = Layout.resolve(16, tp=2)
    assert full.group("dp_shard", 8) == full.group("dp_cp", 8)  # one group: full sharding


# ---- the rules -------------------------------------------------------------------------------


def test_each_framework_runs_its_own_zero_stages() -> None:
    lay = Layout.resolve(16, tp=2, zero_stage=3)
    assert lay.violations(CORE_JOB) == []  # Megatron-FSDP
    assert lay.violations(DEEPSPEED_JOB) == []  # DeepSpeed ZeRO-3, pp 1
    for name in ("megatron_lm", "mindspeed"):
        train = make_train(name, seq_len=4096, global_batch_size=64)
        assert lay.broken_rules(Job(model=LLAMA, cluster=H100_2, train=train))["sharding"] == [
            f"zero_stage=3: {name} runs ZeRO stages 0/1 only"
        ]


def test_deepspeeds_pipeline_engine_runs_zero_1_at_most() -> None:
    staged = Layout.resolve(16, tp=2, pp=2, zero_stage=2)
    assert staged.broken_rules(DEEPSPEED_JOB)["sharding"] == [
        "zero_stage=2 with pp=2: megatron_deepspeed runs ZeRO stages 0/1 with pipeline "
        "parallelism (use pp=1)"
    ]
    assert staged.violations(CORE_JOB) == []


def test_hybrid_sharding_needs_a_framework_shards_and_replicas_that_divide() -> None:
    assert Layout.resolve(16, tp=2, dp_replicate=4).violations(CORE_JOB) == []
    odd = Layout.resolve(16, tp=2, dp_replicate=3, distributed_optimizer=False)
    assert odd.broken_rules(CORE_JOB)["sharding"] == [
        "dp_replicate=3 replicates sharded states: it needs distributed_optimizer",
        "dp_replicate=3 does not divide the dp*cp=8 data-parallel ranks",
    ]
    two = Layout.resolve(16, tp=2, dp_replicate=2)
    assert two.broken_rules(DEEPSPEED_JOB)["sharding"] == [
        "dp_replicate=2: megatron_deepspeed has no hybrid sharding"
    ]


# ---- memory, by hand -------------------------------------------------------------------------


@pytest.mark.parametrize("replicas", [1, 2])
def test_each_stage_keeps_its_shards_and_the_layers_in_flight(replicas: int) -> None:
    """Megatron-Core, bf16 with fp32 gradients, TP 2 over 8 data-parallel ranks: P parameters
    per rank keep 2 + 4 + 12 bytes each, each stage splitting one more of them over the shard
    group (8 ranks, or 4 with two replicas); ZeRO-2 holds two layers' fp32 gradients whole,
    ZeRO-3 also the layer in use and 500M parameters prefetched (Megatron-FSDP) in bf16."""
    simulator = analytical()
    p = _rank_params(tp=2)
    layer = LLAMA.dense_layer_params / 2
    d = 8 // replicas
    expected = {
        0: (2 * p, 4 * p, 12 * p, 0.0),
        1: (2 * p, 4 * p, 12 * p / d, 0.0),
        2: (2 * p, 4 * p / d, 12 * p / d, 2 * layer * 4),
        3: (2 * p / d, 4 * p / d, 12 * p / d, 2 * layer * 4 + (layer + 5e8) * 2),
    }
    for stage, (weights, grads, optimizer, unsharded) in expected.items():
        if stage == 0 and replicas > 1:
            continue  # nothing sharded, nothing to replicate
        lay = Layout.resolve(16, tp=2, zero_stage=stage, dp_replicate=replicas)
        memory = simulator.simulate(CORE_JOB, lay).memory_breakdown_gib
        assert memory["weights"] * GIB == pytest.approx(weights)
        assert memory["gradients"] * GIB == pytest.approx(grads)
        assert memory["optimizer"] * GIB == pytest.approx(optimizer)
        assert memory.get("unsharded", 0.0) * GIB == pytest.approx(unsharded)


def test_deepspeeds_zero_stages_keep_its_own_bytes() -> None:
    """DeepSpeed in bf16 keeps the bf16 gradients (2 B) whole at ZeRO-1 and the fp32 master
    weights and Adam moments (12 B) sharded, with the fp32 gradient partition (4 B sharded) in
    the step alone; ZeRO-2 shards the gradients, ZeRO-3 the weights, and its 16 B stay optimizer
    states (docs/reference.md 3.2 and 7.9)."""
    simulator = analytical()
    p = _rank_params(tp=2)
    for stage, (weights, grads, optimizer, step) in {
        1: (2 * p, 2 * p, 12 * p / 8, 4 * p / 8),
        2: (2 * p, 2 * p / 8, 12 * p / 8, 4 * p / 8),
        3: (p / 4, p / 4, 16 * p / 8, 0.0),
    }.items():
        lay = Layout.resolve(16, tp=2, zero_stage=stage)
        prediction = simulator.simulate(DEEPSPEED_JOB, lay)
        memory = prediction.memory_breakdown_gib
        assert memory["weights"] * GIB == pytest.approx(weights)
        assert memory["gradients"] * GIB == pytest.approx(grads)
        assert memory["optimizer"] * GIB == pytest.approx(optimizer)
        # the step's copies: beyond the activations where they need more, else only cached
        assert (memory["step_grads"] + prediction.cached_gib) * GIB == pytest.approx(step)


def test_both_simulators_keep_the_same_shards() -> None:
    analytic = analytical()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hierarchical = catalog.load_simulator("hierarchical", ())
    assert isinstance(hierarchical, HierarchicalSimulator)
    for stage in (2, 3):
        lay = Layout.resolve(16, tp=2, pp=2, zero_stage=stage, dp_replicate=2)
        a = analytic.simulate(CORE_JOB, lay).memory_breakdown_gib
        h = hierarchical.simulate(CORE_JOB, lay).memory_breakdown_gib
        for key in ("weights", "gradients", "optimizer", "unsharded"):
            assert h[key] == pytest.approx(a[key], rel=0.02), (stage, key)


# ---- time ------------------------------------------------------------------------------------


def test_sharded_traffic_hides_behind_the_pass_it_overlaps() -> None:
    comm = ShardComm(dense_gather_s=0.3, dense_reduce_s=0.5, head_gather_s=1.0, overlap=1.0)
    counts = (2, 0, 0, 0)  # two dense layers: 0.6 s of gathers, 1.0 s of reduce-scatters
    assert sharded_dp_s(comm, counts, 1.0, 2.0, FLOATS) == 0.0  # all hidden
    assert sharded_dp_s(comm, counts, 0.5, 1.0, FLOATS) == pytest.approx(0.1 + 0.6)
    blocking = comm._replace(overlap=0.0)
    assert sharded_dp_s(blocking, counts, 9.0, 9.0, FLOATS) == pytest.approx(2 * 0.6 + 1.0)
    assert sharded_dp_s(blocking, (0, 0, 0, 1), 9.0, 9.0, FLOATS) == pytest.approx(2.0)


def test_deepspeed_zero_2_reduce_scatters_every_micro_batch_in_the_open() -> None:
    """ZeRO-2 on DeepSpeed (overlap_comm off below stage 3): each micro-batch reduce-scatters
    every layer's, the embedding's and the output layer's gradients over the 8 data-parallel
    ranks in bf16, on the critical path; nothing is left to reduce after the last one, and
    the updated weights are all-gathered after the step as with ZeRO-1."""
    simulator = analytical()
    lay = Layout.resolve(16, tp=2, zero_stage=2)
    group = lay.group("dp_cp", H100_2.devices_per_node)
    m = lay.num_microbatches(DEEPSPEED)  # 64 / 8 = 8

    def reduce_s(params: float) -> float:
        return reduce_scatter_time_s(params * 2, group, H100_2)

    per_microbatch = LLAMA.num_layers * reduce_s(LLAMA.dense_layer_params / 2)
    per_microbatch += reduce_s(LLAMA.embedding_params / 2)
    per_microbatch += reduce_s(LLAMA.vocab_size * LLAMA.hidden_size / 2)
    gather_s = all_gather_time_s(_rank_params(tp=2) * 2, group, H100_2)
    dp_comm = simulator.simulate(DEEPSPEED_JOB, lay).breakdown["dp_comm"]
    assert dp_comm == pytest.approx(m * per_microbatch + gather_s)


def test_hybrid_sharding_all_reduces_each_shard_across_the_replicas() -> None:
    """ZeRO-1 with two replicas: the gradients are reduce-scattered inside each replica's 4
    ranks, then each 1/4 shard is all-reduced over the 2 replicas (without overlap)."""
    simulator = analytical()
    train = make_train(
        "megatron_core", seq_len=4096, global_batch_size=64, overlap_grad_reduce=False
    )
    lay = Layout.resolve(16, tp=2, dp_replicate=2)
    per_node = H100_2.devices_per_node
    shard, replicas = lay.group("dp_shard", per_node), lay.group("dp_replicate", per_node)
    p = _rank_params(tp=2)
    expected = reduce_scatter_time_s(p * 4, shard, H100_2)
    expected += all_reduce_time_s(p * 4 / 4, replicas, H100_2)
    expected += all_gather_time_s(p * 2, shard, H100_2)  # the updated weights, after the step
    assert simulator.simulate(Job(model=LLAMA, cluster=H100_2, train=train), lay).breakdown[
        "dp_comm"
    ] == pytest.approx(expected)


@pytest.mark.parametrize("stage", [2, 3])
def test_the_vectorized_path_prices_sharding_as_the_scalar_one(stage: int) -> None:
    simulator = analytical()
    layouts = [
        Layout.resolve(16, tp=tp, pp=pp, zero_stage=s, dp_replicate=r)
        for tp in (1, 2)
        for pp in (1, 2)
        for s in (None, stage)
        for r in (1, 2)
    ]
    for train in (CORE, DEEPSPEED):
        batch = simulator.simulate_many(Job(model=LLAMA, cluster=H100_2, train=train), layouts)
        for index, lay in enumerate(layouts):
            one = simulator.simulate(Job(model=LLAMA, cluster=H100_2, train=train), lay)
            assert batch.step_time_s[index] == pytest.approx(one.step_time_s, rel=1e-12)
            assert batch.memory_gib[index] == pytest.approx(one.memory_gib, rel=1e-12)


def test_zero_3_costs_time_where_the_compute_cannot_hide_it() -> None:
    """Few tokens per layer on many ranks: the gathers outlast the compute, ZeRO-3 is slower
    than ZeRO-1 in both simulators and its breakdown still sums to the step."""
    train = make_train("megatron_core", seq_len=512, global_batch_size=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hierarchical = catalog.load_simulator("hierarchical", ())
    job = Job(model=LLAMA, cluster=H100_2, train=train)
    for simulator in (analytical(), hierarchical):
        one = simulator.simulate(job, Layout.resolve(16))
        three = simulator.simulate(job, Layout.resolve(16, zero_stage=3))
        assert three.step_time_s > one.step_time_s
        assert three.memory_gib < one.memory_gib
        assert sum(three.breakdown.values()) == pytest.approx(three.step_time_s)


def test_zero_3_traffic_hides_under_each_pass_as_the_device_runs_it() -> None:
    """The gathers and reduce-scatters run beside a pass's kernels and the collectives it
    waits for, the backward's recomputed forward included: both simulators expose the same
    part with and without full recompute, and a faster device never makes the step slower
    (Llama-3-70B on 64 H100 at CP 8: the exposed CP ring is part of each pass)."""
    job = catalog.load_job("llama3_70b", "h100", ["cluster.num_nodes=8", "model.num_layers=16"])
    device = job.cluster.device
    faster = dataclasses.replace(
        job,
        cluster=dataclasses.replace(
            job.cluster, device=dataclasses.replace(device, bf16_tflops=1.5 * device.bf16_tflops)
        ),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hierarchical = catalog.load_simulator("hierarchical", ())
    for recompute in ("none", "full"):
        layout = Layout.resolve(
            64, tp=2, pp=4, cp=8, micro_batch=2, zero_stage=3, recompute=recompute
        )
        exposed = [
            simulator.simulate(job, layout).breakdown["dp_comm"]
            for simulator in (analytical(), hierarchical)
        ]
        assert exposed[0] == pytest.approx(exposed[1], rel=0.1)
        for simulator in (analytical(), hierarchical):
            assert (
                simulator.simulate(faster, layout).step_time_s
                <= simulator.simulate(job, layout).step_time_s
            )
