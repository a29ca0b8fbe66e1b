"""Unequal model chunks in Megatron's interleaved schedule
(autotune/simulators/interleaving.py)."""

from __future__ import annotations

import pytest

from autotune import catalog
from autotune.simulators import Layout
from autotune.simulators.analytical.stages import FLOATS
from autotune.simulators.analytical.stages import in_flight
from autotune.simulators.interleaving import held_chunks
from autotune.simulators.interleaving import slowdown
from autotune.simulators.layout import deal_chunks
from autotune.simulators.schedule import run_pipeline


def _event_over_closed(
    stage_layers: tuple[int, ...], vpp: int, m: int, ratio: float, extra: float
) -> float:
    """The schedule run block by block, over the closed form, on unit-cost layers."""
    pp = len(stage_layers)
    forward = [float(n) for n in deal_chunks(stage_layers, vpp)]
    forward[-1] += extra
    zeros = [0.0] * (pp * vpp)
    run = run_pipeline(
        "interleaved", pp, m, vpp, forward, [ratio * f for f in forward], zeros, zeros, zeros
    )
    units = [n * (1 + ratio) for n in stage_layers]
    units[-1] += extra * (1 + ratio)
    closed = m * max(units) + (sum(units) - max(units)) / vpp
    return max(run.finish_s) / closed


@pytest.mark.parametrize(
    ("stage_layers", "vpp"),
    [((20,) * 4, 1), ((20,) * 4, 5), ((16,) * 8, 4), ((1, 2, 2, 2, 2, 2, 2, 1), 1)],
)
def test_even_chunks_run_at_the_closed_form(stage_layers: tuple[int, ...], vpp: int) -> None:
    assert slowdown(stage_layers, vpp, 8 * len(stage_layers), 2.0, last_extra=2.5) == 1.0
    if vpp > 1:  # the event run agrees, output layer included
        assert _event_over_closed(stage_layers, vpp, 8 * len(stage_layers), 2.0, 2.5) == 1.0


@pytest.mark.parametrize(
    ("stage_layers", "vpp", "ratio", "extra"),
    [
        ((2,) * 8, 3, 2.0, 0.0),  # chunks 1, 1, 0 on every rank
        ((3,) * 8, 2, 3.0, 0.0),  # full recompute: 2, 1
        ((1, 1) + (2,) * 29 + (1,), 4, 3.0, 0.0),  # DeepSeek-V3's 61 layers over pp 32
        ((2, 5, 5, 5, 5, 5, 3, 2), 3, 2.0, 2.5),  # a heavy output layer in the last chunk
    ],
)
def test_a_long_step_is_priced_from_two_short_runs(
    stage_layers: tuple[int, ...], vpp: int, ratio: float, extra: float
) -> None:
    m = 8 * len(stage_layers)
    expected = _event_over_closed(stage_layers, vpp, m, ratio, extra)
    assert expected > 1.1  # what the closed form misses is real in these splits
    assert slowdown(stage_layers, vpp, m, ratio, last_extra=extra) == pytest.approx(expected)


def test_the_output_layer_is_counted_in_half_layers() -> None:
    split = (2, 5, 5, 5, 5, 5, 3, 2)
    assert slowdown(split, 3, 64, 2.0, last_extra=2.4) == slowdown(split, 3, 64, 2.0, 2.5)


@pytest.mark.parametrize(("pp", "vpp", "m"), [(4, 2, 8), (8, 4, 16), (4, 5, 12), (8, 2, 8)])
def test_held_activations_of_even_chunks_are_the_closed_forms(pp: int, vpp: int, m: int) -> None:
    held = held_chunks((3 * vpp,) * pp, vpp, m)
    assert held == pytest.approx([in_flight(m, pp, vpp, rank, FLOATS) for rank in range(pp)])


def test_half_empty_chunks_are_no_faster_than_fewer_chunks() -> None:
    # DeepSeek-V3 on 256 H100s at pp 32: 4 chunks leave half of them empty. The closed form
    # alone priced it 1.5% faster than 2 chunks; with the schedule run it is 46% slower, as the
    # hierarchical simulator, which runs the schedule with each chunk's own costs, has it
    # (45%).
    job = catalog.load_job("deepseek_v3", "h100", ["cluster.num_nodes=32"])
    simulator = catalog.load_simulator("analytical")

    def predicted(vpp: int) -> tuple[float, float]:
        layout = Layout(dp=4, pp=32, cp=2, ep=8, vpp=vpp, micro_batch=2, recompute="full")
        assert not layout.violations(job)
        prediction = simulator.simulate(job, layout)
        return prediction.step_time_s, prediction.memory_gib

    (four_s, four_gib), (two_s, two_gib) = predicted(4), predicted(2)
    assert four_s / two_s > 1.3
    # and it holds more: 63.2 GiB against 61.1 (the hierarchical simulator: 63.2 and 61.1)
    assert four_gib > two_gib + 1


def test_a_short_last_group_is_priced_from_the_line_not_run() -> None:
    # Megatron refuses 20 micro-batches at pp 8 (Layout.violations); priced anyway through the
    # API, the step lies on the line through whole groups instead of stalling the event loop.
    split = (2,) * 8
    assert slowdown(split, 3, 16, 2.0) < slowdown(split, 3, 20, 2.0) < slowdown(split, 3, 24, 2.0)
