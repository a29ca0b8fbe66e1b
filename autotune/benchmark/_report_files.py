"""The report folder: which files a benchmark writes there, checked before any work and
written after it (the tables of :mod:`._report`, the plots of :mod:`._plots`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.benchmark._plots import PLOT_FILES
from autotune.benchmark._plots import write_plots
from autotune.benchmark._report import markdown_report
from autotune.benchmark._score import BenchmarkResult
from autotune.csv_files import write_csv
from autotune.simulators.files import check_output_path
from autotune.simulators.files import write_atomically

__all__ = ["REPORT_FILES", "TABLE_FILES", "check_report_files", "write_report"]

TABLE_FILES = ("benchmark.md", "scenarios.csv", "predictions.csv")  # besides the plots
REPORT_FILES = (*TABLE_FILES, *PLOT_FILES)  # every file the report replaces


def write_report(
    result: BenchmarkResult,
    report_dir: Path,
    settings: Mapping[str, Any],
    notes: Mapping[str, str],
) -> list[Path]:
    """Write the Markdown report, CSV files and plots into ``report_dir`` (created if need
    be), each file whole or not at all; the paths written (:data:`TABLE_FILES` and
    ``PLOT_FILES``: nothing else in the folder is touched).

    Raises:
        OSError: a file could not be written (the disk is full, ...).
    """
    written = [report_dir / "benchmark.md", report_dir / "scenarios.csv"]
    write_atomically(written[0], markdown_report(result, settings, notes), follow_symlinks=False)
    write_csv(result.scenarios, written[1], follow_symlinks=False)
    if len(result.rows):
        written.append(
            write_csv(result.rows, report_dir / "predictions.csv", follow_symlinks=False)
        )
    written.extend(write_plots(result, report_dir))
    return written


def check_report_files(report_dir: str) -> None:
    """Refuse, before any work, a file of the report that could not be replaced (a folder,
    a FIFO or a device in its place); the folder itself is checked by
    ``BenchmarkConfig.check``.

    Raises:
        UserError: naming ``report_dir`` and the file.
    """
    for name in REPORT_FILES:
        check_output_path("report_dir", Path(report_dir) / name, follow_symlinks=False)
