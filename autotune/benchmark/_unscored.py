"""What a protocol leaves unscored, said in the report rather than left a silent gap.

Leave one model out scores a model's rows only where its source has another model on the
same cluster and framework (:func:`autotune.calibrate.leave_one_model_out`); a ranker's
summary names each source it leaves rows of unscored, and why (``unscored``).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from autotune.benchmark._score import BenchmarkResult

__all__ = ["NOT_SCORED", "unscored_lines", "unscored_text", "wholly_unscored"]

NOT_SCORED = "not scored"
_TITLE = "Not scored by a protocol (leave one model out needs two models per cluster history)"
_WIDTH = 119  # the console keeps within 120 columns


def wholly_unscored(summary: Mapping[str, Any]) -> list[str]:
    """The sources of ``unscored`` that a ranker scores no row of, in order."""
    return sorted(set(summary.get("unscored", {})) - set(summary["by_source"]))


def unscored_lines(result: BenchmarkResult) -> list[str]:
    """One line per ranker and source whose rows (all or some) it does not score, and why."""
    return [
        f"{name}: {source}"
        + ("" if source in wholly_unscored(summary) else " (its other rows are scored)")
        + f": {why}"
        for name, summary in result.summaries.items()
        for source, why in sorted(summary.get("unscored", {}).items())
    ]


def unscored_text(result: BenchmarkResult, markdown: bool) -> list[str]:
    """The report's paragraph on unscored rows (a Markdown list, or console lines within
    120 columns); nothing when every protocol scores every source."""
    lines = unscored_lines(result)
    if not lines:
        return []
    if markdown:
        return [_TITLE + ":", "", *(f"- {line}" for line in lines), ""]
    wrapped = [
        part
        for line in lines
        for part in textwrap.wrap(line, _WIDTH, initial_indent="  ", subsequent_indent="    ")
    ]
    return [_TITLE + ":", *wrapped, ""]
