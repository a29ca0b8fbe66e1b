"""The benchmark's yardstick of the probe protocol: exact random probes, the gains over the
baselines with paired bootstrap intervals, what one probe changes; in the report, the JSON
object and MLflow. On small real tables (the shipped DLPerf and Korthikanti rows)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from autotune.benchmark import run_benchmark
from autotune.benchmark._gains import probe_gains
from autotune.benchmark._report import json_payload
from autotune.benchmark._report import markdown_report
from autotune.benchmark._run import _change_metrics
from autotune.benchmark._run import _gain_curves
from autotune.benchmark._score import BenchmarkResult
from autotune.config import BenchmarkConfig
from autotune.config import load_config
from tests.autotune_tests.test_benchmark import _run

SMALL = ["data=public", "source=[korthikanti,dlperf]", "tracking.enabled=false"]
KS = (1, 2, 3)


@pytest.fixture(scope="module")
def result() -> BenchmarkResult:
    config = load_config(BenchmarkConfig, [*SMALL, "protocols=[probe]", "probes=[1,2,3]"])
    return run_benchmark(config)


def _regrets(result: BenchmarkResult, ranker: str) -> pd.Series:
    s = result.scenarios
    mine = s[(s["simulator"] == ranker) & s["eligible"]]
    return mine.set_index(["source", "scenario"])["regret_at_1"]


def test_random_probes_are_the_exact_expectation_of_the_best_of_k_drawn(
    result: BenchmarkResult,
) -> None:
    rows = result.rows[result.rows["simulator"] == "analytical, top-1 probes"]
    for k in KS:
        expected = _regrets(result, f"random probes K={k}")
        assert len(expected) == 8
        for (source, scenario), group in rows.groupby(["source", "scenario"]):
            ok = (group["status"] == "ok").to_numpy()
            times = group["step_time_s"].to_numpy(float)
            regrets = np.where(ok, times / np.nanmin(times[ok]) - 1, 1.0)  # OOM: penalty 1
            draws = list(itertools.combinations(regrets, min(k, len(regrets))))
            by_hand = float(np.mean([min(draw) for draw in draws]))
            assert expected[source, scenario] == pytest.approx(by_hand), (scenario, k)
    summary = result.summaries["random probes K=2"]
    assert (summary["protocol"], summary["probes"], summary["kind"]) == (
        "random probes",
        2,
        "baseline",
    )


def test_gains_are_paired_differences_with_a_bootstrap_interval(result: BenchmarkResult) -> None:
    gains = result.gains
    assert sorted(set(gains["K"])) == list(KS)
    assert sorted(set(gains["source"])) == ["all", "dlperf", "korthikanti"]
    for k in KS:
        calibrated = _regrets(result, f"analytical, probe K={k}")
        for base, ranker in (
            ("top_k", f"analytical, top-{k} probes"),
            ("random", f"random probes K={k}"),
        ):
            difference = _regrets(result, ranker) - calibrated
            for source, part in [("all", difference), *difference.groupby(level=0)]:
                row = gains[(gains["K"] == k) & (gains["source"] == source)].iloc[0]
                assert row["scenarios"] == len(part)
                assert row[f"gain_over_{base}"] == pytest.approx(part.mean())
                low, high = row[f"gain_over_{base}_ci_low"], row[f"gain_over_{base}_ci_high"]
                assert part.min() - 1e-12 <= low <= row[f"gain_over_{base}"] + 1e-12
                assert row[f"gain_over_{base}"] - 1e-12 <= high <= part.max() + 1e-12
    again, _ = probe_gains(result.scenarios, result.summaries, 2000, 0, 0.01)
    pd.testing.assert_frame_equal(again, gains)  # the same seed, the same intervals
    other, _ = probe_gains(result.scenarios, result.summaries, 2000, 1, 0.01)
    spread = other["gain_over_random_ci_high"] - other["gain_over_random_ci_low"]
    assert not np.allclose(
        other["gain_over_random_ci_low"][spread > 0], gains["gain_over_random_ci_low"][spread > 0]
    )


def test_early_stops_are_counted_with_the_picks_they_left_beaten(result: BenchmarkResult) -> None:
    """A scenario stopped early when the loop used fewer than K probes; its pick is beaten by
    more than the stop gain (1%) when its regret@1 exceeds 0.01 / 0.99. Recounted by hand from
    the per-scenario records, and again with a stop gain that every stopped pick's regret
    exceeds."""
    s = result.scenarios[result.scenarios["eligible"]]
    stopped_somewhere = False
    for k in KS:
        mine = s[s["simulator"] == f"analytical, probe K={k}"]
        stopped = mine[mine["probes_used"] < k]
        stopped_somewhere |= len(stopped) > 0
        row = result.gains[(result.gains["K"] == k) & (result.gains["source"] == "all")].iloc[0]
        assert row["stopped"] == len(stopped)
        assert row["beaten_after_stop"] == int((stopped["regret_at_1"] > 0.01 / 0.99).sum())
        assert 0 <= row["beaten_after_stop"] <= row["stopped"] <= row["scenarios"]
    assert stopped_somewhere  # the check above counted something
    strict, _ = probe_gains(result.scenarios, result.summaries, 10, 0, -1e6)
    assert (strict["beaten_after_stop"] == strict["stopped"]).all()


def test_one_probe_changes_are_counted_from_the_picks(result: BenchmarkResult) -> None:
    s = result.scenarios[result.scenarios["eligible"]]
    one = s[s["simulator"] == "analytical, probe K=1"].set_index(["source", "scenario"])
    top = s[s["simulator"] == "analytical, top-1 probes"].set_index(["source", "scenario"])
    changed = one["pick"] != top["pick"]
    row = result.changes[result.changes["source"] == "all"].iloc[0]
    assert row["changed"] == int(changed.sum())
    assert row["better"] + row["worse"] + row["same_regret"] == row["changed"]
    delta = (one["regret_at_1"] - top["regret_at_1"])[changed]
    assert row["better"] == int((delta < -1e-9).sum())
    if len(delta):
        assert row["regret_change_mean"] == pytest.approx(delta.mean())


def test_the_gains_reach_the_report_json_and_mlflow_metrics(result: BenchmarkResult) -> None:
    text = markdown_report(result, {"top_k": 3}, {})
    assert "## Gain over the probe baselines" in text
    assert "| analytical | 2 | all |" in text
    payload = json.loads(json.dumps(json_payload(result, {}), allow_nan=False))
    assert len(payload["probe_gains"]) == len(result.gains) == 3 * len(KS)
    assert {r["source"] for r in payload["probe_k1_changes"]} == {"all", "dlperf", "korthikanti"}
    curves = _gain_curves(result)
    pooled = result.gains[result.gains["source"] == "all"]
    assert [k for k, _ in curves["analytical.probe.gain_over_top_k"]] == list(KS)
    assert [v for _, v in curves["analytical.probe.gain_over_top_k"]] == pytest.approx(
        list(pooled["gain_over_top_k"])
    )
    assert "analytical.probe.dlperf.gain_over_random_ci_high" in curves
    assert [v for _, v in curves["analytical.probe.stopped"]] == list(pooled["stopped"])
    assert "stopped early (pick beaten)" in text
    metrics = _change_metrics(result)
    assert metrics["analytical.probe.k1_changed"] == result.changes["changed"].iloc[0]
    assert all(math.isfinite(v) for v in metrics.values())


@pytest.mark.slow  # MLflow's first sqlite migration alone takes several seconds
def test_the_benchmark_run_records_the_gains_over_k(tmp_path: Path) -> None:
    db = tmp_path / "mlruns" / "mlflow.db"
    proc = _run(
        "data=korthikanti",
        "protocols=[probe]",
        "probes=[1,2]",
        f"tracking.uri=sqlite:///{db}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{db}")
    experiment = client.get_experiment_by_name("benchmark")
    assert experiment is not None
    (parent,) = [
        r
        for r in client.search_runs([experiment.experiment_id])
        if "mlflow.parentRunId" not in r.data.tags
    ]
    history = client.get_metric_history(parent.info.run_id, "analytical.probe.gain_over_top_k")
    assert sorted(m.step for m in history) == [1, 2]
    assert "analytical.probe.k1_changed" in parent.data.metrics
