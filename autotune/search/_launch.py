"""The search's launch files: ready-to-run scripts for the best layouts, one folder per rank.

``launch_dir/rank-1/`` holds the best layout's files for the job's framework
(:func:`autotune.launch.write_launch_files`), ``rank-2/`` the next, up to ``search.top_k``;
the MLflow run keeps exactly those files as artifacts, nothing else of ``launch_dir``.
``launch_dir/config.yaml`` holds the config the search ran with (:data:`CONFIG`), so that
the folder says what it was made for even when nothing is recorded in MLflow; it is written
only once every launch file of the search was.

autotune writes only into the ``rank-N`` folders and ``config.yaml``, and marks each folder it
writes into with a manifest (:data:`MANIFEST`, the names of the files it wrote there). A later
search replaces those files and removes the ones it no longer writes, in folders so marked
only: a file it did not write is never touched, and a folder emptied of its files is removed.
A ``rank-N`` that is a symbolic link or a file, and a ``config.yaml`` the manifest does not
list, are refused before the search (writing through a link would write outside
``launch_dir``; the other ``config.yaml`` is someone else's).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path

from autotune.launch import write_launch_files
from autotune.search._outcome import Outcome
from autotune.simulators import Job
from autotune.simulators import LayoutError
from autotune.simulators import UserError
from autotune.simulators.files import check_output_path
from autotune.simulators.files import write_atomically

__all__ = [
    "CONFIG",
    "MANIFEST",
    "check_launch_dir",
    "write_search_config",
    "write_top_launch_files",
]

MANIFEST = ".autotune-files"  # in each folder autotune writes into: the files it wrote there
CONFIG = "config.yaml"  # in launch_dir: the config of the search that wrote the launch files
_RANK = re.compile(r"rank-[1-9][0-9]*")
_HEADER = "# Written by autotune (python -m autotune): the files of this folder it replaces.\n"
_CONFIG_HEADER = "# The config this search ran with (python -m autotune); URL passwords: ***.\n"


def check_launch_dir(launch_dir: str | None, top_k: int) -> None:
    """Refuse, before any work, a launch folder that could not take the launch files: one
    that is not a folder or cannot be written, a ``rank-N`` in it that is a symbolic link
    or a file, or a ``config.yaml`` in it that autotune did not write.

    Raises:
        UserError: naming ``launch_dir`` and what stands in the way.
    """
    if launch_dir is None:
        return
    check_output_path("launch_dir", launch_dir, folder=True)
    config = Path(launch_dir) / CONFIG
    if os.path.lexists(config) and CONFIG not in _listed(Path(launch_dir)):
        raise UserError(
            f"launch_dir={launch_dir!r}: {config} was not written by autotune (its {MANIFEST} "
            "does not list it) and the search writes its config there; move it, or choose "
            "another launch_dir"
        )
    check_output_path("launch_dir", config, follow_symlinks=False)
    for folder in _rank_entries(Path(launch_dir), top_k):
        mode = os.lstat(folder).st_mode
        if stat.S_ISLNK(mode):
            raise UserError(
                f"launch_dir={launch_dir!r}: {folder} is a symbolic link; autotune writes the "
                "launch files only into folders of launch_dir (remove the link, or choose "
                "another launch_dir)"
            )
        if not stat.S_ISDIR(mode):
            raise UserError(
                f"launch_dir={launch_dir!r}: {folder} is not a folder; remove it, or choose "
                "another launch_dir"
            )


def _rank_entries(launch_dir: Path, top_k: int) -> list[Path]:
    """The ``rank-N`` entries of ``launch_dir`` with N up to ``top_k``, of any kind (read from
    the folder: ``top_k`` may be far larger than the layouts there are)."""
    if not launch_dir.is_dir():
        return []
    return [
        launch_dir / name
        for name in os.listdir(launch_dir)
        if _RANK.fullmatch(name) and int(name.removeprefix("rank-")) <= top_k
    ]


def write_top_launch_files(
    launch_dir: str | None, job: Job, outcome: Outcome, top_k: int
) -> tuple[list[Path], str | None]:
    """Write the launch files of the best ``top_k`` layouts that fit; the paths written, and
    why some could not be (None: all were).

    A layout the framework cannot launch is skipped (the printed flags say why). Files that
    an earlier search wrote and this one does not (a rank it has no layout for, another
    framework's script) are removed, so the folders show this search's picks.
    """
    if launch_dir is None:
        return [], None
    written: list[Path] = []
    fitting = [layout for layout, prediction in outcome.top(top_k) if prediction.fits]
    try:
        for rank, layout in enumerate(fitting, start=1):
            folder = Path(launch_dir) / f"rank-{rank}"
            try:
                files = write_launch_files(job, layout, folder)
            except LayoutError:
                files = []
            _settle(folder, files)
            written += files
        for folder in _marked_folders(Path(launch_dir)):
            if int(folder.name.removeprefix("rank-")) > len(fitting):
                _settle(folder, [])
    except UserError as exc:  # a folder, FIFO or device where a launch file goes
        return written, str(exc)
    except OSError as exc:
        where = Path(exc.filename).parent if exc.filename else launch_dir  # the folder refused
        return written, f"launch files not written into {where}: {exc.strerror or exc}"
    return written, None


def write_search_config(launch_dir: str | None, text: str) -> tuple[Path | None, str | None]:
    """Write ``text``, the search's config as YAML (:func:`autotune.config.config_yaml`), to
    ``launch_dir/config.yaml`` and list it in the folder's manifest; the path written (None:
    none), and why it could not be (None: it was).
    """
    if launch_dir is None:
        return None, None
    path = Path(launch_dir) / CONFIG
    try:
        write_atomically(path, _CONFIG_HEADER + text, follow_symlinks=False)
        _settle(Path(launch_dir), [path])
    except UserError as exc:  # a folder, FIFO or device stands at its name
        return None, str(exc)
    except OSError as exc:
        return None, f"{path} not written: {exc.strerror or exc}"
    return path, None


def _marked_folders(launch_dir: Path) -> list[Path]:
    """The ``rank-N`` folders of ``launch_dir`` that autotune marked (never a link)."""
    if not launch_dir.is_dir():
        return []
    return [
        entry
        for entry in launch_dir.iterdir()
        if _RANK.fullmatch(entry.name)
        and not entry.is_symlink()
        and entry.is_dir()
        and (entry / MANIFEST).is_file()
    ]


def _listed(folder: Path) -> list[str]:
    """The file names the manifest of ``folder`` lists (plain names only: never a path)."""
    manifest = folder / MANIFEST
    if manifest.is_symlink() or not manifest.is_file():
        return []
    names = manifest.read_text(encoding="utf-8", errors="replace").splitlines()
    return [
        name
        for name in names
        if name
        and not name.startswith("#")
        and name not in (".", "..", MANIFEST)
        and "/" not in name
        and "\0" not in name
    ]


def _settle(folder: Path, files: list[Path]) -> None:
    """Mark ``folder`` as holding ``files``; remove the files an earlier manifest listed that
    are not among them, and the folder (with its manifest) when nothing is left in it."""
    kept = {path.name for path in files}
    for name in _listed(folder):
        if name not in kept:
            stale = folder / name
            if stale.is_symlink() or stale.is_file():
                stale.unlink()
    if files:
        write_atomically(
            folder / MANIFEST,
            _HEADER + "".join(f"{name}\n" for name in sorted(kept)),
            follow_symlinks=False,
        )
    elif (folder / MANIFEST).is_file():
        (folder / MANIFEST).unlink()
        with contextlib.suppress(OSError):  # a file autotune did not write keeps the folder
            folder.rmdir()
