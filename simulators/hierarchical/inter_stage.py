"""Inter-stage: a discrete-event run of the pipeline schedule on every pipeline rank.

Each rank executes its forward (F) and backward (B) blocks in the order of the schedule
(GPipe, 1F1B, or Megatron's interleaved 1F1B with ``v`` chunks per rank); a block starts when
the rank is free and its input has arrived from the neighbouring stage (plus the P2P time).
The loop visits every block once, so it stays linear in ``pp * vpp * micro-batches``.
After the last backward of each chunk, gradients are reduced over data parallelism in buckets
that overlap the rest of the backward (Megatron ``overlap_grad_reduce``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "SCHEDULES",
    "Event",
    "PipelineRun",
    "Timeline",
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
_FIELDS = 7  # rank, lane, kind (0 F, 1 B, 2 grad bucket), index, chunk, start, duration


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
) -> PipelineRun:
    """Run the schedule; per-virtual-stage inputs are indexed ``chunk * p + rank``.

    ``p2p_s[k]`` is the transfer between virtual stages k and k+1 (either direction).
    """
    stages = p * v
    f_end = [[-1.0] * m for _ in range(stages)]
    b_end = [[-1.0] * m for _ in range(stages)]
    # Blocks as ints (micro-batch * v + chunk) * 2 + forward: no per-block objects to collect.
    orders = [
        [(mb * v + chunk) * 2 + fwd for fwd, chunk, mb in schedule_order(schedule, r, p, m, v)]
        for r in range(p)
    ]
    position, free = [0] * p, [0.0] * p
    busy, bubble, pp_wait = [0.0] * p, [0.0] * p, [0.0] * p
    held, peak = [0.0] * p, [0.0] * p
    done_b = [0] * stages
    last: list[list[tuple[float, float]]] = [[(0.0, 0.0)] * v for _ in range(p)]
    timeline: list[float] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(p):
            order, i = orders[r], position[r]
            while i < len(order):
                code = order[i]
                forward, chunk, mb = code & 1, (code >> 1) % v, (code >> 1) // v
                vs = chunk * p + r
                if forward:
                    dep, link = (f_end[vs - 1][mb], p2p_s[vs - 1]) if vs else (0.0, 0.0)
                elif vs == stages - 1:
                    dep, link = f_end[vs][mb], 0.0
                else:
                    dep, link = b_end[vs + 1][mb], p2p_s[vs]
                if dep < 0:
                    break
                ready = dep + link
                start = max(free[r], ready)
                if start > free[r]:
                    waited_link = min(start - free[r], ready - max(free[r], dep))
                    pp_wait[r] += waited_link
                    bubble[r] += start - free[r] - waited_link
                if link:
                    sender = (vs - 1) % p if forward else (vs + 1) % p
                    timeline += (sender, 1, 1 - forward, mb, chunk, dep, link)
                duration = forward_s[vs] if forward else backward_s[vs]
                end = start + duration
                if forward:
                    f_end[vs][mb] = end
                    held[r] += activation_bytes[vs]
                    peak[r] = max(peak[r], held[r])
                else:
                    b_end[vs][mb] = end
                    peak[r] = max(peak[r], held[r] + transient_bytes[vs])
                    held[r] -= activation_bytes[vs]
                    done_b[vs] += 1
                    if done_b[vs] == m:
                        last[r][chunk] = (start, end)
                timeline += (r, 0, 1 - forward, mb, chunk, start, duration)
                busy[r] += duration
                free[r] = end
                i += 1
                remaining -= 1
                progressed = True
            position[r] = i
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


def grad_sync(
    rank: int,
    windows: Sequence[tuple[float, float]],
    buckets: Sequence[Sequence[float]],
    after_s: float,
    overlap: bool,
    timeline: list[float],
) -> float:
    """End time of the gradient reduction of one pipeline rank (spans go to ``timeline``).

    ``buckets[c]`` are the reduction times of chunk ``c``'s buckets. With ``overlap``, bucket
    k of n is ready at ``start + (k + 1) / n`` of the chunk's last backward window and the
    buckets run one after another on the communication stream; without it, all start at
    ``after_s`` (the end of the rank's compute).
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
    return max(clock, after_s)
