"""Tables, the Markdown report, CSV files, plots and the JSON object of a benchmark result."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autotune._csv import write_csv
from autotune.benchmark._score import BenchmarkResult

__all__ = ["console_tables", "json_payload", "write_report"]


def _pct(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{100 * value:.1f}%"


def _num(value: float, digits: int = 2) -> str:
    return "-" if not math.isfinite(value) else f"{value:.{digits}f}"


def _us(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value * 1e6:.0f}"


def overall_table(result: BenchmarkResult, top_k: int) -> pd.DataFrame:
    """One formatted row per ranker (simulator, baseline, peer)."""
    records = []
    for name, s in result.summaries.items():
        ci = f"[{_pct(s['regret_at_1_ci_low'])}, {_pct(s['regret_at_1_ci_high'])}]"
        records.append(
            {
                "simulator": name,
                "kind": s["kind"],
                "scenarios": s["n_scenarios"],
                "regret@1 mean [95% CI]": f"{_pct(s['regret_at_1_mean'])} {ci}",
                "median": _pct(s["regret_at_1_median"]),
                "worst": _pct(s["regret_at_1_worst"]),
                f"regret@{top_k}": _pct(s[f"regret_at_{top_k}_mean"]),
                "OOM picks": _pct(s["false_feasible_pick_rate"]),
                "tau (med)": _num(s["kendall_tau_median"]),
                "rho (med)": _num(s["spearman_rho_median"]),
                "rows": s["n_rows"],
                "MAPE": _pct(s["mape"]),
                "max APE": _pct(s["max_ape"]),
                "mem MAPE": _pct(s["memory_mape"]),
                "false feasible": _pct(s["false_feasible_rate"]),
                "false infeasible": _pct(s["false_infeasible_rate"]),
                "us/layout": _us(s.get("seconds_per_layout", float("nan"))),
            }
        )
    return pd.DataFrame(records)


def source_table(result: BenchmarkResult, top_k: int) -> pd.DataFrame:
    """One formatted row per (source, ranker)."""
    records = []
    for name, summary in result.summaries.items():
        for source, s in summary["by_source"].items():
            records.append(
                {
                    "source": source,
                    "simulator": name,
                    "scenarios": s["n_scenarios"],
                    "regret@1 mean": _pct(s["regret_at_1_mean"]),
                    "regret@1 worst": _pct(s["regret_at_1_worst"]),
                    f"regret@{top_k}": _pct(s[f"regret_at_{top_k}_mean"]),
                    "tau (med)": _num(s["kendall_tau_median"]),
                    "rows": s["n_rows"],
                    "MAPE": _pct(s["mape"]),
                    "max APE": _pct(s["max_ape"]),
                    "mem MAPE": _pct(s["memory_mape"]),
                }
            )
    return pd.DataFrame(records).sort_values(["source", "simulator"], kind="stable")


def console_tables(result: BenchmarkResult, top_k: int) -> str:
    """The overall table, split in two to fit 120 columns, and the per-source table.

    The Markdown report keeps the overall table whole.
    """
    overall = overall_table(result, top_k)
    picks = ["simulator", "kind", "scenarios", "regret@1 mean [95% CI]", "median", "worst"]
    picks += [f"regret@{top_k}", "OOM picks", "tau (med)", "rho (med)"]
    errors = ["simulator", "rows", "MAPE", "max APE", "mem MAPE", "false feasible"]
    errors += ["false infeasible", "us/layout"]
    return "\n".join(
        [
            "Picks: regret over the scenarios; rank correlation, median over the scenarios",
            overall[picks].to_string(index=False),
            "",
            "Predictions: errors over the measured rows; time per layout",
            overall[errors].to_string(index=False),
            "",
            "Per source:",
            source_table(result, top_k).to_string(index=False),
            "",
        ]
    )


def _markdown(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(map(str, row)) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def markdown_report(
    result: BenchmarkResult, settings: Mapping[str, Any], notes: Mapping[str, str]
) -> str:
    """The Markdown report: settings, the two tables and how each figure is defined."""
    top_k = int(settings["top_k"])
    lines = [
        "# Simulator benchmark: regret of the layouts each simulator picks",
        "",
        *(f"- {key}: `{value}`" for key, value in settings.items()),
        "",
        "## Overall",
        "",
        _markdown(overall_table(result, top_k)),
        "",
        "## Per source",
        "",
        _markdown(source_table(result, top_k)),
        "",
        "## Definitions",
        "",
        *(f"- **{key}**: {text}" for key, text in notes.items()),
        "",
    ]
    return "\n".join(lines)


def json_payload(result: BenchmarkResult, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The one JSON object of ``output=json`` (NaN written as null)."""
    scenarios = result.scenarios.to_dict(orient="records")
    return _finite(
        {
            "simulators": result.summaries,
            "scenarios": scenarios,
            "settings": dict(settings),
        }
    )


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_report(
    result: BenchmarkResult,
    report_dir: Path,
    settings: Mapping[str, Any],
    notes: Mapping[str, str],
) -> list[Path]:
    """Write the Markdown report, CSV files and plots into ``report_dir``; the paths written."""
    from autotune.benchmark._plots import write_plots

    report_dir.mkdir(parents=True, exist_ok=True)
    written = [report_dir / "benchmark.md", report_dir / "scenarios.csv"]
    written[0].write_text(markdown_report(result, settings, notes), encoding="utf-8")
    write_csv(result.scenarios, written[1])
    if len(result.rows):
        written.append(write_csv(result.rows, report_dir / "predictions.csv"))
    written.extend(write_plots(result, report_dir))
    return written
