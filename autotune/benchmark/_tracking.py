"""Record one benchmark in MLflow: a parent run with the report, one child run per ranker.

Each simulator, baseline and peer gets its own child run with the same metric names
(``regret_at_1_mean``, ``mape``, ..., and ``<source>.<figure>`` per source) and tags for its
kind and protocol, so the MLflow UI compares them side by side.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.config import TrackingConfig
from autotune.tracking import Recorded
from autotune.tracking import TrackedRun
from autotune.tracking import record

__all__ = ["log_benchmark_run"]

_UNSAFE = re.compile(r"[^0-9A-Za-z_\-. /]")


def _metrics(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``<figure>`` and ``<source>.<figure>`` of one ranker (the run keeps the numbers)."""
    scopes = {"": summary, **{f"{s}.": v for s, v in summary["by_source"].items()}}
    return {
        _UNSAFE.sub("_", f"{scope}{key}"): value
        for scope, figures in scopes.items()
        for key, value in figures.items()
    }


def log_benchmark_run(
    tracking: TrackingConfig,
    params: Mapping[str, Any],
    summaries: Mapping[str, Mapping[str, Any]],
    config_yaml: str,
    report_files: Sequence[Path],
    protocol: str = "zero_shot",
    curves: Mapping[str, list[tuple[int, float]]] | None = None,
    metrics: Mapping[str, float] | None = None,
) -> Recorded:
    """Record the benchmark with the report's files (those written, nothing else of their
    folder); ``curves`` are metric histories over a step (K), ``metrics`` more metrics of the
    parent run. MLflow's failures are reported in the result, never raised."""

    def fill(run: TrackedRun) -> None:
        run.params(params)
        run.text("config.yaml", config_yaml)
        run.files(report_files, "report")
        for name, summary in summaries.items():
            mine = summary.get("protocol", protocol)
            run.child(
                f"{name} ({mine})",
                {"ranker": name, "kind": summary["kind"], "protocol": mine, **params},
                _metrics(summary),
            )
        for key, values in (curves or {}).items():  # a curve: the metric's history by K
            run.history(_UNSAFE.sub("_", key), values)

    def fill_all(run: TrackedRun) -> None:
        extra = {_UNSAFE.sub("_", key): value for key, value in (metrics or {}).items()}
        run.metrics({**_headline_metrics(summaries, protocol), **extra})
        fill(run)

    protocols = sorted({str(s.get("protocol", protocol)) for s in summaries.values()})
    return record(
        tracking,
        f"benchmark {', '.join(protocols) or protocol}",
        fill_all,
        tags={"autotune.command": "benchmark", "autotune.protocol": protocol},
        description=_description(summaries, protocol),
    )


def _simulators(
    summaries: Mapping[str, Mapping[str, Any]], protocol: str
) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(ranker, protocol, summary) of every simulator scored, in the report's order."""
    return [
        (name, str(s.get("protocol", protocol)), s)
        for name, s in summaries.items()
        if s["kind"] == "simulator"
    ]


def _headline_metrics(
    summaries: Mapping[str, Mapping[str, Any]], protocol: str
) -> dict[str, float]:
    """The parent run's headline: each simulator's regret@1 across sources (each source
    weighing the same) and pooled, and its out-of-memory picks, per protocol."""
    metrics = {}
    for name, _, s in _simulators(summaries, protocol):
        prefix = _UNSAFE.sub("_", name)  # "analytical", "analytical, probe K=2"...
        figures = {
            "regret_at_1_across_sources": s["source_mean"]["regret_at_1_mean"],
            "regret_at_1_pooled": s["regret_at_1_mean"],
            "oom_picks": s["source_mean"]["oom_picks"],
        }
        metrics.update({f"{prefix}.{k}": v for k, v in figures.items() if math.isfinite(v)})
    return metrics


def _description(summaries: Mapping[str, Mapping[str, Any]], protocol: str) -> str:
    """The run's Markdown description: the headline table, then where the rest is."""
    lines = [
        "| simulator | protocol | regret@1 across sources | pooled | OOM picks |",
        "|---|---|---|---|---|",
    ]
    for name, mine, s in _simulators(summaries, protocol):
        across = s["source_mean"]
        lines.append(
            f"| {name} | {mine} | {_percent(across['regret_at_1_mean'])} | "
            f"{_percent(s['regret_at_1_mean'])} | {across['oom_picks']:.0f} |"
        )
    return "\n".join(
        [
            "**Regret of each simulator's pick** (mean over scenarios; across sources: each "
            "source weighing the same).",
            "",
            *lines,
            "",
            "Each simulator, baseline and protocol is a child run with the same metric names; "
            "the full report is `report/benchmark.md`.",
        ]
    )


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%" if math.isfinite(value) else "n/a"
