"""Where a benchmark script writes its Markdown result.

By default into ``benchmark_results/`` of the current folder (git-ignored), so that running a
script never rewrites the committed figures; ``--refresh`` writes into ``benchmarks/results/``
to update them on purpose, and ``--out DIR`` anywhere else.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from autotune.simulators.files import write_atomically

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
    """Print ``text``, then write it as ``name`` where ``args`` say (whole or not at all, so a
    full disk leaves the previous result as it was) and print where it went; the path."""
    path = result_folder(args) / name
    print(text)
    write_atomically(path, text if text.endswith("\n") else text + "\n")
    print(f"wrote {path}")
    return path


def table_per_simulator(description: str, stem: str, table: Callable[[str], str]) -> None:
    """The command line of a script that writes one table per simulator: ``[simulator]``
    (default analytical) and the output options; ``table(simulator)`` goes to
    ``<stem>_<simulator>.md``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("simulator", nargs="?", default="analytical")
    add_output_options(parser)
    args = parser.parse_args()
    write_result(args, f"{stem}_{args.simulator}.md", table(args.simulator))
