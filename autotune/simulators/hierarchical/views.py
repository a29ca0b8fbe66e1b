"""What a hierarchical prediction's ``detail`` says beyond the step: the views of each
pipeline rank, and how much of a layout a profiled cost table prices."""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence
from typing import Any

from autotune.simulators.hierarchical.cost import ProfiledCost
from autotune.simulators.hierarchical.graph import COMM_CATEGORY
from autotune.simulators.hierarchical.graph import LayerGraph
from autotune.simulators.prediction import FIRST_RANK_MEMORY
from autotune.simulators.prediction import RankMemory
from autotune.simulators.specs import ClusterSpec

__all__ = ["Rank", "rank_detail", "table_coverage"]

# A pipeline rank: step s, its breakdown s, op class s, memory GiB, GiB kept cached beyond it
Rank = tuple[float, dict[str, float], dict[str, float], dict[str, float], float]


def rank_detail(ranks: list[Rank], slowest: int, stage_layers: Sequence[int]) -> dict[str, object]:
    """The per-rank views: step time, its breakdown, op classes and memory of every rank, the
    first rank's terms (:data:`FIRST_RANK_MEMORY`); ``op_category_time_s``: the slowest
    rank's compute time by operator class."""
    return {
        "stage_layers": list(stage_layers),
        "slowest_rank": slowest,
        "rank_time_s": [rank[0] for rank in ranks],
        "rank_breakdown_s": [rank[1] for rank in ranks],
        "rank_memory_gib": [sum(rank[3].values()) for rank in ranks],
        "rank_memory_breakdown_gib": [rank[3] for rank in ranks],
        "rank_op_category_time_s": [rank[2] for rank in ranks],
        "op_category_time_s": ranks[slowest][2],
        FIRST_RANK_MEMORY: RankMemory(ranks[0][3], ranks[0][4]),
    }


def table_coverage(
    cost: ProfiledCost, graphs: Iterable[LayerGraph], cluster: ClusterSpec
) -> dict[str, Any]:
    """How many of the layout's distinct compute operators the profiled table prices.

    An operator is (name, shapes and arguments, dtype), as the profiler times it; the others
    fall back to the roofline. ``same_device``: the table was timed on the cluster's device.
    """
    ops = {
        (op.name, op.signature, op.dtype): op
        for graph in graphs
        for op in graph.forward + graph.backward
        if op.category != COMM_CATEGORY
    }
    profiled = sum(map(cost.covers, ops.values()))
    return {
        "table": cost.table.path,
        "table_device": cost.table.device,
        "cluster_device": cluster.device.name,
        "same_device": cost.table.profiled_on(cluster.device),
        "operators": len(ops),
        "profiled": profiled,
        "roofline": len(ops) - profiled,
    }
