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

from autotune.dataset._loader import load_measurements
from autotune.dataset._public import DATA_DIR
from autotune.dataset.importers import IMPORTERS
from autotune.simulators.errors import UserError
from autotune.simulators.files import atomic_writer
from autotune.simulators.files import check_output_path
from autotune.simulators.files import write_failure

__all__ = ["RAW_DIR", "build", "main"]

RAW_DIR = DATA_DIR.parent / "raw"


def build(raw_dir: Path, out: Path) -> dict[str, int]:
    """Convert every raw file, validate it, write ``out/<source>.csv`` (each whole or not at
    all); rows per source.

    Raises:
        UserError: a raw file is missing, or ``out`` or a file in it cannot be written.
    """
    check_output_path("--out", out, folder=True)
    for source in IMPORTERS:
        check_output_path("--out", out / f"{source}.csv")
    written = {}
    for source, (raw_file, convert) in IMPORTERS.items():
        raw = raw_dir / raw_file
        if not raw.is_file():
            raise UserError(f"raw file {raw} not found (expected in --raw {raw_dir})")
        table = convert(raw)
        with tempfile.TemporaryDirectory() as scratch:
            candidate = Path(scratch) / f"{source}.csv"
            table.to_csv(candidate, index=False)
            load_measurements(candidate)
        target = out / f"{source}.csv"
        try:
            with atomic_writer(target, newline="") as handle:
                table.to_csv(handle, index=False)
        except OSError as exc:
            raise UserError(write_failure(target, exc)) from None
        written[source] = len(table)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m autotune.dataset.build",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--raw", type=Path, default=RAW_DIR, help="the raw files (default: shipped)"
    )
    parser.add_argument("--out", type=Path, required=True, help="the folder the tables go to")
    args = parser.parse_args(argv)
    try:
        written = build(args.raw, args.out)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for source, rows in written.items():
        print(f"{source}: {rows} rows -> {args.out / (source + '.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
