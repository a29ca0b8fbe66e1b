"""Are two benchmark runs' predictions identical? Exit 1, listing the differences, if not.

    python -m autotune.benchmark 'simulators=[analytical,hierarchical]' \\
        tracking.enabled=false report_dir=/tmp/before      # before a change
    python -m autotune.benchmark 'simulators=[analytical,hierarchical]' \\
        tracking.enabled=false report_dir=/tmp/after       # after it
    python benchmarks/compare_predictions.py /tmp/before /tmp/after

Each argument is a benchmark's ``report_dir`` or its ``predictions.csv``. The files must hold
the same rows in the same order with every cell the same text: a refactoring that changes no
prediction passes, a last-digit change of one float does not.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

_SHOWN = 10  # differences listed before "... and N more"


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of ``path`` (a ``predictions.csv``, or the report folder holding one)."""
    file = path / "predictions.csv" if path.is_dir() else path
    with file.open(newline="") as handle:
        return list(csv.DictReader(handle))


def differences(before: list[dict[str, str]], after: list[dict[str, str]]) -> list[str]:
    """Every difference between two predictions tables, one sentence each."""
    found = []
    if len(before) != len(after):
        found.append(f"{len(before)} rows before, {len(after)} after")
    if before and after and list(before[0]) != list(after[0]):
        found.append(f"columns {list(before[0])} before, {list(after[0])} after")
    for number, (old, new) in enumerate(zip(before, after, strict=False), start=2):
        for column in old:
            if old[column] != new.get(column):
                found.append(
                    f"line {number} ({old.get('simulator')}, {old.get('layout')}), {column}: "
                    f"{old[column]!r} before, {new.get(column)!r} after"
                )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="report_dir or predictions.csv before")
    parser.add_argument("after", type=Path, help="report_dir or predictions.csv after")
    args = parser.parse_args(argv)
    try:
        before, after = read_rows(args.before), read_rows(args.after)
    except OSError as exc:  # a folder without predictions.csv, a path that is not there
        parser.error(f"cannot read {exc.filename}: {exc.strerror}")
    found = differences(before, after)
    if not found:
        print(f"identical: {len(before)} rows, every cell the same")
        return 0
    print(f"{len(found)} difference(s):")
    for line in found[:_SHOWN]:
        print(f"  {line}")
    if len(found) > _SHOWN:
        print(f"  ... and {len(found) - _SHOWN} more")
    return 1


if __name__ == "__main__":
    sys.exit(main())
