"""What unequal model chunks cost Megatron's interleaved 1F1B schedule beyond the closed form.

The analytical simulator prices an interleaved pipeline as ``m`` micro-batches at the pace of
the slowest rank plus a fill-and-drain bubble divided by ``vpp`` (Narayanan et al. 2021,
docs/reference.md 3.4). That holds when every chunk of a rank holds the same layers. When a
stage's layers do not deal evenly over its chunks (2 layers over 3 chunks: 1, 1, 0), the
schedule's fixed order of forward and backward blocks makes the ranks wait on each other in
the steady state too, and interleaving can run slower than none
(docs/decisions/0038-unequal-interleaved-chunks.md). The
output layer and loss, which run in the last chunk of the last rank, weigh on it the same way.

:func:`slowdown` measures it on the discrete-event run of the schedule that the hierarchical
simulator uses (:func:`autotune.simulators.schedule.run_pipeline`): every layer
takes one unit forward and ``backward_ratio`` units backward, the output layer ``last_extra``
layers' worth (in half-layer steps, so that the layouts of one job share runs), transfers are free,
and the run is set against the closed form on the same units. Past two groups of ``pp``
micro-batches each group adds the same time, so a long step is priced from two short runs.
"""

from __future__ import annotations

import functools

from autotune.simulators.layout import deal_chunks
from autotune.simulators.schedule import run_pipeline

__all__ = ["held_chunks", "slowdown", "unequal_chunks"]


def unequal_chunks(stage_layers: tuple[int, ...], vpp: int) -> bool:
    """Whether some stage's layers do not deal evenly over its ``vpp`` chunks."""
    return vpp > 1 and any(layers % vpp for layers in stage_layers)


def slowdown(
    stage_layers: tuple[int, ...],
    vpp: int,
    microbatches: int,
    backward_ratio: float,
    last_extra: float = 0.0,
) -> float:
    """Time of the interleaved schedule over the closed form's, on unit-cost layers, at least
    1: 1.0 when every stage's layers split evenly over its ``vpp`` chunks (or without
    interleaving). Where the run beats the closed form, it is by the unequal stages the closed
    form also prices without interleaving, not by the chunks: that is left as it is."""
    if not unequal_chunks(stage_layers, vpp):
        return 1.0
    extra = round(2 * last_extra) / 2
    units = [layers * (1 + backward_ratio) for layers in stage_layers]
    units[-1] += extra * (1 + backward_ratio)
    slowest = max(units)
    closed = microbatches * slowest + (sum(units) - slowest) / vpp
    run = _makespan(stage_layers, vpp, microbatches, backward_ratio, extra)
    return max(1.0, run / closed)


def _makespan(
    stage_layers: tuple[int, ...], vpp: int, m: int, backward_ratio: float, extra: float
) -> float:
    pp = len(stage_layers)
    if m == pp:
        return _run(stage_layers, vpp, m, backward_ratio, extra)[0]
    # Whole groups of pp only: Megatron refuses a short last group (Layout.violations), and
    # the event loop has no order for one; a layout priced anyway gets the line's value.
    start, per_group = _line(stage_layers, vpp, backward_ratio, extra)
    return start + (m - 2 * pp) / pp * per_group


@functools.lru_cache(maxsize=1024)
def _line(
    stage_layers: tuple[int, ...], vpp: int, backward_ratio: float, extra: float
) -> tuple[float, float]:
    """(time of two groups of pp micro-batches, time each further group adds)."""
    pp = len(stage_layers)
    two = _run(stage_layers, vpp, 2 * pp, backward_ratio, extra)[0]
    return two, _run(stage_layers, vpp, 3 * pp, backward_ratio, extra)[0] - two


def held_chunks(stage_layers: tuple[int, ...], vpp: int, microbatches: int) -> tuple[float, ...]:
    """Per pipeline rank, the most micro-batches of its activations it holds at once, in units
    of its whole stage, as :func:`autotune.simulators.analytical.stages.in_flight` counts them:
    from the schedule run with each chunk holding its own layers' activations. The order of a
    rank's blocks alone sets it, and a rank reaches it in its warm-up, within two groups of pp."""
    pp = len(stage_layers)
    peaks = _run(stage_layers, vpp, pp if microbatches <= pp else 2 * pp, 2.0, 0.0)[1]
    return tuple(peak / layers for peak, layers in zip(peaks, stage_layers, strict=True))


@functools.lru_cache(maxsize=1024)
def _run(
    stage_layers: tuple[int, ...], vpp: int, m: int, backward_ratio: float, extra: float
) -> tuple[float, tuple[float, ...]]:
    """(makespan, each rank's peak of layers' activations held) of the unit-cost run."""
    pp = len(stage_layers)
    layers = [float(n) for n in deal_chunks(stage_layers, vpp)]
    forward = list(layers)
    forward[-1] += extra  # the last virtual stage: the last rank's last chunk
    stages = pp * vpp
    run = run_pipeline(
        "interleaved",
        pp,
        m,
        vpp,
        forward_s=forward,
        backward_s=[backward_ratio * f for f in forward],
        p2p_s=[0.0] * stages,
        activation_bytes=layers,
        transient_bytes=[0.0] * stages,
        record=False,
    )
    return max(run.finish_s), run.peak_activation_bytes
