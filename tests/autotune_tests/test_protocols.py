"""Benchmark protocols: no scored row leaks into a fit, the pick's rules, probes, the curve."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from autotune import catalog
from autotune import dataset
from autotune.benchmark import run_benchmark
from autotune.benchmark._plots import plot_frames
from autotune.benchmark._report import console_tables
from autotune.benchmark._report import regret_curve
from autotune.calibrate import Run
from autotune.calibrate._command import fit_settings
from autotune.calibrate._probe import choose_probes
from autotune.calibrate._probe import job_level
from autotune.calibrate._probe import pick
from autotune.config import BenchmarkConfig
from autotune.config import load_config
from autotune.simulators import UserError
from tests.dataset_tests._tables import write

SMALL = ["data=public", "source=[korthikanti,dlperf]", "tracking.enabled=false"]


def _config(*overrides: str) -> BenchmarkConfig:
    return load_config(BenchmarkConfig, [*SMALL, *overrides])


def test_leave_one_source_out_never_fits_on_the_scored_source(fitted: list[list[Run]]) -> None:
    result = run_benchmark(_config("protocols=[leave_one_source_out]"))
    assert len(fitted) == 2  # one calibration per source, on the other one
    sources = [{run.group.split("/")[0] for run in runs} for runs in fitted]
    assert sorted(map(sorted, sources)) == [["dlperf"], ["korthikanti"]]
    summary = result.summaries["analytical, leave-one-source-out"]
    assert summary["protocol"] == "leave_one_source_out"
    assert summary["by_source"]["dlperf"]["n_scenarios"] == 4


def test_probes_fit_on_their_own_scenario_only_and_are_not_scored(
    fitted: list[list[Run]],
) -> None:
    result = run_benchmark(_config("protocols=[probe]", "probes=[1,2]"))
    for runs in fitted:
        assert len({run.group for run in runs}) == 1  # one scenario, nothing else
        assert 1 <= len(runs) <= 2
    rows = result.rows
    probe = rows[rows["simulator"] == "analytical, probe K=1"]
    scored = probe["predicted_step_time_s"].notna()
    # a scenario of n measured layouts keeps n - 1 predictions: the probe's is not scored
    per_scenario = probe.groupby("scenario")["layout"].size() - 1
    assert scored.groupby(probe["scenario"]).sum().to_dict() == per_scenario.to_dict()


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


def test_the_pick_keeps_the_best_probe_unless_a_layout_is_clearly_faster() -> None:
    fits = [True, True, True]
    # probes 0 and 1 measured at twice their prediction: the job's level is 2
    assert job_level([1.0, 1.2, 0.5], [0, 1], [2.0, 2.4]) == pytest.approx(2.0)
    chosen = pick([1.0, 1.2, 0.95], fits, [0, 1], [2.0, 2.4], 0.1)
    assert (chosen.index, chosen.measured) == (0, True)  # 1.9 s is not 10 % ahead of 2.0 s
    chosen = pick([1.0, 1.2, 0.8], fits, [0, 1], [2.0, 2.4], 0.1)
    assert (chosen.index, chosen.measured) == (2, False)  # 1.6 s is
    chosen = pick([1.0, 1.2, 0.5], [True, True, False], [0, 1], [2.0, 2.4], 0.1)
    assert chosen.index == 0  # faster, but predicted not to fit
    chosen = pick([1.0, 1.2, 0.9], fits, [0, 1], [math.nan, math.nan], 0.1)
    assert (chosen.index, chosen.measured) == (2, False)  # every probe ran out of memory
    assert "no probe ran" in chosen.reason


def test_probes_are_likely_good_distinct_and_fit() -> None:
    table = dataset.load_public(["vtrain"])
    scenario = table[table["scenario"] == table["scenario"].iloc[0]].reset_index(drop=True)
    specs = dataset.table_specs(scenario)
    simulator = catalog.load_simulator("analytical")
    predictions = [simulator.simulate(*s) for s in specs]
    predicted = [p.step_time_s for p in predictions]
    fits = [p.fits for p in predictions]
    fits[int(np.argmin(predicted))] = False  # the fastest is taken not to fit
    settings = fit_settings(_config().calibrate)
    one = choose_probes(simulator, specs, predicted, fits, 1, settings, 0.25)
    best_fitting = min((t, i) for i, t in enumerate(predicted) if fits[i])[1]
    assert one == [best_fitting]
    three = choose_probes(simulator, specs, predicted, fits, 3, settings, 0.25)
    assert len(set(three)) == 3 and all(fits[i] for i in three) and three[0] == best_fitting
    assert three == choose_probes(simulator, specs, predicted, fits, 3, settings, 0.25)


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
