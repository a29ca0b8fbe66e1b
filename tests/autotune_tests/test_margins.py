"""Memory margins per stack: each from its own runs, or the widest where a stack has too few."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest

from autotune import catalog
from autotune.calibrate import MIN_EVIDENCE
from autotune.calibrate import Run
from autotune.calibrate import margin_for
from autotune.calibrate import stack_margins
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import Prediction


@dataclass(frozen=True)
class FixedMemory:
    """Test-only: every layout's tensors take 40 GiB, plus 5 GiB lost and 3 GiB reserved."""

    name: str = "fixed"

    def simulate(self, job: Job, layout: Layout) -> Prediction:
        cluster = job.cluster
        memory = {"weights": 40.0, "fragmentation": 5.0, "reserved": 3.0}
        return Prediction(
            step_time_s=1.0,
            memory_gib=sum(memory.values()),
            memory_capacity_gib=cluster.device.memory_gib,
            breakdown={"compute": 1.0},
            memory_breakdown_gib=memory,
            tokens_per_s_per_device=1.0,
            mfu=0.5,
        )


def _run(framework: str, status: str = "ok", peak: float = float("nan"), measure: str = "device"):
    job = catalog.load_job("llama2_7b", "a100")
    train = dataclasses.replace(job.train, framework=catalog.load_framework(framework))
    layout = Layout.resolve(job.cluster.num_devices)
    return Run(
        specs=(dataclasses.replace(job, train=train), layout),
        status=status,
        peak_memory_gib=peak,
        peak_memory_measure=measure,
    )


def test_a_stack_with_enough_runs_gets_the_95th_percentile_of_its_own() -> None:
    # 40 device peaks 48 x (1.00 .. 1.39): the 95th percentile of under-prediction is 0.3705
    peaks = [48 * (1 + i / 100) for i in range(40)]
    runs = [_run("megatron_core", peak=p) for p in peaks]
    margins = stack_margins(FixedMemory(), runs, ["alpha"] * len(runs))
    expected = float(np.percentile(np.arange(40) / 100, 95))
    assert margins["megatron_core"].value == pytest.approx(expected)
    assert margins["megatron_core"].runs == 40 and margins["megatron_core"].sources == ("alpha",)
    assert margin_for("megatron_core", margins).text() == (
        "95th percentile of under-prediction, 40 megatron_core runs: alpha"
    )


def test_an_allocated_peak_is_compared_with_the_tensors_alone() -> None:
    # 40 GiB of tensors predicted; measured 44 GiB allocated: 10% under, not 44 / 48 - 1
    runs = [_run("megatron_core", peak=44.0, measure="allocated")] * MIN_EVIDENCE
    assert stack_margins(FixedMemory(), runs)["megatron_core"].value == pytest.approx(0.1)


def test_a_run_out_of_memory_shows_at_least_the_device_over_the_prediction() -> None:
    # 48 GiB predicted for a run that ran out of 80 GiB: under-predicted by at least 2/3
    runs = [_run("megatron_core", peak=48.0)] * 19 + [_run("megatron_core", status="oom")]
    value = stack_margins(FixedMemory(), runs)["megatron_core"].value
    assert value == pytest.approx(np.percentile([0.0] * 19 + [80 / 48 - 1], 95))
    assert value > 0


def test_a_stack_with_too_few_runs_gets_every_stacks_runs_pooled() -> None:
    runs = [_run("megatron_core", peak=52.8)] * MIN_EVIDENCE  # 10% under
    runs += [_run("megatron_deepspeed", peak=60.0)] * MIN_EVIDENCE  # 25% under
    runs += [_run("megatron_lm", peak=48.0)] * 3  # exact, but only three runs
    margins = stack_margins(FixedMemory(), runs)
    pooled = np.percentile([0.1] * 20 + [0.25] * 20 + [0.0] * 3, 95)
    mine = margin_for("megatron_lm", margins)
    assert mine.value == pytest.approx(pooled) and mine.runs == 3 and mine.pooled_runs == 43
    assert "3 megatron_lm runs" in mine.text() and "43 runs pooled" in mine.text()
    assert margin_for("megatron_core", margins).value == pytest.approx(0.1)  # its own
    unseen = margin_for("mindspeed", margins)  # no run at all
    assert unseen.value == pytest.approx(pooled) and unseen.runs == 0


def test_runs_without_memory_evidence_are_not_counted() -> None:
    runs = [_run("megatron_core")] * 30  # ran, no peak measured
    margins = stack_margins(FixedMemory(), runs)
    nothing = margin_for("megatron_core", margins)
    assert nothing.value == 0.0 and nothing.runs == 0


def test_too_few_runs_even_pooled_back_no_margin() -> None:
    # One cluster's history of five peaks: its 95th percentile would be their largest.
    few = stack_margins(FixedMemory(), [_run("megatron_core", peak=52.8)] * 5)
    assert not margin_for("megatron_core", few).supported
    enough = stack_margins(FixedMemory(), [_run("megatron_core", peak=52.8)] * MIN_EVIDENCE)
    assert margin_for("megatron_core", enough).supported
    assert margin_for("megatron_lm", enough).supported  # every stack's 20, pooled
