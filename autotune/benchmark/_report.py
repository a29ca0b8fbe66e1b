"""Tables, the Markdown report, CSV files, plots and the JSON object of a benchmark result."""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from autotune.benchmark._gains import CHANGES_TITLE
from autotune.benchmark._gains import GAINS_TITLE
from autotune.benchmark._gains import changes_table
from autotune.benchmark._gains import gains_table
from autotune.benchmark._metrics import ape
from autotune.benchmark._protocol_tables import curve_table
from autotune.benchmark._protocol_tables import has_protocols
from autotune.benchmark._protocol_tables import protocol_table
from autotune.benchmark._protocol_tables import regret_curve
from autotune.benchmark._score import BenchmarkResult
from autotune.benchmark._unscored import NOT_SCORED
from autotune.benchmark._unscored import unscored_text
from autotune.benchmark._unscored import wholly_unscored

__all__ = [
    "console_tables",
    "json_payload",
    "skipped_counts",
    "skipped_table",
    "markdown_report",
]

_LISTED = 20  # skipped rows the console names (benchmark.md names every one)
_WIDTH = 119  # the console keeps within 120 columns


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
    """One formatted row per (source, ranker); a source a protocol does not score at all
    (``unscored``) has a row that says so."""
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
        for source in wholly_unscored(summary):
            blank = dict.fromkeys(("regret@1 worst", f"regret@{top_k}", "tau (med)"), "-")
            records.append(
                {
                    "source": source,
                    "simulator": name,
                    "scenarios": 0,
                    "regret@1 mean": NOT_SCORED,
                    **blank,
                    "rows": 0,
                    **dict.fromkeys(("MAPE", "max APE", "mem MAPE"), "-"),
                }
            )
    return pd.DataFrame(records).sort_values(["source", "simulator"], kind="stable")


def across_sources_table(result: BenchmarkResult) -> pd.DataFrame:
    """One formatted row per ranker: its figures averaged over sources, each source weighing
    the same (``source_mean``), with the number of sources behind each mean."""
    records = []
    for name, summary in result.summaries.items():
        m = summary["source_mean"]
        records.append(
            {
                "simulator": name,
                "regret@1 (sources)": f"{_pct(m['regret_at_1_mean'])} ({m['n_sources_regret']})",
                "OOM picks": _num(m["oom_picks"], 1),
                "OOM pick rate": _pct(m["false_feasible_pick_rate"]),
                "false feasible": f"{_pct(m['false_feasible_rate'])} ({m['n_sources_oom']})",
                "MAPE": f"{_pct(m['mape'])} ({m['n_sources_time']})",
                "mem MAPE": f"{_pct(m['memory_mape'])} ({m['n_sources_memory']})",
            }
        )
    return pd.DataFrame(records)


def fit_table(result: BenchmarkResult) -> pd.DataFrame:
    """Per simulator and per cluster with fitted constants: MAPE on the rows of the sources they
    were fit on (in-sample) and on the cluster's other rows; then every cluster's rows but the
    in-sample ones. Empty when no row is in a fit."""
    rows = result.rows
    if not len(rows) or not rows["in_fit"].any():
        return pd.DataFrame()
    rows = rows[rows["status"] == "ok"]
    rows = rows.assign(
        ape=ape(rows["predicted_step_time_s"].to_numpy(float), rows["step_time_s"].to_numpy(float))
    )
    rows = rows[np.isfinite(rows["ape"])]
    clusters = sorted(rows.loc[rows["in_fit"], "cluster"].unique())
    records = []
    for name, mine in rows.groupby("simulator", sort=False):
        for cluster in [*clusters, "all"]:
            here = mine if cluster == "all" else mine[mine["cluster"] == cluster]
            if here.empty:
                continue
            fit, rest = here[here["in_fit"]], here[~here["in_fit"]]
            records.append(
                {
                    "simulator": name,
                    "cluster": cluster,
                    "fit on": ", ".join(sorted(fit["source"].unique())) or "-",
                    "rows in fit": len(fit),
                    "MAPE in fit": _pct(fit["ape"].mean() if len(fit) else math.nan),
                    "rows out of fit": len(rest),
                    "MAPE out of fit": _pct(rest["ape"].mean() if len(rest) else math.nan),
                }
            )
    return pd.DataFrame(records)


def skipped_counts(result: BenchmarkResult) -> dict[str, dict[str, Any]]:
    """Per source, the rows skipped because their layout breaks a rule, and how many of them
    break each rule (a row breaking two rules counts for both)."""
    rows: Counter[str] = Counter(row.source for row in result.skipped)
    rules: dict[str, Counter[str]] = {source: Counter() for source in rows}
    for row in result.skipped:
        rules[row.source].update(row.rules)
    return {
        source: {"rows": rows[source], "rules": dict(rules[source].most_common())}
        for source in sorted(rows)
    }


def _per_rule(counts: Mapping[str, Any]) -> str:
    """``experts 3, batch 1``: the rows of one source that break each rule."""
    return ", ".join(f"{rule} {n}" for rule, n in counts["rules"].items())


def skipped_table(result: BenchmarkResult) -> pd.DataFrame:
    """One formatted row per source with skipped rows: how many, and the rules they break."""
    records = [
        {
            "source": source,
            "rows skipped": counts["rows"],
            "rules broken (rows)": _per_rule(counts),
        }
        for source, counts in skipped_counts(result).items()
    ]
    return pd.DataFrame(records, columns=["source", "rows skipped", "rules broken (rows)"])


_SKIPPED_TITLE = (
    "Rows skipped: their layout breaks a rule, so no simulator prices them; every figure is over "
    "the other rows"
)


def _skipped_lines(result: BenchmarkResult) -> list[str]:
    """The console's account of the skipped rows: counts per source, then each row and why."""
    if not result.skipped:
        return []
    lines = textwrap.wrap(_SKIPPED_TITLE + ":", _WIDTH)
    for source, counts in skipped_counts(result).items():
        lines += textwrap.wrap(
            f"{source}: {counts['rows']} row(s); rows per rule broken: {_per_rule(counts)}",
            _WIDTH,
            initial_indent="  ",
            subsequent_indent="    ",
        )
    for row in result.skipped[:_LISTED]:
        lines += textwrap.wrap(
            row.describe(), _WIDTH, initial_indent="  ", subsequent_indent="    "
        )
    more = len(result.skipped) - _LISTED
    if more > 0:
        lines.append(f"  ... and {more} more (benchmark.md names every one)")
    return [*lines, ""]


def console_tables(result: BenchmarkResult, top_k: int) -> str:
    """The overall table, split in two to fit 120 columns, and the per-source table.

    The Markdown report keeps the overall table whole.
    """
    overall = overall_table(result, top_k)
    picks = ["simulator", "kind", "scenarios", "regret@1 mean [95% CI]", "median", "worst"]
    picks += [f"regret@{top_k}", "OOM picks", "tau (med)", "rho (med)"]
    errors = ["simulator", "rows", "MAPE", "max APE", "mem MAPE", "false feasible"]
    errors += ["false infeasible", "us/layout"]
    lines = [
        *_skipped_lines(result),
        "Picks: regret over the scenarios; rank correlation, median over the scenarios",
        overall[picks].to_string(index=False),
        "",
        "Predictions: errors over the measured rows; time per layout",
        overall[errors].to_string(index=False),
        "",
        "Per source:",
        source_table(result, top_k).to_string(index=False),
        "",
        *unscored_text(result, markdown=False),
        _ACROSS_TITLE + ":",
        across_sources_table(result).to_string(index=False),
        "",
    ]
    fits = fit_table(result)
    if not fits.empty:
        lines += [_FIT_TITLE, fits.to_string(index=False), ""]
    if has_protocols(result):
        lines += [
            "Protocols side by side: regret@1 mean per source (MAPE: rows no probe measured)",
            protocol_table(result).to_string(index=False),
            "",
        ]
        curve = curve_table(result)
        if not curve.empty:
            lines += [
                "Regret@1 mean against the number of probes K:",
                curve.to_string(index=False),
            ]
            lines.append("")
        if len(result.gains):
            lines += textwrap.wrap(GAINS_TITLE + ":", _WIDTH)
            lines += [gains_table(result.gains).to_string(index=False), ""]
        if len(result.changes):
            lines += textwrap.wrap(CHANGES_TITLE + ":", _WIDTH)
            lines += [changes_table(result.changes).to_string(index=False), ""]
    return "\n".join(lines)


def markdown_table(frame: pd.DataFrame) -> str:
    """``frame`` as a Markdown table (columns as they are, no index)."""
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
        *_skipped_section(result),
        "## Overall",
        "",
        markdown_table(overall_table(result, top_k)),
        "",
        "## Across sources",
        "",
        _ACROSS_TITLE + ".",
        "",
        markdown_table(across_sources_table(result)),
        "",
        "## Per source",
        "",
        markdown_table(source_table(result, top_k)),
        "",
        *unscored_text(result, markdown=True),
        *_fit_section(result),
        *_protocol_sections(result),
        "## Definitions",
        "",
        *(f"- **{key}**: {text}" for key, text in notes.items()),
        "",
    ]
    return "\n".join(lines)


_ACROSS_TITLE = (
    "Across sources: each figure's mean over the sources that define it, each source weighing "
    "the same"
)
_FIT_TITLE = (
    "Fitted constants (docs/decisions/0033-h100-gemm-level-fitted.md): MAPE on the rows they "
    "were fit on, and on the rest"
)


def _skipped_section(result: BenchmarkResult) -> list[str]:
    if not result.skipped:
        return []
    rows = pd.DataFrame(
        [
            {
                "file": row.file,
                "line": row.line,
                "source": row.source,
                "layout": row.layout,
                "rules broken": "; ".join(row.reasons),
            }
            for row in result.skipped
        ]
    )
    return [
        "## Rows skipped",
        "",
        _SKIPPED_TITLE + ".",
        "",
        markdown_table(skipped_table(result)),
        "",
        markdown_table(rows),
        "",
    ]


def _fit_section(result: BenchmarkResult) -> list[str]:
    fits = fit_table(result)
    if fits.empty:
        return []
    return ["## Fitted constants", "", _FIT_TITLE + ".", "", markdown_table(fits), ""]


def _protocol_sections(result: BenchmarkResult) -> list[str]:
    if not has_protocols(result):
        return []
    lines = [
        "## Protocols side by side",
        "",
        "Regret@1 mean per source; MAPE over the rows that no probe measured "
        "(docs/calibration.md).",
        "",
        markdown_table(protocol_table(result)),
        "",
    ]
    curve = curve_table(result)
    if not curve.empty:
        lines += [
            "## Regret against the number of probes",
            "",
            markdown_table(curve),
            "",
            "![regret against K](regret_vs_probes.png)",
            "",
        ]
    if len(result.gains):
        lines += [
            "## Gain over the probe baselines",
            "",
            GAINS_TITLE + " (each resample draws the scenarios with replacement; "
            "docs/calibration.md 5).",
            "",
            markdown_table(gains_table(result.gains)),
            "",
        ]
    if len(result.changes):
        lines += [CHANGES_TITLE + ".", "", markdown_table(changes_table(result.changes)), ""]
    return lines


def json_payload(result: BenchmarkResult, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The one JSON object of ``output=json`` (NaN written as null)."""
    scenarios = result.scenarios.to_dict(orient="records")
    return _finite(
        {
            "simulators": result.summaries,
            "scenarios": scenarios,
            "settings": dict(settings),
            "regret_vs_probes": regret_curve(result).to_dict(orient="records"),
            "probe_gains": result.gains.to_dict(orient="records"),
            "probe_k1_changes": result.changes.to_dict(orient="records"),
            "fits": fit_table(result).to_dict(orient="records"),
            "skipped": {
                "by_source": skipped_counts(result),
                "rows": [row.as_dict() for row in result.skipped],
            },
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
