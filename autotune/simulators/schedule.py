"""Inter-stage: a discrete-event run of the pipeline schedule on every pipeline rank.

Each rank executes its forward (F) and backward (B) blocks in the order of the schedule
(GPipe, 1F1B, or Megatron's interleaved 1F1B with ``v`` chunks per rank); a block starts when
the rank is free and its input has arrived from the neighbouring stage (plus the P2P time).
The loop visits every block once, so it stays linear in ``pp * vpp * micro-batches``.
After the last backward of each chunk, gradients are reduced over data parallelism in buckets
that overlap the rest of the backward (Megatron ``overlap_grad_reduce``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = [
    "SCHEDULES",
    "Event",
    "PipelineRun",
    "Timeline",
    "chunk_states_peak",
    "grad_sync",
    "run_pipeline",
    "schedule_order",
]

SCHEDULES = ("1f1b", "gpipe", "interleaved")


class Event(NamedTuple):
    """One span on the timeline: pipeline rank, lane (compute, p2p, dp), name, start, length."""

    rank: int
    lane: str
    name: str
    start_s: float
    duration_s: float


LANES = ("compute", "p2p", "dp")
# rank, lane, kind (0 F, 1 B, 2 grad bucket, 3 tied embedding), index, chunk, start, duration
_FIELDS = 7


@dataclass(frozen=True, slots=True)
class Timeline:
    """Spans of a run as one flat list of numbers (no per-event objects: cheap to record)."""

    values: tuple[float, ...]
    chunked: bool

    def events(self) -> list[Event]:
        """The spans as :class:`Event` records."""
        out = []
        for i in range(0, len(self.values), _FIELDS):
            rank, lane, kind, index, chunk, start, duration = self.values[i : i + _FIELDS]
            if kind == 2:
                name = f"grad bucket {int(chunk)}.{int(index)}"
            elif kind == 3:
                name = "tied embedding grads"
            else:
                name = ("F" if kind == 0 else "B") + str(int(index))
                name += f".c{int(chunk)}" if self.chunked and lane == 0 else ""
            out.append(Event(int(rank), LANES[int(lane)], name, start, duration))
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineRun:
    """What the schedule did on each pipeline rank (tuples indexed by rank).

    ``finish_s`` is when the rank's last block ends; ``busy_s`` the time in blocks;
    ``bubble_s`` and ``pp_comm_s`` split its idle time into waiting for other stages and
    waiting for P2P transfers. ``last_backward`` holds, per rank and chunk, the (start, end)
    of the chunk's final backward; ``peak_activation_bytes`` the most activations held.
    """

    finish_s: tuple[float, ...]
    busy_s: tuple[float, ...]
    bubble_s: tuple[float, ...]
    pp_comm_s: tuple[float, ...]
    peak_activation_bytes: tuple[float, ...]
    last_backward: tuple[tuple[tuple[float, float], ...], ...]
    timeline: list[float]


def schedule_order(
    schedule: str, rank: int, p: int, m: int, v: int
) -> list[tuple[bool, int, int]]:
    """Blocks of ``rank`` in execution order: (is_forward, chunk, micro-batch).

    1F1B warms up with ``p - rank - 1`` forwards; interleaved with
    ``(p - rank - 1) * 2 + (v - 1) * p`` (Megatron ``schedules.py``), visiting micro-batches
    in groups of ``p`` per chunk.
    """
    if schedule == "gpipe":
        return [(True, 0, i) for i in range(m)] + [(False, 0, i) for i in range(m)]
    if schedule == "1f1b":
        forwards = [(True, 0, i) for i in range(m)]
        backwards = [(False, 0, i) for i in range(m)]
        warmup = min(p - rank - 1, m)
    else:
        forwards = [
            (True, c, i) for g in range(0, m, p) for c in range(v) for i in range(g, min(g + p, m))
        ]
        backwards = [
            (False, c, i)
            for g in range(0, m, p)
            for c in reversed(range(v))
            for i in range(g, min(g + p, m))
        ]
        warmup = min((p - rank - 1) * 2 + (v - 1) * p, m * v)
    order = forwards[:warmup]
    for i in range(len(forwards) - warmup):
        order += [forwards[warmup + i], backwards[i]]
    return order + backwards[len(forwards) - warmup :]


def chunk_states_peak(
    schedule: str,
    rank: int,
    p: int,
    m: int,
    activation_bytes: Sequence[float],
    transient_bytes: Sequence[float],
    kept_bytes: Sequence[float],
    accumulated_bytes: Sequence[float],
) -> float:
    """The most bytes ``rank`` holds at once in the schedule's order when each of its chunks
    (one entry per chunk, ``v`` of them) also holds states for part of the step: ``kept_bytes``
    from the chunk's first forward, ``accumulated_bytes`` from its first backward, both until
    its last backward ends. Beside them, ``activation_bytes`` per micro-batch from a forward to
    its backward, and ``transient_bytes`` during a backward (as :func:`run_pipeline` counts
    them). Only the order matters, not the timing.

    This is how PyTorch's pipeline stages run FSDP2 (torchtitan, docs/torchtitan.md 3): the
    weights a chunk gathers stay gathered, and its gradients accumulate whole, until the
    chunk's last backward reduce-scatters them and reshards (``stage.py``
    ``backward_maybe_with_nosync``, ``last_backward``). Without interleaving that is the whole
    step; with ``v`` chunks and few micro-batches a rank frees its last chunk's states before
    its first chunk's backwards begin, and holds the first chunk's whole gradients only once
    the last chunk's activations are gone.
    """
    v = len(activation_bytes)
    amounts = np.concatenate([activation_bytes, transient_bytes, kept_bytes, accumulated_bytes])
    return float(np.max(_occupancy(schedule, rank, p, m, v) @ amounts))


@functools.lru_cache(maxsize=256)
def _occupancy(schedule: str, rank: int, p: int, m: int, v: int) -> np.ndarray:
    """Where the rank's memory may peak in the schedule's order (after each forward, during
    each backward), what it holds there, per chunk: micro-batches of activations, the backward
    running, the kept states, the accumulated ones (4 v columns; one row per distinct point)."""
    held, kept, accumulated = [0] * v, [0] * v, [0] * v
    rows = set()
    for forward, chunk, mb in schedule_order(schedule, rank, p, m, v):
        running = [0] * v
        if forward:
            kept[chunk] = 1  # gathered at its first forward
            held[chunk] += 1
        else:
            accumulated[chunk] = 1  # whole from its first backward
            running[chunk] = 1
        rows.add((*held, *running, *kept, *accumulated))
        if not forward:
            held[chunk] -= 1
            if mb == m - 1:  # the chunk's last backward: reduce-scatter and reshard
                kept[chunk] = accumulated[chunk] = 0
    return np.array(sorted(rows), dtype=float)


# size: one discrete-event loop; its state is shared by every event kind
def run_pipeline(
    schedule: str,
    p: int,
    m: int,
    v: int,
    forward_s: Sequence[float],
    backward_s: Sequence[float],
    p2p_s: Sequence[float],
    activation_bytes: Sequence[float],
    transient_bytes: Sequence[float],
    record: bool = True,
    blocking: bool = False,
) -> PipelineRun:
    """Run the schedule; per-virtual-stage inputs are indexed ``chunk * p + rank``.

    ``p2p_s[k]`` is the transfer between virtual stages k and k+1 (either direction). A
    receiver waits for the transfer; with ``blocking`` the sender waits for it too before its
    next block (sends that do not run beside the compute, docs/reference.md 7.3).
    ``record``: keep the spans in ``timeline`` (left empty otherwise: the figures are the same,
    without a list of seven numbers per block).
    """
    stages = p * v
    plans = _block_plans(schedule, p, m, v)
    # End time of every block, -1 until it has run: forward of (vs, mb) at vs * m + mb,
    # backward at (stages + vs) * m + mb.
    ends = [-1.0] * (2 * stages * m)
    position = [0] * p
    free, busy, bubble, pp_wait = [0.0] * p, [0.0] * p, [0.0] * p, [0.0] * p
    held, peak = [0.0] * p, [0.0] * p
    last: list[list[tuple[float, float]]] = [[(0.0, 0.0)] * v for _ in range(p)]
    timeline: list[float] = []
    remaining = 2 * stages * m
    while remaining:
        progressed = False
        for r in range(p):
            plan, i = plans[r], position[r]
            count = len(plan)
            if i == count:
                continue
            # The rank's state in locals while it runs every block whose input is there.
            now, rank_busy, rank_bubble, rank_wait = free[r], busy[r], bubble[r], pp_wait[r]
            rank_held, rank_peak = held[r], peak[r]
            first = i
            while i < count:
                forward, own, dep, k, vs, mb, chunk, final = plan[i]
                dep_end = ends[dep] if dep >= 0 else 0.0
                if dep_end < 0:
                    break
                link = p2p_s[k] if k >= 0 else 0.0
                ready = dep_end + link
                start = now if now >= ready else ready
                if start > now:
                    waited_link = min(start - now, ready - max(now, dep_end))
                    rank_wait += waited_link
                    rank_bubble += start - now - waited_link
                if forward:
                    duration = forward_s[vs]
                    end = start + duration
                    rank_held += activation_bytes[vs]
                    if rank_held > rank_peak:
                        rank_peak = rank_held
                else:
                    duration = backward_s[vs]
                    end = start + duration
                    during = rank_held + transient_bytes[vs]
                    if during > rank_peak:
                        rank_peak = during
                    rank_held -= activation_bytes[vs]
                    if final:
                        last[r][chunk] = (start, end)
                ends[own] = end
                if blocking:
                    out = vs if forward else vs - 1
                    if 0 <= out < stages - 1:
                        rank_wait += p2p_s[out]
                        end += p2p_s[out]
                if record:
                    if link:
                        sender = (vs - 1) % p if forward else (vs + 1) % p
                        timeline += (sender, 1, 1 - forward, mb, chunk, dep_end, link)
                    timeline += (r, 0, 1 - forward, mb, chunk, start, duration)
                rank_busy += duration
                now = end
                i += 1
            free[r], busy[r], bubble[r], pp_wait[r] = now, rank_busy, rank_bubble, rank_wait
            held[r], peak[r] = rank_held, rank_peak
            position[r] = i
            remaining -= i - first
            progressed = progressed or i > first
        if not progressed:
            raise RuntimeError(f"pipeline schedule {schedule!r} deadlocked (p={p}, m={m}, v={v})")
    return PipelineRun(
        finish_s=tuple(free),
        busy_s=tuple(busy),
        bubble_s=tuple(bubble),
        pp_comm_s=tuple(pp_wait),
        peak_activation_bytes=tuple(peak),
        last_backward=tuple(tuple(chunks) for chunks in last),
        timeline=timeline,
    )


_Block = tuple[int, int, int, int, int, int, int, bool]


@functools.lru_cache(maxsize=2)
def _block_plans(schedule: str, p: int, m: int, v: int) -> tuple[tuple[_Block, ...], ...]:
    """Per rank, its blocks in schedule order as plain tuples (what the event loop reads).

    A block is (forward, its slot in the loop's end times, the slot it waits for or -1, the
    index of the P2P transfer before it or -1, virtual stage, micro-batch, chunk, whether it
    is the chunk's last backward). Layouts priced one after another often share (schedule, p,
    m, v); the two most recent are kept (15 MiB for the largest, 8 x 10 x 512 x 2 blocks).
    """
    stages = p * v
    plans = []
    for r in range(p):
        # Per (forward, chunk): forward flag, first end slot, first dependency slot (-1:
        # none), transfer index and virtual stage; a micro-batch adds itself to both slots.
        heads = {}
        for chunk in range(v):
            vs = chunk * p + r
            heads[True, chunk] = (1, vs * m, (vs - 1) * m if vs else -1, vs - 1, vs)
            heads[False, chunk] = (
                0,
                (stages + vs) * m,
                vs * m if vs == stages - 1 else (stages + vs + 1) * m,
                -1 if vs == stages - 1 else vs,
                vs,
            )
        blocks = []
        for forward, chunk, mb in schedule_order(schedule, r, p, m, v):
            fwd, own, dep, k, vs = heads[forward, chunk]
            # Every schedule runs a chunk's backwards in micro-batch order: the last is m - 1.
            final = not fwd and mb == m - 1
            blocks.append((fwd, own + mb, dep + mb if dep >= 0 else -1, k, vs, mb, chunk, final))
        plans.append(tuple(blocks))
    return tuple(plans)


def grad_sync(
    rank: int,
    windows: Sequence[tuple[float, float]],
    buckets: Sequence[Sequence[float]],
    after_s: float,
    overlap: bool,
    timeline: list[float],
    tied_s: float = 0.0,
) -> float:
    """End time of the gradient reduction of one pipeline rank (spans go to ``timeline``).

    ``buckets[c]`` are the reduction times of chunk ``c``'s buckets. With ``overlap``, bucket
    k of n is ready at ``start + (k + 1) / n`` of the chunk's last backward window and the
    buckets run one after another on the communication stream; without it, all start at
    ``after_s`` (the end of the rank's compute). ``tied_s``: the tied embedding's all-reduce,
    which the first and last stages run once the reduction is done.
    """
    clock = 0.0
    for chunk in sorted(range(len(windows)), key=lambda c: windows[c][1]):
        start, end = windows[chunk]
        times = buckets[chunk]
        for k, seconds in enumerate(times):
            ready = start + (k + 1) / len(times) * (end - start) if overlap else after_s
            begin = max(clock, ready)
            clock = begin + seconds
            timeline += (rank, 2, 2, k, chunk, begin, seconds)
    end = max(clock, after_s)
    if tied_s:
        timeline += (rank, 2, 3, 0, 0, end, tied_s)
    return end + tied_s
