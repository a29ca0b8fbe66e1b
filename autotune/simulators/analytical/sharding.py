"""What ZeRO-2 and -3 send per layer and micro-batch, and how much of it the compute hides
(docs/decisions/0049, docs/reference.md 7.9): the formula on floats or arrays alike, as
:mod:`autotune.simulators.analytical.stages`' are, and what it is computed from."""

from __future__ import annotations

from typing import Any
from typing import NamedTuple

from autotune.simulators.collectives import all_gather_time_s
from autotune.simulators.collectives import reduce_scatter_time_s
from autotune.simulators.layout import ZERO_PARAMS
from autotune.simulators.layout import Layout
from autotune.simulators.specs import ClusterSpec
from autotune.simulators.specs import TrainSpec
from autotune.simulators.states import state_bytes_of

__all__ = ["NO_SHARD_COMM", "ShardComm", "largest_layer_params", "shard_comm", "sharded_dp_s"]

Real = Any  # a float, or a numpy array of them (analytical.stages.Real)


class ShardComm(NamedTuple):
    """What ZeRO-2 and -3 send per micro-batch, by layer (docs/decisions/0049): seconds of the
    all-gather of a dense and an MoE layer's parameters (``*_gather_s``; 0 below ZeRO-3) and
    of the reduce-scatter of their gradients (``*_reduce_s``; 0 below ZeRO-2), the same of the
    embedding and the output layer, and whether the framework runs them beside the compute
    (``overlap``, 0 or 1). All 0 below ZeRO-2."""

    dense_gather_s: Real = 0.0
    dense_reduce_s: Real = 0.0
    moe_gather_s: Real = 0.0
    moe_reduce_s: Real = 0.0
    embedding_gather_s: Real = 0.0
    embedding_reduce_s: Real = 0.0
    head_gather_s: Real = 0.0
    head_reduce_s: Real = 0.0
    overlap: Real = 0.0


NO_SHARD_COMM = ShardComm()


def sharded_dp_s(
    shard: ShardComm,
    counts: tuple[Real, Real, Real, Real],
    forward: Real,
    backward: Real,
    ops: Any,
) -> Real:
    """Seconds of one micro-batch's ZeRO-2/-3 traffic left beside the compute
    (docs/decisions/0049): ``counts`` are the rank's dense and MoE layers and whether it holds
    the embedding and an output layer of its own.

    ZeRO-3 all-gathers each layer's parameters before its forward and again before its
    backward (the forward resharded them; a full recompute's forward and the backward share
    one gather); ZeRO-2 and -3 reduce-scatter each layer's gradients after its backward, in
    every micro-batch (Megatron-FSDP's ``grad_reduce_every_bprop``, DeepSpeed's "ZeRO stage
    >= 2 communicates during non gradient accumulation boundaries as well"). Overlapped (the
    next layer's gather prefetched, a layer's reduce-scatter beside the next backward), only
    what exceeds the pass's compute is exposed; otherwise all of it.
    """
    n_dense, n_moe, first, head = counts
    gather = (
        n_dense * shard.dense_gather_s
        + n_moe * shard.moe_gather_s
        + first * shard.embedding_gather_s
        + head * shard.head_gather_s
    )
    reduce = (
        n_dense * shard.dense_reduce_s
        + n_moe * shard.moe_reduce_s
        + first * shard.embedding_reduce_s
        + head * shard.head_reduce_s
    )
    hidden = ops.maximum(0.0, gather - forward) + ops.maximum(0.0, gather + reduce - backward)
    return shard.overlap * hidden + (1 - shard.overlap) * (2 * gather + reduce)


def largest_layer_params(
    dense_layer: float, moe_non_expert: float, expert_per_layer: float, layout: Layout
) -> float:
    """The parameters a rank holds of its largest layer: a dense one, or an MoE layer's
    non-expert part and its share of the routed experts."""
    moe = moe_non_expert / layout.tp + expert_per_layer / (layout.ep * layout.expert_tp)
    return max(dense_layer / layout.tp, moe if expert_per_layer else 0.0)


def shard_comm(
    layers: tuple[float, float, float, float, float],
    cluster: ClusterSpec,
    train: TrainSpec,
    layout: Layout,
) -> ShardComm:
    """What ZeRO-2 and -3 send per layer and micro-batch: each layer's (and the embedding's
    and output layer's) parameters all-gathered in the weight's dtype over the shard group
    (ZeRO-3), its gradients reduce-scattered in the reduction's dtype. ``layers`` holds the
    model's parameters of a dense layer, of an MoE layer's non-expert part and its routed
    experts, of the embedding and of the output layer; a rank holds 1/tp of each (the experts
    1/(ep x etp)), and the experts go over the experts' shard group."""
    dense_layer, moe_non_expert, experts, embedding, head = layers
    sizes = state_bytes_of(train, layout)
    per_node = cluster.devices_per_node
    dense_group = layout.group("dp_shard", per_node)
    expert_group = layout.group("edp_shard", per_node)
    gathers = layout.sharding >= ZERO_PARAMS

    def comm(dense: float, expert: float = 0.0) -> tuple[float, float]:
        gather = reduce = 0.0
        for count, group in ((dense, dense_group), (expert, expert_group)):
            if count and gathers:
                gather += all_gather_time_s(count * sizes.gather_bytes, group, cluster)
            if count:
                reduce += reduce_scatter_time_s(count * train.grad_reduce_bytes, group, cluster)
        return gather, reduce

    tp = layout.tp
    return ShardComm(
        *comm(dense_layer / tp),
        *comm(moe_non_expert / tp, experts / (layout.ep * layout.expert_tp)),
        *comm(embedding / tp),
        *comm(head / tp),
        overlap=float(layout.sharding in train.framework.shard_overlap_stages),
    )
