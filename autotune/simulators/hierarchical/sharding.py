"""The hierarchical simulator's data-parallel traffic: the gradient buckets reduced at the step
(docs/reference.md 7.2) and sharded data parallelism (docs/decisions/0049): each chunk's
per-layer gathers and reduce-scatters under ZeRO-2/-3, as much of them as its passes do not
hide, and the replicas' all-reduce of hybrid sharding."""

from __future__ import annotations

from autotune.simulators.hierarchical.cost import CommCost
from autotune.simulators.hierarchical.intra_stage import Block
from autotune.simulators.hierarchical.intra_stage import ChunkPlan
from autotune.simulators.layout import ZERO_GRADS
from autotune.simulators.layout import ZERO_PARAMS
from autotune.simulators.layout import Layout
from autotune.simulators.specs import TrainSpec
from autotune.simulators.states import state_bytes_of

__all__ = ["grad_buckets", "shard_comm_s", "with_sharding"]


def _replica_reduce_s(
    dense: int, experts: int, layout: Layout, grad_bytes: float, comm: CommCost
) -> list[float]:
    """Hybrid sharding: the all-reduce of each shard's gradients across the replicas, after
    the shard group's reduce-scatter (one collective each for the dense and expert shards)."""
    found = []
    for params, shards, group in (
        (dense, layout.dp_shard, "dp_replicate"),
        (experts, layout.edp_shard, "edp_replicate"),
    ):
        if params:
            found.append(comm.time_s("all_reduce", params / shards * grad_bytes, group))
    return found


def shard_comm_s(
    plan: ChunkPlan, train: TrainSpec, layout: Layout, comm: CommCost, tied: bool
) -> tuple[float, float, bool]:
    """(all-gather, reduce-scatter) seconds of one micro-batch of a chunk under ZeRO-2/-3,
    layer by layer (the gathers ZeRO-3's only, in the weight's dtype; the reduce-scatters in
    the reduction's), and whether the framework runs them beside the compute
    (docs/decisions/0049)."""
    sizes = state_bytes_of(train, layout)
    gathers = layout.sharding >= ZERO_PARAMS
    gather_s = reduce_s = 0.0
    for graph in (plan.embedding, *plan.layers, plan.head):
        if graph is None or (tied and graph is plan.head and plan.embedding is not None):
            continue
        for params, group in (
            (graph.params, "dp_shard"),
            (graph.expert_params, "edp_shard"),
        ):
            if params and gathers:
                gather_s += comm.time_s("all_gather", params * sizes.gather_bytes, group)
            if params:
                reduce_s += comm.time_s("reduce_scatter", params * train.grad_reduce_bytes, group)
    return gather_s, reduce_s, layout.sharding in train.framework.shard_overlap_stages


def with_sharding(
    forward: Block, backward: Block, comm_s: tuple[float, float, bool]
) -> tuple[Block, Block]:
    """The chunk's blocks with its exposed ZeRO-2/-3 traffic (booked as ``dp_comm``): the
    gathers before the forward, the gathers again and the reduce-scatters in the backward;
    overlapped, what exceeds each pass's own time (:func:`autotune.simulators.analytical.
    stages.sharded_dp_s`)."""
    gather_s, reduce_s, overlap = comm_s
    passes = ((forward, gather_s), (backward, gather_s + reduce_s))
    blocks = []
    for block, seconds in passes:
        exposed = max(0.0, seconds - block.duration_s) if overlap else seconds
        parts = {**block.parts, "dp_comm": exposed}
        blocks.append(
            Block(duration_s=block.duration_s + exposed, parts=parts, categories=block.categories)
        )
    return blocks[0], blocks[1]


def grad_buckets(
    dense: list[int], experts: list[int], train: TrainSpec, layout: Layout, comm: CommCost
) -> list[list[float]]:
    """Per chunk, the reduction time of each gradient bucket of its dense and expert
    parameters (``dense``, ``experts``) that the step reduces: a reduce-scatter over the shard
    group where the distributed optimizer and the framework's ``reduce_scatter_grads`` allow,
    else an all-reduce over DP x CP; none under ZeRO-2/-3, which reduce-scatter in every
    micro-batch (:func:`with_sharding`); with replicas, each shard's all-reduce across them."""
    framework = train.framework
    sharded = layout.distributed_optimizer and framework.reduce_scatter_grads
    kind = "reduce_scatter" if sharded else "all_reduce"
    if layout.sharding >= ZERO_GRADS:
        kind = ""
    grad_bytes = train.grad_reduce_bytes
    dp = layout.dp * layout.cp
    overlapped = train.overlaps_grad_reduce
    dense_group, expert_group = ("dp_shard", "edp_shard") if sharded else ("dp_cp", "edp")
    buckets = [
        _buckets(d, framework.grad_buckets(d, dp, overlapped), kind, dense_group, grad_bytes, comm)
        + _buckets(
            e, framework.grad_buckets(e, dp, overlapped), kind, expert_group, grad_bytes, comm
        )
        for d, e in zip(dense, experts, strict=True)
    ]
    if layout.dp_replicate > 1:  # the shards' gradients across the replicas
        buckets = [
            [*chunk, *_replica_reduce_s(d, e, layout, grad_bytes, comm)]
            for chunk, d, e in zip(buckets, dense, experts, strict=True)
        ]
    return buckets


def _buckets(
    params: int, count: int, kind: str, group: str, grad_bytes: float, comm: CommCost
) -> list[float]:
    """Reduction time of each of ``count`` gradient buckets of ``params`` parameters (none
    without a ``kind``: ZeRO-2 and -3 reduce-scatter in every micro-batch)."""
    if not params or not kind:
        return []
    return [comm.time_s(kind, params / count * grad_bytes, group)] * count
