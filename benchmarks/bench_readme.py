"""Every ``python -m autotune...`` command of the README, run as a new user would, timed.

    python benchmarks/bench_readme.py              # each command once, in README order
    python benchmarks/bench_readme.py --refresh    # update benchmarks/results/readme.md

The README promises that each example finishes in under a minute on a 2-core machine; this
script is how that is checked (``tests/test_readme.py`` only checks that each is accepted).
The commands share one fresh folder, as one user's session would (the op-cost example reads
the ``ops.csv`` the profile example wrote). A command over ``--limit`` seconds is stopped and
reported as such.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _readme import readme_commands
from _results import add_output_options
from _results import write_result

REPO = Path(__file__).resolve().parents[1]


def run_timed(args: tuple[str, ...], module: str, limit: float, folder: str) -> tuple[float, str]:
    """Wall seconds of ``python -m module args`` run in ``folder``, and how it ended (exit
    status 2 is the tool's refusal of bad input, which the README shows on purpose)."""
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", module, *args],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=limit,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    except subprocess.TimeoutExpired:
        return time.perf_counter() - started, f"stopped after {limit:.0f} s"
    seconds = time.perf_counter() - started
    status = {0: "ok", 2: "refused"}.get(proc.returncode, f"exit {proc.returncode}")
    return seconds, status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=180.0, help="seconds per command")
    add_output_options(parser)
    args = parser.parse_args()
    lines = ["| README command | wall s | status |", "|---|---|---|"]
    with tempfile.TemporaryDirectory() as folder:  # one session: a later command reads
        for command in readme_commands():  # what an earlier one wrote (ops.csv)
            seconds, status = run_timed(command.args, command.module, args.limit, folder)
            print(f"{seconds:6.1f} s  {status:>8}  {command.text}", flush=True)
            lines.append(f"| `{command.text}` | {seconds:.1f} | {status} |")
    write_result(args, "readme.md", "\n".join(lines))


if __name__ == "__main__":
    main()
