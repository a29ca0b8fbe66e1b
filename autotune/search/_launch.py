"""The search's launch files: ready-to-run scripts for the best layouts, one folder per rank.

``launch_dir/rank-1/`` holds the best layout's files for the job's framework
(:func:`autotune.launch.write_launch_files`), ``rank-2/`` the next, up to ``search.top_k``;
the MLflow run keeps the same folders as artifacts.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from autotune.launch import write_launch_files
from autotune.search._outcome import Outcome
from catalog import Job
from simulators import LayoutError
from simulators import UserError

__all__ = ["check_launch_dir", "write_top_launch_files"]


def check_launch_dir(launch_dir: str | None) -> None:
    """Refuse a launch folder that cannot be written, before any work."""
    if launch_dir is None:
        return
    folder = Path(launch_dir)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"launch_dir={launch_dir!r} is a file; give a folder (or null: none)")
    parent = next((p for p in (folder, *folder.parents) if p.exists()), Path("."))
    if not os.access(parent, os.W_OK):
        raise UserError(f"launch_dir={launch_dir!r}: {parent} is not writable")


def write_top_launch_files(
    launch_dir: str | None, job: Job, outcome: Outcome, top_k: int
) -> list[Path]:
    """Write the launch files of the best ``top_k`` layouts that fit; the paths written.

    A layout the framework cannot launch is skipped (the printed flags say why). Earlier
    ``rank-N`` folders are replaced, so the folder always shows this search's picks.
    """
    if launch_dir is None:
        return []
    written: list[Path] = []
    fitting = [layout for layout, prediction in outcome.top(top_k) if prediction.fits]
    for rank, layout in enumerate(fitting, start=1):
        folder = Path(launch_dir) / f"rank-{rank}"
        shutil.rmtree(folder, ignore_errors=True)
        try:
            written += write_launch_files(job.model, job.cluster, job.train, layout, folder)
        except LayoutError:
            continue
    return written
