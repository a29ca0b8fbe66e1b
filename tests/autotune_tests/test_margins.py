"""Memory margins per stack: each from its own runs, or every stack's pooled where a stack has
too few; the misses counted in shares of the device's memory."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest

from autotune import catalog
from autotune.calibrate import MIN_EVIDENCE
from autotune.calibrate import Run
from autotune.calibrate import device_share
from autotune.calibrate import margin_for
from autotune.calibrate import memory_margin
from autotune.calibrate import stack_margins
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import Prediction


@dataclass(frozen=True)
class FixedMemory:
    """Test-only: every layout's tensors take ``tensors_gib``, plus 5 GiB lost and 3 GiB
    reserved."""

    name: str = "fixed"
    tensors_gib: float = 40.0

    def simulate(self, job: Job, layout: Layout) -> Prediction:
        cluster = job.cluster
        memory = {"weights": self.tensors_gib, "fragmentation": 5.0, "reserved": 3.0}
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


def _margin_of_share(share: float) -> float:
    """The margin that keeps ``share`` of the device free at the limit: predicted x (1 +
    margin) = capacity leaves capacity x share."""
    return share / (1 - share)


def test_a_stack_with_enough_runs_gets_the_95th_percentile_of_its_own() -> None:
    # 40 device peaks 48 + 0 .. 7.8 GiB on 80 GiB cards: the 95th percentile of the misses is
    # 7.41 GiB, 9.26% of the device, so a layout fits up to 72.6 GiB: margin 80 / 72.6 - 1
    peaks = [48 + 0.2 * i for i in range(40)]
    runs = [_run("megatron_core", peak=p) for p in peaks]
    margins = stack_margins(FixedMemory(), runs, ["alpha"] * len(runs))
    share = float(np.percentile(0.2 * np.arange(40), 95)) / 80
    assert share == pytest.approx(0.0926, abs=1e-4)
    assert margins["megatron_core"].value == pytest.approx(80 / (80 * (1 - share)) - 1)
    assert margins["megatron_core"].runs == 40 and margins["megatron_core"].sources == ("alpha",)
    assert margin_for("megatron_core", margins).text() == (
        "9.3% of the device free: 95th percentile, 40 megatron_core runs: alpha"
    )
    assert device_share(margins["megatron_core"].value) == pytest.approx(share)


def test_a_miss_counts_in_shares_of_the_device_not_of_the_prediction() -> None:
    # The same 4 GiB missed on a small layout and on a large one: a relative margin would take
    # the small layout's 4 / 8 = 50% to the device's limit; in shares of the device both are
    # 5%, and a layout fits up to 76 GiB of 80.
    small = dataclasses.replace(FixedMemory(), tensors_gib=0.0)  # 8 GiB predicted
    runs = [_run("megatron_core", peak=12.0)] * MIN_EVIDENCE
    assert stack_margins(small, runs)["megatron_core"].value == pytest.approx(
        _margin_of_share(0.05)
    )
    large = [_run("megatron_core", peak=52.0)] * MIN_EVIDENCE  # 48 GiB predicted
    assert stack_margins(FixedMemory(), large)["megatron_core"].value == pytest.approx(
        _margin_of_share(0.05)
    )


def test_an_allocated_peak_is_compared_with_the_tensors_alone() -> None:
    # 40 GiB of tensors predicted; measured 44 GiB allocated: 4 GiB (5% of 80) missed, not
    # 44 - 48 = -4
    runs = [_run("megatron_core", peak=44.0, measure="allocated")] * MIN_EVIDENCE
    value = stack_margins(FixedMemory(), runs)["megatron_core"].value
    assert value == pytest.approx(_margin_of_share(0.05))


def test_a_run_out_of_memory_shows_at_least_the_device_over_the_prediction() -> None:
    # 48 GiB predicted for a run that ran out of 80 GiB: it missed at least 32 GiB, 40%
    runs = [_run("megatron_core", peak=48.0)] * 19 + [_run("megatron_core", status="oom")]
    value = stack_margins(FixedMemory(), runs)["megatron_core"].value
    assert value == pytest.approx(_margin_of_share(np.percentile([0.0] * 19 + [0.4], 95)))
    assert value > 0


def test_a_stack_with_too_few_runs_gets_every_stacks_runs_pooled() -> None:
    runs = [_run("megatron_core", peak=56.0)] * MIN_EVIDENCE  # 8 GiB missed: 10% of 80
    runs += [_run("megatron_deepspeed", peak=68.0)] * MIN_EVIDENCE  # 20 GiB: 25%
    runs += [_run("megatron_lm", peak=48.0)] * 3  # exact, but only three runs
    margins = stack_margins(FixedMemory(), runs)
    pooled = _margin_of_share(np.percentile([0.1] * 20 + [0.25] * 20 + [0.0] * 3, 95))
    mine = margin_for("megatron_lm", margins)
    assert mine.value == pytest.approx(pooled) and mine.runs == 3 and mine.pooled_runs == 43
    assert "3 megatron_lm runs" in mine.text() and "43 runs pooled" in mine.text()
    assert margin_for("megatron_core", margins).value == pytest.approx(_margin_of_share(0.1))
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


def test_the_margin_lets_a_layout_at_the_limit_keep_the_share_missed_free() -> None:
    # 20 runs on 16 GiB cards and 20 on 80 GiB cards, each missing 5% of its device at
    # predictions from a quarter of the device to all of it: the margin is 5 / 95, and a
    # layout predicted at 95% of a device is the largest that fits.
    capacity = np.repeat([16.0, 80.0], 20)
    predicted = capacity * np.tile(np.linspace(0.25, 1.0, 20), 2)
    margin = memory_margin(predicted, predicted + 0.05 * capacity, capacity)
    assert margin == pytest.approx(0.05 / 0.95)
    assert margin is not None and 0.95 * 80 * (1 + margin) == pytest.approx(80)
    assert memory_margin(predicted, predicted - 1.0, capacity) == 0.0  # over-predicted: none
    assert memory_margin(predicted, np.full(40, np.nan), capacity) is None


def test_a_stack_measured_on_one_cluster_lends_no_margin_of_its_own_to_another() -> None:
    # 20 runs of one source that miss 0, and 20 of another stack that miss 25%: for a job on
    # a cluster neither measured, the first stack's runs say nothing of how the misses move
    # between clusters, so it gets every stack's pooled margin; a job of its own cluster (a
    # cluster's history) keeps its own, as does a stack whose runs come from two sources.
    runs = [_run("megatron_core", peak=48.0)] * MIN_EVIDENCE
    runs += [_run("megatron_deepspeed", peak=68.0)] * MIN_EVIDENCE  # 20 GiB: 25%
    margins = stack_margins(FixedMemory(), runs, ["alpha"] * 20 + ["beta"] * 20)
    pooled = _margin_of_share(np.percentile([0.0] * 20 + [0.25] * 20, 95))
    assert margin_for("megatron_core", margins).value == 0.0
    elsewhere = margin_for("megatron_core", margins, elsewhere=True)
    assert elsewhere.value == pytest.approx(pooled) and elsewhere.pooled_runs == 40
    assert "20 megatron_core runs with a known peak (alpha)" in elsewhere.text()
    two = stack_margins(FixedMemory(), runs[:20], ["alpha"] * 10 + ["gamma"] * 10)
    assert margin_for("megatron_core", two, elsewhere=True).value == 0.0
    assert margin_for("megatron_core", two, elsewhere=True).pooled_runs == 0
