"""Leave one model out (issue 28, item 3): a cluster's history of other models calibrates the
next job; a history of one model is reported unscored, not left a silent gap."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune import calibrate
from autotune import catalog
from autotune import dataset
from autotune.benchmark import run_benchmark
from autotune.benchmark._report import console_tables
from autotune.calibrate import Run
from autotune.config import BenchmarkConfig
from autotune.config import load_config
from autotune.simulators.calibrated import CalibratedSimulator
from tests.autotune_tests.test_cli import run
from tests.dataset_tests._tables import write

LOMO = "analytical, leave-one-model-out"
OFF = "tracking.enabled=false"
PROTOCOLS = "protocols=[zero_shot,leave_one_model_out]"


def _job(source: str, model: str, **change: Any) -> list[dict[str, Any]]:
    """Two layouts of one job (the scenario named as the model) on 8 A100s."""
    job = {"source": source, "model": model, "scenario": model, **change}
    return [
        {**job, "dp": 1, "tp": 8, "step_time_s": 1.4},
        {**job, "dp": 2, "tp": 4, "step_time_s": 1.1},
    ]


def _table(tmp_path: Path) -> Path:
    """Source ``two``: two models on one cluster; ``one``: a single model; ``split``: two
    models, each on its own cluster (so no history of two models)."""
    return write(
        tmp_path / "runs.csv",
        *_job("two", "toy_a"),
        *_job("two", "toy_b", num_layers=12),
        *_job("one", "toy_c"),
        *_job("split", "toy_d"),
        *_job("split", "toy_e", cluster="h100"),
    )


def test_a_model_is_calibrated_on_the_other_models_of_its_cluster_only(
    tmp_path: Path, fitted: list[list[Run]]
) -> None:
    data = _table(tmp_path)
    config = load_config(BenchmarkConfig, [f"data={data}", OFF, PROTOCOLS])
    result = run_benchmark(config)
    # one fit per model of the one history of two models, on the other model's rows alone
    assert sorted(sorted({run.group for run in runs}) for runs in fitted) == [
        ["two/toy_a"],
        ["two/toy_b"],
    ]
    # by hand: toy_a's predictions are those of a calibration fitted on toy_b's two rows, with
    # what they measured beyond it (toy_b differs from toy_a in depth alone: the same job key)
    table = dataset.load_data(str(data))
    priceable = dataset.priceable_rows(table)
    runs = [r for r in calibrate.row_runs(priceable.table, priceable.specs) if r]
    simulator = catalog.load_simulator("analytical")
    settings = calibrate.fit_settings(config.calibrate)
    twin = [r for r in runs if r.group == "two/toy_b"]
    other = calibrate.fit(simulator, twin, settings, layouts=True)
    by_hand = CalibratedSimulator(simulator, other.calibration, 0.0)
    held = [r for r in runs if r.group == "two/toy_a"]
    expected = [by_hand.simulate(*r.specs).step_time_s for r in held]
    rows = result.rows[result.rows["simulator"] == LOMO]
    assert set(rows["source"]) == {"two"}
    scored = rows[rows["scenario"] == "toy_a"]["predicted_step_time_s"]
    assert sorted(scored) == pytest.approx(sorted(expected), rel=1e-9)
    # ... which rank toy_a's layouts as toy_b's ran, beyond the factors: the ratio of the two
    # predictions is the factors' ratio for toy_a times toy_b's measured over predicted ratio
    factors_only = CalibratedSimulator(simulator, other.calibration.with_layouts({}), 0.0)

    def ratio(times: list[float]) -> float:
        return times[0] / times[1]  # tp 8 over dp 2 tp 4, as _job writes them

    predicted_a = [factors_only.simulate(*r.specs).step_time_s for r in held]
    predicted_b = [factors_only.simulate(*r.specs).step_time_s for r in twin]
    measured_b = [r.step_time_s for r in twin]
    assert ratio(expected) == pytest.approx(
        ratio(predicted_a) * ratio(measured_b) / ratio(predicted_b), rel=1e-9
    )


def test_a_source_without_a_history_of_two_models_is_reported_unscored(tmp_path: Path) -> None:
    config = load_config(BenchmarkConfig, [f"data={_table(tmp_path)}", OFF, PROTOCOLS])
    result = run_benchmark(config)
    summary = result.summaries[LOMO]
    assert summary["protocol"] == "leave_one_model_out"
    assert list(summary["by_source"]) == ["two"]
    assert summary["by_source"]["two"]["n_scenarios"] == 2
    assert summary["unscored"]["one"] == "a100, megatron_core: one model (toy_c)"
    assert summary["unscored"]["split"] == (
        "a100, megatron_core: one model (toy_d); h100, megatron_core: one model (toy_e)"
    )
    assert result.summaries["analytical"]["unscored"] == {}  # zero-shot scores every source
    text = console_tables(result, 3)
    assert "Not scored by a protocol" in text
    assert f"{LOMO}: one: a100, megatron_core: one model (toy_c)" in text
    shown = [line.split() for line in text.splitlines() if "not scored" in line]
    assert [row[0] for row in shown if row[1:3] == ["analytical,", "leave-one-model-out"]] == [
        "one",
        "split",
    ]


@pytest.mark.slow  # a benchmark process
def test_the_benchmark_scores_leave_one_model_out_per_source(tmp_path: Path) -> None:
    report = tmp_path / "report"
    proc = run(
        "autotune.benchmark",
        "data=public",
        "source=[korthikanti,bigscience_tr3m]",
        PROTOCOLS,
        OFF,
        f"report_dir={report}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "analytical, leave one model out:" in proc.stderr  # its time is logged
    text = (report / "benchmark.md").read_text()
    # korthikanti: four models on A100, each scored on a calibration from the other three
    assert f"| korthikanti | {LOMO} | 4 |" in text
    # BigScience tr3m: a single model, said to be unscored in the table and the note
    assert f"| bigscience_tr3m | {LOMO} | 0 | not scored |" in text
    assert f"- {LOMO}: bigscience_tr3m: v100, megatron_deepspeed: one model (tr3m-1B3" in text
    across = text.split("## Across sources")[1].split("## Per source")[0]
    assert f"| {LOMO} |" in across and "| analytical |" in across
