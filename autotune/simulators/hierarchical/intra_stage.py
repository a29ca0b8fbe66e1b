"""Intra-stage: the time of one model chunk for one micro-batch, forward and backward.

Within a phase, ops run on a compute stream and collectives on communication streams.
TP all-reduce / all-gather / reduce-scatter (the experts' TP, ETP, booked as TP) and EP
all-to-all block the compute stream (they feed the next op) unless TP overlap is configured,
in which case TP traffic hides behind the phase's GEMMs; the CP ring exchange runs beside
core attention (Megatron ``context_parallel.md``). Backward is preceded by the recomputed
forward when recompute applies.

Eager PyTorch issues every operator from one host thread, and the host runs ahead of the
device only as far as the device is slower: a chunk's phase lasts
``max(device time, host calls x host_op_s)`` (host calls: the Python-level torch calls of the
forward, the autograd nodes of the backward). The excess is compute-stream idle time,
booked as ``compute``.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field

from autotune.simulators.hierarchical.cost import CommCost
from autotune.simulators.hierarchical.cost import ProfiledCost
from autotune.simulators.hierarchical.cost import RooflineCost
from autotune.simulators.hierarchical.graph import COMM_CATEGORY
from autotune.simulators.hierarchical.graph import COMPUTE_CATEGORIES
from autotune.simulators.hierarchical.graph import LayerGraph
from autotune.simulators.hierarchical.graph import Op

__all__ = ["PARTS", "Block", "ChunkPlan", "StageCoster", "phase"]

PARTS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm")
# The part of the breakdown each layer group's collectives are booked to.
_COMM_PARTS = {"tp": "tp", "etp": "tp", "cp": "cp", "ep": "ep"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """One forward or backward of one chunk for one micro-batch.

    ``parts`` splits ``duration_s`` into compute, recompute and exposed TP/CP/EP
    communication (seconds); ``categories`` is compute time by operator class.
    """

    duration_s: float
    parts: Mapping[str, float]
    categories: Mapping[str, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkPlan:
    """The layers of one virtual pipeline stage and what each recomputes.

    ``recompute`` per layer: ``none``, ``selective`` (core attention, or the modules its
    graph's shape names) or ``full``.
    ``logits_bytes`` is the head's logits working set (0 without the head).
    """

    layers: tuple[LayerGraph, ...]
    recompute: tuple[str, ...]
    embedding: LayerGraph | None = None
    head: LayerGraph | None = None
    logits_bytes: float = 0.0

    def activation_bytes(self) -> float:
        """Bytes kept from this chunk's forward until its backward, per micro-batch.

        The head's logits are not here: they are part of :meth:`transient_bytes`.
        """
        total = sum(
            g.input_bytes
            if mode == "full"
            else g.selective_saved_bytes
            if mode == "selective"
            else g.saved_bytes
            for g, mode in zip(self.layers, self.recompute, strict=True)
        )
        return total + (self.embedding.saved_bytes if self.embedding is not None else 0.0)

    def transient_bytes(self) -> float:
        """Working set on top of what is held during this chunk's backward.

        One layer's whole activations during its backward (rematerialised under recompute, or
        the activation gradients of the same size), or the head's logits, which are freed by
        the loss backward before any layer's backward starts: the larger of the two (the same
        terms as the analytical simulator's ``working`` memory).
        """
        return max([g.saved_bytes for g in self.layers] + [self.logits_bytes])


def phase(
    ops: Sequence[Op], cost: RooflineCost | ProfiledCost, comm: CommCost, tp_overlap: bool
) -> Block:
    """Time of an op sequence on compute + communication streams (see module docstring)."""
    categories = dict.fromkeys(COMPUTE_CATEGORIES, 0.0)
    blocking: dict[str, float] = {}
    hidden: dict[str, float] = {}
    core = 0.0
    for op in ops:
        if op.category == COMM_CATEGORY:
            seconds = comm.time_s(op.name, op.bytes, op.group)
            part = _COMM_PARTS[op.group]
            overlapped = op.overlap or (part == "tp" and tp_overlap)
            target = hidden if overlapped else blocking
            target[part] = target.get(part, 0.0) + seconds
        else:
            seconds = cost.op_time_s(op)
            categories[op.category] += seconds
            if op.region == "core":
                core += seconds
    cover = {"cp": core, "tp": categories["matmul"]}
    parts = dict.fromkeys(PARTS, 0.0)
    parts["compute"] = sum(categories.values())
    for part in ("tp", "cp", "ep"):
        exposed = blocking.get(part, 0.0)
        exposed += max(0.0, hidden.get(part, 0.0) - cover.get(part, 0.0))
        parts[f"{part}_comm"] = exposed
    return Block(duration_s=sum(parts.values()), parts=parts, categories=categories)


@dataclass(slots=True)
class StageCoster:
    """Prices chunks; each layer graph's phases are timed once and reused across chunks."""

    cost: RooflineCost | ProfiledCost
    comm: CommCost
    tp_overlap: bool
    host_op_s: float = 0.0
    checkpoint_ops: tuple[int, int] = (0, 0)  # host calls of one checkpoint: forward, backward
    ep_overlap: bool = False
    memo: dict[tuple[int, str], Block] = field(default_factory=dict)

    def graph_phase(self, graph: LayerGraph, which: str) -> Block:
        """``forward``, ``backward`` or ``selective`` (the forward ops selective recompute
        repeats: :attr:`LayerGraph.selective_forward`) of one graph."""
        key = (id(graph), which)
        if key not in self.memo:
            ops = graph.selective_forward if which == "selective" else getattr(graph, which)
            self.memo[key] = phase(ops, self.cost, self.comm, self.tp_overlap)
        return self.memo[key]

    def chunk_blocks(self, plan: ChunkPlan) -> tuple[Block, Block]:
        """(forward, backward) of a chunk; backward includes the recomputed forward.

        Each phase lasts at least its host calls times ``host_op_s`` (host dispatch): the
        forward's Python-level torch calls, the backward's autograd nodes (see ``LayerGraph``),
        and ``checkpoint_ops`` for each checkpoint: a recomputed layer, or each module
        selective recompute checkpoints in it (core attention unless told otherwise).
        """
        ends = tuple(g for g in (plan.embedding, plan.head) if g is not None)
        graphs = (*plan.layers, *ends)
        forward = _sum(self.graph_phase(g, "forward") for g in graphs)
        backward = _sum(self.graph_phase(g, "backward") for g in graphs)
        redone = [
            (g, "forward" if mode == "full" else "selective")
            for g, mode in zip(plan.layers, plan.recompute, strict=True)
            if mode != "none"
        ]
        recomputed = _sum(self.graph_phase(g, which) for g, which in redone)
        parts = dict(backward.parts)
        parts["recompute"] += recomputed.duration_s
        categories = {k: v + recomputed.categories[k] for k, v in backward.categories.items()}
        backward = Block(duration_s=sum(parts.values()), parts=parts, categories=categories)
        if self.ep_overlap:
            forward, backward = _hide_ep(forward, backward), _hide_ep(backward, forward)
        forward_ops = sum(g.host_forward for g in graphs)
        backward_ops = sum(g.host_backward for g in graphs) + sum(
            g.host_forward if which == "forward" else g.host_selective for g, which in redone
        )
        checkpoints = sum(1 if w == "forward" else g.selective_checkpoints for g, w in redone)
        forward_ops += checkpoints * self.checkpoint_ops[0]
        backward_ops += checkpoints * self.checkpoint_ops[1]
        return (
            _host_bound(forward, forward_ops * self.host_op_s),
            _host_bound(backward, backward_ops * self.host_op_s),
        )


def _hide_ep(block: Block, partner: Block) -> Block:
    """``block`` with its expert all-to-all run under ``partner``'s compute: Megatron-Core's
    EP all-to-all overlap pairs one micro-batch's forward with another's backward (combined
    1F1B); the unpaired warm-up and cool-down passes are not told apart."""
    parts = dict(block.parts)
    parts["ep_comm"] = max(0.0, parts["ep_comm"] - partner.parts["compute"])
    return Block(duration_s=sum(parts.values()), parts=parts, categories=block.categories)


def _host_bound(block: Block, host_s: float) -> Block:
    """``block`` lasting at least ``host_s``: the device idles, waiting for the host."""
    if host_s <= block.duration_s:
        return block
    parts = dict(block.parts)
    parts["compute"] += host_s - block.duration_s
    return Block(duration_s=sum(parts.values()), parts=parts, categories=block.categories)


def _sum(blocks: Iterable[Block]) -> Block:
    parts = dict.fromkeys(PARTS, 0.0)
    categories = dict.fromkeys(COMPUTE_CATEGORIES, 0.0)
    for block in blocks:
        for key, value in block.parts.items():
            parts[key] += value
        for key, value in block.categories.items():
            categories[key] += value
    return Block(duration_s=sum(parts.values()), parts=parts, categories=categories)
