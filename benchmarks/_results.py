"""Where a benchmark script writes its Markdown result.

By default into ``benchmark_results/`` of the current folder (git-ignored), so that running a
script never rewrites the committed figures; ``--refresh`` writes into ``benchmarks/results/``
to update them on purpose, and ``--out DIR`` anywhere else.
"""

from __future__ import annotations

import argparse
from pathlib import Path

COMMITTED = Path(__file__).resolve().parent / "results"
DEFAULT_OUT = Path("benchmark_results")


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """``--out DIR`` and ``--refresh``, which exclude each other."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"folder for the result (default: ./{DEFAULT_OUT})",
    )
    where.add_argument(
        "--refresh",
        action="store_true",
        help="overwrite the committed result in benchmarks/results/",
    )


def result_folder(args: argparse.Namespace) -> Path:
    """The folder that ``--out`` / ``--refresh`` name."""
    return COMMITTED if args.refresh else Path(args.out)


def write_result(args: argparse.Namespace, name: str, text: str) -> Path:
    """Write ``text`` as ``name`` where ``args`` say, print it and where it went; the path."""
    folder = result_folder(args)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    print(text)
    print(f"wrote {path}")
    return path
