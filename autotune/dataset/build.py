"""Convert the raw published figures (``autotune/dataset/raw/``) into schema-v1 tables.

Usage::

    python -m autotune.dataset.build --out FOLDER [--raw FOLDER]

``--out`` has no default: the installed package is never written to. In a checkout,
``--out autotune/dataset/data`` regenerates the shipped tables; elsewhere, the tables written
are read with ``data=FOLDER/<source>.csv``. Each converted table is validated by the loader
before it is written, so a written file always loads.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import pandas as pd

from autotune.dataset._loader import load_measurements
from autotune.dataset._public import DATA_DIR
from autotune.dataset.importers import IMPORTERS
from autotune.dataset.importers import Importer
from autotune.simulators.errors import UserError
from autotune.simulators.files import atomic_writer
from autotune.simulators.files import check_output_path
from autotune.simulators.files import write_failure

__all__ = ["RAW_DIR", "build", "main"]

RAW_DIR = DATA_DIR.parent / "raw"


def build(raw_dir: Path, out: Path) -> dict[str, int]:
    """Convert every raw file, validate it, then write ``out/<source>.csv`` (each whole or not
    at all, and none before every table has converted); rows per source.

    Raises:
        UserError: a raw file is missing or cannot be converted, or ``out`` or a file in it
            cannot be written.
    """
    check_output_path("--out", out, folder=True)
    for source in IMPORTERS:
        check_output_path("--out", out / f"{source}.csv")
    missing = [
        raw_file for raw_file, _ in IMPORTERS.values() if not (raw_dir / raw_file).is_file()
    ]
    if missing:
        raise UserError(f"--raw {raw_dir}: raw file(s) {', '.join(missing)} not found there")
    tables = {
        source: _converted(raw_dir / raw_file, convert)
        for source, (raw_file, convert) in IMPORTERS.items()
    }
    for source, table in tables.items():
        target = out / f"{source}.csv"
        try:
            with atomic_writer(target, newline="") as handle:
                table.to_csv(handle, index=False)
        except OSError as exc:
            raise UserError(write_failure(target, exc)) from None
    return {source: len(table) for source, table in tables.items()}


def _converted(raw: Path, convert: Importer) -> pd.DataFrame:
    """The schema-v1 table of one raw file, validated by the loader.

    Raises:
        UserError: the raw file is not the published table its importer reads, or its table
            does not load.
    """
    try:
        table = convert(raw)
    except (KeyError, ValueError, IndexError, TypeError, pd.errors.ParserError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise UserError(
            f"raw file {raw}: cannot be converted ({type(exc).__name__}: {reason}); it must be "
            "the published table its importer reads, as shipped in autotune/dataset/raw/"
        ) from None
    with tempfile.TemporaryDirectory() as scratch:
        candidate = Path(scratch) / f"{raw.stem}.csv"
        table.to_csv(candidate, index=False)
        load_measurements(candidate)
    return table


class _Parser(argparse.ArgumentParser):
    """argparse, whose refusals are one ``error:`` line like every command's."""

    def error(self, message: str) -> NoReturn:
        usage = self.format_usage().strip().removeprefix("usage: ")
        self.exit(2, f"error: {message} (usage: {usage})\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(
        prog="python -m autotune.dataset.build",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--raw", type=Path, default=RAW_DIR, help="the raw files (default: shipped)"
    )
    parser.add_argument("--out", required=True, help="the folder the tables go to")
    args = parser.parse_args(argv)
    if not args.out.strip():
        parser.error("--out='' is empty; give a folder path")
    out = Path(args.out)
    try:
        written = build(args.raw, out)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for source, rows in written.items():
        print(f"{source}: {rows} rows -> {out / (source + '.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
