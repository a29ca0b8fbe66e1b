"""The benchmark on a hand-made table with test-only simulators, and from the command line."""

from __future__ import annotations

import csv
import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from autotune.benchmark import run as benchmark_run
from autotune.benchmark import run_benchmark
from autotune.benchmark._plots import NO_DATA
from autotune.benchmark._plots import matplotlib_figures
from autotune.benchmark._plots import plot_frames
from autotune.benchmark._report import console_tables
from autotune.benchmark._report import fit_table
from autotune.benchmark._report import json_payload
from autotune.benchmark._report import overall_table
from autotune.benchmark._report_files import write_report
from autotune.config import BenchmarkConfig
from autotune.config import load_config
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import Prediction
from autotune.simulators import Simulator
from autotune.simulators import UserError
from autotune.simulators.calibration import Calibration
from tests.dataset_tests._tables import write

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class LinearSimulator(Simulator):
    """Test-only: step time 1 + slope * tp; a tp of ``too_big_tp`` is predicted not to fit."""

    name: str = "linear"
    slope: float = 0.1
    too_big_tp: int = 8

    @classmethod
    def from_config(cls, constants: Mapping[str, Any]) -> LinearSimulator:
        return cls(**constants)

    def calibrated(self, calibration: Calibration) -> LinearSimulator:
        return self

    def simulate(self, job: Job, layout: Layout) -> Prediction:
        time = 1.0 + self.slope * layout.tp
        memory = 90.0 if layout.tp == self.too_big_tp else 10.0
        return Prediction(
            step_time_s=time,
            memory_gib=memory,
            memory_capacity_gib=80.0,
            breakdown={"compute": time},
            memory_breakdown_gib={},
            tokens_per_s_per_device=1.0,
            mfu=0.5,
        )


def _table(tmp_path: Path) -> Path:
    """Scenario s1: four layouts, the tp=8 one ran out of memory; s2: a single layout."""
    return write(
        tmp_path / "runs.csv",
        {"dp": 8, "tp": 1, "step_time_s": 1.0, "predictor": "peer", "predicted_step_time_s": 1.1},
        {"dp": 4, "tp": 2, "step_time_s": 1.2, "predictor": "peer", "predicted_step_time_s": 1.3},
        {"dp": 2, "tp": 4, "step_time_s": 1.5, "predictor": "peer", "predicted_step_time_s": 1.6},
        {
            "dp": 1,
            "tp": 8,
            "status": "oom",
            "step_time_s": None,
            "predictor": "peer",
            "predicted_step_time_s": 0.9,
        },
        {"scenario": "s2", "dp": 8, "tp": 1, "step_time_s": 2.0},
    )


def _cfg(*overrides: str) -> BenchmarkConfig:
    # No memory margin: the test simulators' memory has nothing to do with the shipped rows'.
    return load_config(BenchmarkConfig, ["tracking.enabled=false", "memory_margin=0", *overrides])


def test_known_answers_on_a_hand_made_table(tmp_path: Path) -> None:
    cfg = _cfg(f"data={_table(tmp_path)}")
    result = run_benchmark(
        cfg, simulators=[LinearSimulator(), LinearSimulator("reverse", -0.1, 0)]
    )
    s = result.summaries
    assert set(s) == {"random", "linear", "reverse", "heuristic", "peer"}
    # linear ranks by measured order and knows tp=8 does not fit: regret 0, tau 1
    assert s["linear"]["regret_at_1_mean"] == 0.0 and s["linear"]["kendall_tau_median"] == 1.0
    assert (
        s["linear"]["false_feasible_rate"] == 0.0 and s["linear"]["false_feasible_pick_rate"] == 0
    )
    assert s["linear"]["n_scenarios"] == 1 and s["linear"]["n_rows"] == 4  # s2 counts for MAPE
    # reverse picks the tp=8 layout, which ran out of memory: the penalty regret 1.0
    assert s["reverse"]["regret_at_1_mean"] == 1.0
    assert s["reverse"]["false_feasible_pick_rate"] == 1.0
    assert s["reverse"]["false_feasible_rate"] == 1.0
    assert s["reverse"]["regret_at_3_mean"] == pytest.approx(0.2)
    assert s["reverse"]["kendall_tau_median"] == -1.0
    # random: the exact expectation over regrets 0, 0.2, 0.5 and 1.0 (the oom penalty)
    assert s["random"]["regret_at_1_mean"] == pytest.approx(0.425)
    # heuristic: most data parallelism first
    assert s["heuristic"]["regret_at_1_mean"] == 0.0
    # the peer is scored on its rows only; it predicts no memory, so it picks the oom layout
    assert s["peer"]["kind"] == "peer" and s["peer"]["regret_at_1_mean"] == 1.0
    assert s["peer"]["mape"] == pytest.approx((0.1 / 1.0 + 0.1 / 1.2 + 0.1 / 1.5) / 3)
    assert s["peer"]["false_feasible_rate"] is None or s["peer"]["false_feasible_rate"] != 0
    row = result.scenarios.query("simulator == 'linear' and scenario == 's1'").iloc[0]
    assert row["pick"].startswith("dp8 tp1") and row["regret_at_3"] == 0.0


def test_report_files_and_json_shape(tmp_path: Path) -> None:
    cfg = _cfg(f"data={_table(tmp_path)}")
    result = run_benchmark(cfg, simulators=[LinearSimulator()])
    written = write_report(result, tmp_path / "report", {"top_k": 3}, {"regret@1": "defined"})
    names = {p.name for p in written}
    assert {
        "benchmark.md",
        "scenarios.csv",
        "predictions.csv",
        "plots.html",
        "predicted_vs_measured.png",
        "regret_per_simulator.png",
    } <= names
    assert "| linear | simulator | 1 |" in (tmp_path / "report" / "benchmark.md").read_text()
    page = (tmp_path / "report" / "plots.html").read_text()
    assert "plotly.js v" in page and not re.search(r"<script[^>]*\bsrc=", page)  # offline
    payload = json.loads(json.dumps(json_payload(result, {"top_k": 3}), allow_nan=False))
    assert set(payload) >= {"simulators", "scenarios"}
    linear = payload["simulators"]["linear"]
    for key in (
        "regret_at_1_mean",
        "regret_at_1_median",
        "regret_at_3_mean",
        "kendall_tau_median",
        "mape",
        "false_feasible_rate",
        "n_scenarios",
        "by_source",
    ):
        assert key in linear
    assert {r["scenario"] for r in payload["scenarios"]} == {"s1", "s2"}


def _sources_table(tmp_path: Path) -> Path:
    """alpha: two layouts with a peer's predictions; beta: two without; gamma: one layout."""
    peer = {"predictor": "peer"}
    return write(
        tmp_path / "sources.csv",
        {"source": "alpha", "dp": 8, "tp": 1, **peer, "predicted_step_time_s": 1.1},
        {
            "source": "alpha",
            "dp": 4,
            "tp": 2,
            "step_time_s": 1.2,
            **peer,
            "predicted_step_time_s": 1.3,
        },
        {"source": "beta", "scenario": "b", "dp": 8, "tp": 1},
        {"source": "beta", "scenario": "b", "dp": 4, "tp": 2, "step_time_s": 1.5},
        {"source": "gamma", "scenario": "g", "dp": 8, "tp": 1},
    )


def _texts(ax: Any) -> list[str]:
    return [text.get_text() for text in ax.texts]


def _close(figures: dict[str, Any]) -> None:
    import matplotlib.pyplot as plt

    for figure in figures.values():
        plt.close(figure)


def test_plots_tell_zero_from_no_data_and_show_percent(tmp_path: Path) -> None:
    result = run_benchmark(_cfg(f"data={_sources_table(tmp_path)}"), [LinearSimulator()])
    frames = plot_frames(result)
    by_source = frames["by_source"].set_index(["source", "simulator"])
    assert list(frames["rankers"]["simulator"]) == ["linear", "peer", "random", "heuristic"]
    assert by_source.loc[("alpha", "linear"), "label"] == "0.0%"  # a real zero
    assert by_source.loc[("beta", "peer"), "label"] == NO_DATA  # the peer has no beta rows
    assert (by_source.loc["gamma", "label"] == NO_DATA).all()  # one layout: nothing to pick
    assert by_source.loc[("beta", "random"), "label"] == "25.0%"
    figures = matplotlib_figures(frames)
    assert set(figures) == {
        "regret_per_simulator.png",
        "predicted_vs_measured.png",
        "regret_per_source.png",
    }
    for name, figure in figures.items():
        ax = figure.axes[0]
        assert ax.get_title(), name
        if name.startswith("regret"):  # regret in percent, as in the tables
            figure.canvas.draw()
            assert all(tick.get_text().endswith("%") for tick in ax.get_yticklabels())
    by_source_texts = _texts(figures["regret_per_source.png"].axes[0])
    assert by_source_texts.count(NO_DATA) == 5 and "0.0%" in by_source_texts
    _close(figures)


def test_a_ranker_without_scenarios_shows_no_data(tmp_path: Path) -> None:
    cfg = _cfg(f"data={_sources_table(tmp_path)}", "source=[gamma]")
    figures = matplotlib_figures(plot_frames(run_benchmark(cfg, [LinearSimulator()])))
    assert _texts(figures["regret_per_simulator.png"].axes[0]) == [NO_DATA] * 3
    _close(figures)


def test_each_scenarios_predictions_are_listed_in_pick_order(tmp_path: Path) -> None:
    # Predicted fastest at tp=8, which is predicted not to fit: it must come last, not first.
    big_is_fast = LinearSimulator("big_is_fast", slope=-0.1, too_big_tp=8)
    result = run_benchmark(_cfg(f"data={_table(tmp_path)}"), [big_is_fast])
    rows = result.rows.query("simulator == 'big_is_fast' and scenario == 's1'")
    assert [label.split()[1] for label in rows["layout"]] == ["tp4", "tp2", "tp1", "tp8"]
    pick = result.scenarios.query("simulator == 'big_is_fast' and scenario == 's1'")
    assert pick["pick"].iloc[0].startswith("dp2 tp4")


def test_a_given_memory_margin_decides_what_fits(tmp_path: Path) -> None:
    # tp=8 is predicted at 90 of 80 GiB, the four other rows at 10: a 10% margin changes
    # nothing, a 700% margin (10 x 8 = 80 GiB) still fits them, 710% fits none.
    data = _table(tmp_path)
    for margin, fitting in ((0.1, 4), (7.0, 4), (7.1, 0)):
        config = _cfg(f"data={data}")
        config.memory_margin = margin  # past the command line's bound of 1: a test simulator
        rows = run_benchmark(config, [LinearSimulator()]).rows.query("simulator == 'linear'")
        assert int(rows["predicted_fits"].sum()) == fitting


def test_zero_shot_fits_with_the_margin_the_search_applies() -> None:
    # Two NeMo 24.07 rows ran: Nemotron-340B in FP8, predicted past the device's 80 GiB, and
    # GPT-3 175B at 74.6 GiB, which megatron_core's shipped margin (7.5%, from SimuMax's runs)
    # rejects; the benchmark applies the search's margin unless told otherwise.
    def false_infeasible(*overrides: str) -> float:
        config = load_config(
            BenchmarkConfig, ["tracking.enabled=false", "data=nemo", "baselines=[]", *overrides]
        )
        return float(run_benchmark(config).summaries["analytical"]["false_infeasible_rate"])

    assert false_infeasible() == pytest.approx(2 / 17)
    assert false_infeasible("memory_margin=0") == pytest.approx(1 / 17)


def test_console_tables_fit_120_columns_and_the_markdown_is_whole(tmp_path: Path) -> None:
    cfg = _cfg(f"data={_table(tmp_path)}")
    result = run_benchmark(cfg, [LinearSimulator("hierarchical"), LinearSimulator()])
    text = console_tables(result, 3)
    assert max(len(line) for line in text.splitlines()) <= 120
    for column in overall_table(result, 3).columns:
        assert column in text
    write_report(result, tmp_path / "report", {"top_k": 3}, {})
    markdown = (tmp_path / "report" / "benchmark.md").read_text()
    header = "| " + " | ".join(overall_table(result, 3).columns) + " |"
    assert header in markdown


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "autotune.benchmark", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_command_line_json(tmp_path: Path) -> None:
    proc = _run("data=korthikanti", "output=json", "tracking.enabled=false", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)  # exactly one JSON object on stdout
    analytical = payload["simulators"]["analytical"]
    assert (analytical["n_scenarios"], analytical["n_rows"]) == (4, 8)
    assert len([r for r in payload["scenarios"] if r["simulator"] == "analytical"]) == 4


@pytest.mark.slow  # MLflow's first sqlite migration alone takes several seconds
def test_command_line_json_and_mlflow_run(tmp_path: Path) -> None:
    db = tmp_path / "mlruns" / "mlflow.db"
    proc = _run("data=simumax", "output=json", f"tracking.uri=sqlite:///{db}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)  # exactly one JSON object on stdout
    assert set(payload["simulators"]) == {"analytical", "random", "heuristic", "simumax"}
    assert payload["simulators"]["simumax"]["n_scenarios"] == 13
    assert payload["simulators"]["analytical"]["n_rows"] == 43
    assert (tmp_path / "benchmark_report" / "benchmark.md").is_file()
    with sqlite3.connect(db) as connection:
        runs = list(connection.execute("SELECT name, status FROM runs"))
    # one report run and one child run per ranker, side by side, none left RUNNING
    assert {status for _, status in runs} == {"FINISHED"}
    assert sorted(name for name, _ in runs) == [
        "analytical (zero_shot)",
        "benchmark zero_shot",
        "heuristic (zero_shot)",
        "random (zero_shot)",
        "simumax (zero_shot)",
    ]
    # The parent says the headline in its description and metrics; the experiment says what
    # its runs are.
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{db}")
    (parent,) = [
        r
        for r in client.search_runs([client.get_experiment_by_name("benchmark").experiment_id])
        if "mlflow.parentRunId" not in r.data.tags
    ]
    regret = payload["simulators"]["analytical"]["source_mean"]["regret_at_1_mean"]
    assert parent.data.metrics["analytical.regret_at_1_across_sources"] == pytest.approx(regret)
    assert (
        f"| analytical | zero_shot | {100 * regret:.1f}% |"
        in (parent.data.tags["mlflow.note.content"])
    )
    experiment = client.get_experiment_by_name("benchmark")
    assert "Regret benchmarks" in experiment.tags["mlflow.note.content"]


@pytest.mark.slow  # the hierarchical simulator takes about 20 s over all shipped data
def test_whole_benchmark_fits_120_columns_and_shows_progress(tmp_path: Path) -> None:
    proc = _run("simulators=[analytical,hierarchical]", "tracking.enabled=false", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 120
    progress = r"hierarchical: \d+/\d+ layouts, [\d.]+ s elapsed, ~[\w ]+ left"
    assert re.search(progress, proc.stderr), proc.stderr


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["data=nowhere"], "unknown data 'nowhere'; expected public, one of "),
        (
            ["data=korthikanti", "hardware=b300"],
            "hardware 'b300' not in the data; available: a100",
        ),
        (["data=korthikanti", "source=[x]"], "source 'x' not in the data; available: korthikanti"),
        (["baselines=[oracle]"], "unknown baseline(s) oracle; allowed: random, heuristic"),
        (["output=yaml"], "unknown output 'yaml'; allowed: table, json"),
    ],
)
def test_user_errors_name_what_is_allowed(overrides: list[str], expected: str) -> None:
    with pytest.raises(UserError) as caught:
        benchmark_run(_cfg("simulators=[]", *overrides))
    assert str(caught.value).startswith(expected)


def test_unknown_simulator_exits_2_without_a_run(tmp_path: Path) -> None:
    db = tmp_path / "mlruns" / "mlflow.db"
    proc = _run("simulators=[nope]", f"tracking.uri=sqlite:///{db}", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: unknown simulator 'nope'; available: analytical")
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not db.exists()


def test_malformed_file_lists_its_problems(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.csv", {"tp": "x"}, {"step_time_s": -1})
    proc = _run(f"data={path}", "tracking.enabled=false", cwd=tmp_path)
    assert proc.returncode == 2
    assert "line 2, column tp" in proc.stderr and "line 3, column step_time_s" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_nothing_to_score_exits_2_with_the_reason(tmp_path: Path) -> None:
    path = write(
        tmp_path / "empty.csv",
        {"status": "oom", "step_time_s": None},  # s1: no layout ran
        {"scenario": "s2", "num_attention_heads": 4, "num_kv_heads": 4},  # tp=8 breaks a rule
    )
    proc = _run(f"data={path}", "tracking.enabled=false", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    error = proc.stderr.splitlines()[-1]  # after the log lines
    assert error.startswith(f"error: {path}: nothing to score: no scenario has two measured")
    assert error.endswith(
        "(1 rows in 1 scenarios, 0 ran; 1 more skipped: their layout breaks a rule)"
    )
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not (tmp_path / "benchmark_report").exists()


def test_report_csv_files_escape_spreadsheet_formulas(tmp_path: Path) -> None:
    path = write(
        tmp_path / "formulas.csv",
        {"scenario": "=HYPERLINK(0)", "model": "@SUM(1)", "dp": 8, "tp": 1, "step_time_s": 1.0},
        {"scenario": "=HYPERLINK(0)", "model": "@SUM(1)", "dp": 4, "tp": 2, "step_time_s": 1.2},
    )
    result = run_benchmark(_cfg(f"data={path}"), simulators=[LinearSimulator()])
    write_report(result, tmp_path / "report", {"top_k": 3}, {})
    for name in ("scenarios.csv", "predictions.csv"):
        with (tmp_path / "report" / name).open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert {row["scenario"] for row in rows} == {"'=HYPERLINK(0)"}
        assert {row["model"] for row in rows} == {"'@SUM(1)"}
    with (tmp_path / "report" / "predictions.csv").open(newline="") as handle:
        times = sorted(float(row["step_time_s"]) for row in csv.DictReader(handle))
    assert times[:2] == [1.0, 1.0]  # numbers are written as numbers


def test_rows_a_constant_was_fit_on_are_scored_apart(tmp_path: Path) -> None:
    """h100.yaml's GEMM efficiencies were fit on dgxc's H100 rows (``fitted_on``): those rows
    are in the fit; another source's H100 row and dgxc's row on a cluster fit on nothing are
    not. The linear simulator predicts 1.8 s at tp 8."""
    data = write(
        tmp_path / "runs.csv",
        {"source": "dgxc", "scenario": "f1", "cluster": "h100", "step_time_s": 2.0},  # 10%
        {"source": "mine", "scenario": "m1", "cluster": "h100", "step_time_s": 1.5},  # 20%
        {"source": "dgxc", "scenario": "a1", "cluster": "a100", "step_time_s": 1.2},  # 50%
    )
    result = run_benchmark(_cfg(f"data={data}", "baselines=[]"), [LinearSimulator()])
    in_fit = result.rows.set_index("scenario")["in_fit"]
    assert in_fit.to_dict() == {"f1": True, "m1": False, "a1": False}
    fits = fit_table(result).set_index("cluster")
    assert fits.loc["h100"].to_dict() == {
        "simulator": "linear",
        "fit on": "dgxc",
        "rows in fit": 1,
        "MAPE in fit": "10.0%",
        "rows out of fit": 1,
        "MAPE out of fit": "20.0%",
    }
    assert fits.loc["all", ["rows out of fit", "MAPE out of fit"]].tolist() == [2, "35.0%"]
    assert "a100" not in fits.index  # nothing on it was fit
    assert "Fitted constants" in console_tables(result, 3)
    write_report(result, tmp_path / "report", {"top_k": 3}, {})
    assert "## Fitted constants" in (tmp_path / "report" / "benchmark.md").read_text()
    assert json_payload(result, {})["fits"][0]["fit on"] == "dgxc"
    summary = result.summaries["linear"]  # what the JSON and MLflow carry
    assert summary["n_rows_in_fit"] == 1
    assert summary["mape_out_of_fit"] == pytest.approx((0.2 + 0.5) / 2)
    assert summary["mape"] == pytest.approx((0.1 + 0.2 + 0.5) / 3)


def test_no_fit_section_when_no_row_was_fit_on(tmp_path: Path) -> None:
    result = run_benchmark(_cfg(f"data={_table(tmp_path)}"), [LinearSimulator()])
    assert fit_table(result).empty and not result.rows["in_fit"].any()
    assert "Fitted constants" not in console_tables(result, 3)


def test_across_sources_each_source_weighs_the_same(tmp_path: Path) -> None:
    """Source big has three scenarios the simulator gets right, small one it gets wrong
    (regret 0.5): pooled over scenarios the mean is 0.125, over sources 0.25."""
    rows: list[dict[str, Any]] = []
    for scenario in ("b1", "b2", "b3"):
        rows += [
            {"source": "big", "scenario": scenario, "dp": 8, "tp": 1, "step_time_s": 1.0},
            {"source": "big", "scenario": scenario, "dp": 4, "tp": 2, "step_time_s": 1.2},
        ]
    rows += [
        {"source": "small", "scenario": "s", "dp": 8, "tp": 1, "step_time_s": 1.5},
        {"source": "small", "scenario": "s", "dp": 4, "tp": 2, "step_time_s": 1.0},
        {"source": "small", "scenario": "s", "dp": 1, "tp": 8, "status": "oom"},
    ]
    data = write(tmp_path / "two_sources.csv", *rows)
    result = run_benchmark(_cfg(f"data={data}"), simulators=[LinearSimulator()])
    linear = result.summaries["linear"]
    assert linear["regret_at_1_mean"] == pytest.approx(0.125)
    means = linear["source_mean"]
    assert means["regret_at_1_mean"] == pytest.approx(0.25)
    assert means["n_sources_regret"] == 2 and means["n_sources_oom"] == 1
    assert means["false_feasible_rate"] == 0.0 and means["oom_picks"] == 0.0
    table = console_tables(result, top_k=3)
    assert "Across sources" in table and "25.0% (2)" in table
    assert max(len(line) for line in table.splitlines()) <= 120
