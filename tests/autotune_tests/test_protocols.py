"""Benchmark protocols: no scored row leaks into a fit, the pick's rules, probes, the curve."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from autotune import catalog
from autotune import dataset
from autotune.benchmark import run_benchmark
from autotune.benchmark._plots import plot_frames
from autotune.benchmark._protocol_tables import regret_curve
from autotune.benchmark._report import console_tables
from autotune.calibrate import ProbeSettings
from autotune.calibrate import ProtocolSettings
from autotune.calibrate import Run
from autotune.calibrate import ZeroShot
from autotune.calibrate import _priors as priors
from autotune.calibrate import _probe_protocol as probe_protocol
from autotune.calibrate import _protocols as protocols
from autotune.calibrate import memory_runs
from autotune.calibrate import row_runs
from autotune.calibrate import shipped_margins
from autotune.calibrate._command import fit_settings
from autotune.calibrate._protocols import margins_elsewhere
from autotune.config import BenchmarkConfig
from autotune.config import load_config
from autotune.progress import Progress
from autotune.simulators import Simulator
from autotune.simulators import UserError
from autotune.simulators.job import Job
from autotune.simulators.layout import Layout
from autotune.simulators.prediction import MEMORY_READINGS
from tests.dataset_tests._tables import write

SMALL = ["data=public", "source=[korthikanti,dlperf]", "tracking.enabled=false"]


def _config(*overrides: str) -> BenchmarkConfig:
    return load_config(BenchmarkConfig, [*SMALL, *overrides])


def test_leave_one_source_out_never_fits_on_the_scored_source(fitted: list[list[Run]]) -> None:
    result = run_benchmark(_config("protocols=[leave_one_source_out]"))
    assert len(fitted) == 2  # one calibration per source, in order: dlperf, korthikanti
    sources = [{run.group.split("/")[0] for run in runs} for runs in fitted]
    # on the other scored source and on the shipped sources the table does not hold
    for scored, other, fit_sources in zip(
        ("dlperf", "korthikanti"), ("korthikanti", "dlperf"), sources, strict=True
    ):
        assert scored not in fit_sources and {other, "vtrain", "bloom"} <= fit_sources
    summary = result.summaries["analytical, leave-one-source-out"]
    assert summary["protocol"] == "leave_one_source_out"
    assert summary["by_source"]["dlperf"]["n_scenarios"] == 4


def test_a_source_scored_alone_is_calibrated_on_the_shipped_sources(
    fitted: list[list[Run]],
) -> None:
    """With no other source in the table, leave one source out fits on the shipped ones and
    predicts every row, as in the whole table (docs/decisions/0070)."""
    config = load_config(
        BenchmarkConfig,
        ["data=bigscience_tr3m", "tracking.enabled=false", "protocols=[leave_one_source_out]"],
    )
    rows = run_benchmark(config).rows
    (fit_sources,) = [{run.group.split("/")[0] for run in runs} for runs in fitted]
    assert "bigscience_tr3m" not in fit_sources and {"vtrain", "bloom", "simumax"} <= fit_sources
    loso = rows[rows["simulator"] == "analytical, leave-one-source-out"]
    assert len(loso) == 27 and loso["predicted_step_time_s"].notna().all()


def test_probes_see_only_their_own_measurements_and_are_not_scored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The priors are estimated without the scored source; the loop reads a row's measurement
    only once it chose that row: changing every other measurement changes none of its scores."""
    left_out: list[str | None] = []
    real_priors = priors.priors_from

    def priors_spy(table, runs, predicted_s, peaks, leave_out=None, *host):  # noqa: ANN001, ANN002, ANN202
        left_out.append(leave_out)
        return real_priors(table, runs, predicted_s, peaks, leave_out, *host)

    real = priors.estimate

    def spy(residuals, jobs, sources, codes, **options):  # noqa: ANN001, ANN003, ANN202
        assert left_out[-1] not in set(sources)  # no row of the scored source
        return real(residuals, jobs, sources, codes, **options)

    monkeypatch.setattr(priors, "estimate", spy)
    monkeypatch.setattr(priors, "priors_from", priors_spy)
    result = run_benchmark(_config("protocols=[probe]", "probes=[1,2]"))
    assert left_out == ["dlperf", "korthikanti"]  # one set of priors per source, without it
    rows = result.rows
    probe = rows[rows["simulator"] == "analytical, probe K=1"]
    scored = probe["predicted_step_time_s"].notna()
    # a scenario of n measured layouts keeps n - 1 predictions: the probe's is not scored
    per_scenario = probe.groupby("scenario")["layout"].size() - 1
    assert scored.groupby(probe["scenario"]).sum().to_dict() == per_scenario.to_dict()
    table = dataset.priceable_rows(dataset.load_public(["dlperf"])).table
    specs = dataset.table_specs(table)
    runs = row_runs(table, specs)
    simulator = catalog.load_simulator("analytical")
    zero = _zero_shot(simulator, specs)
    config = _config()
    settings = ProtocolSettings(
        fit=fit_settings(config.calibrate),
        probe=ProbeSettings(stop_gain=0.01, stop_probability=0.05),
        probes=(2,),
    )
    first = probe_protocol.probe_scores(simulator, table, runs, zero, settings)[0]
    probed = set(first.rows[np.isnan(first.predicted_s)])  # measured: no prediction scored
    assert 0 < len(probed) < len(first.rows)
    changed = [
        run
        if i in probed or run is None
        else dataclasses.replace(run, step_time_s=3 * run.step_time_s)
        for i, run in enumerate(runs)
    ]
    again = probe_protocol.probe_scores(simulator, table, changed, zero, settings)[0]
    np.testing.assert_array_equal(again.score, first.score)
    np.testing.assert_array_equal(again.fits, first.fits)


def _zero_shot(simulator: Simulator, specs: Sequence[tuple[Job, Layout]]) -> ZeroShot:
    predictions = [simulator.simulate(*s) for s in specs]
    readings = [p.readings_gib() for p in predictions]
    return ZeroShot(
        np.array([p.step_time_s for p in predictions]),
        np.array([p.memory_gib for p in predictions]),
        {key: np.array([r[key] for r in readings]) for key in MEMORY_READINGS},
    )


def _margins_elsewhere(table: pd.DataFrame) -> dict[tuple[str, str], float]:
    simulator = catalog.load_simulator("analytical")
    table = dataset.priceable_rows(table).table
    specs = dataset.table_specs(table)
    zero = _zero_shot(simulator, specs)
    return margins_elsewhere(simulator, table, row_runs(table, specs), zero)


def test_a_source_scored_alone_gets_the_margin_the_other_sources_give_it(tmp_path: Path) -> None:
    """A source with no other beside it in the benchmark's table (``data=`` one source, or a
    file of one's own) takes its memory margin from the shipped sources, as in the whole table,
    never the margin of no evidence (docs/decisions/0070)."""
    _, memory_sources = memory_runs()
    whole = _margins_elsewhere(dataset.load_public(sorted(set(memory_sources))))
    alone = _margins_elsewhere(dataset.load_public(["bigscience_tr3m"]))
    key = ("bigscience_tr3m", "megatron_deepspeed")
    assert list(alone) == [key]
    assert alone[key] == pytest.approx(whole[key]) and alone[key] > 0.05
    # a source the shipped data do not hold gets the margin a search gets for its stack
    mine = write(tmp_path / "runs.csv", {"source": "mine", "dp": 2, "tp": 4})
    theirs = _margins_elsewhere(dataset.load_measurements(mine))
    shipped = shipped_margins(catalog.load_simulator("analytical"))["megatron_core"]
    assert theirs == {("mine", "megatron_core"): pytest.approx(shipped.value)}


def test_the_calibrating_protocols_report_their_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fit of leave one source out and leave one model out, and each probed scenario, is
    a step of a progress line on stderr (a hierarchical run of them takes minutes)."""
    steps: dict[str, list[int]] = {}

    class Recorder(Progress):
        def update(self, done: int, left_s: float | None = None) -> None:
            steps.setdefault(self.label, []).append(done)
            super().update(done, left_s)

    monkeypatch.setattr(protocols, "Progress", Recorder)
    monkeypatch.setattr(probe_protocol, "Progress", Recorder)
    protocols_asked = "protocols=[leave_one_source_out,leave_one_model_out,probe]"
    run_benchmark(_config(protocols_asked, "probes=[1]", "source=[korthikanti]"))
    assert steps["analytical, leave one source out"] == [1]
    fits = steps["analytical, leave one model out"]
    assert len(fits) >= 2 and fits == list(range(1, len(fits) + 1))
    assert steps["analytical, probes"] == [1, 2, 3, 4]  # korthikanti's four scenarios


@pytest.mark.slow  # two benchmarks that fit calibrations, one in processes
def test_fits_in_processes_score_what_fits_in_one_process_score() -> None:
    """``workers=2`` fits leave one source out's and leave one model out's calibrations in two
    processes: the same predictions, fits and summaries, to the bit, as one process."""
    asked = ("protocols=[leave_one_source_out,leave_one_model_out]", "source=[korthikanti]")
    alone, shared = (run_benchmark(_config(*asked, f"workers={n}")) for n in (1, 2))
    pd.testing.assert_frame_equal(alone.rows, shared.rows)
    as_text = [json.dumps(r.summaries, sort_keys=True, default=str) for r in (alone, shared)]
    assert as_text[0] == as_text[1]  # NaN included
    calibrated = shared.rows[shared.rows["simulator"].str.contains("leave-one")]
    assert len(calibrated) == 16 and calibrated["predicted_step_time_s"].notna().all()


def test_the_regret_curve_has_every_protocol_and_k() -> None:
    result = run_benchmark(_config("protocols=[zero_shot,probe]", "probes=[1,2]"))
    curve = regret_curve(result)
    assert sorted(set(curve["protocol"])) == ["probe", "random probes", "top-K probes"]
    assert sorted(set(curve["K"])) == [1, 2]
    text = console_tables(result, 3)
    assert "Regret@1 mean against the number of probes K" in text
    shown = list(plot_frames(result)["rankers"]["simulator"])
    assert "analytical, probe K=2" in shown and "analytical, probe K=1" not in shown
    assert len(plot_frames(result)["curve"]) == 6
    top2 = result.summaries["analytical, top-2 probes"]
    assert top2["regret_at_1_mean"] == pytest.approx(0.0)  # two layouts per scenario: all seen


def test_unknown_protocols_are_refused() -> None:
    with pytest.raises(UserError, match="unknown protocol"):
        run_benchmark(_config("protocols=[oracle]"))


def test_a_calibration_for_another_cluster_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cal.yaml"
    path.write_text("simulator: analytical\ncluster: h100\nfactors: {}\n")
    with pytest.raises(UserError, match="is for cluster h100; the data has rows on a100, v100"):
        run_benchmark(_config(f"calibration={path}"))
    path.write_text("simulator: hierarchical\nfactors: {}\n")
    with pytest.raises(UserError, match="not among simulators"):
        run_benchmark(_config(f"calibration={path}"))


def test_a_calibration_is_scored_beside_the_simulator(tmp_path: Path) -> None:
    path = tmp_path / "cal.yaml"
    path.write_text("simulator: analytical\ncluster: a100\nfactors: {host_overhead: 1.3}\n")
    result = run_benchmark(_config(f"calibration={path}", "source=korthikanti"))
    assert result.summaries["analytical, calibration cal"]["protocol"] == "calibrated"


def test_an_oom_probe_is_never_the_pick_in_the_benchmark(tmp_path: Path) -> None:
    data = write(
        tmp_path / "runs.csv",
        {"dp": 8, "tp": 1, "status": "oom", "step_time_s": None},
        {"dp": 4, "tp": 2, "step_time_s": 1.2},
        {"dp": 2, "tp": 4, "step_time_s": 1.5},
        {"dp": 1, "tp": 8, "step_time_s": 1.9},
    )
    config = load_config(
        BenchmarkConfig,
        [f"data={data}", "tracking.enabled=false", "protocols=[probe]", "probes=[1,2,3]"],
    )
    result = run_benchmark(config)
    for name, summary in result.summaries.items():
        if summary.get("protocol") == "probe":
            assert summary["false_feasible_pick_rate"] == 0.0, name
