"""Speed of the analytical simulator, one layout at a time and vectorized, and of exhaustive
searches (issue 10 targets).

    python benchmarks/bench_simulators.py            # about 3 minutes on 2 cores
    python benchmarks/bench_simulators.py --quick    # fewer repeats
    python benchmarks/bench_simulators.py --refresh  # update benchmarks/results/simulators.md

1. Layouts per second over every valid layout of each job: ``simulate`` one by one and
   ``simulate_many`` at once, each on a fresh simulator (its per-layer costs start cold), and
   ``simulate_many`` again on the same simulator (warm). One core: the CPU time of this
   process (``time.process_time``, which other processes on a shared machine do not inflate),
   median of the repeats; the ratio of the two paths comes from the same run.
2. The exhaustive search of the big jobs, ``python -m autotune ... search.sampler=grid
   tracking.enabled=false``: the wall time of the whole command (imports included) and its
   CPU time, median of the repeats.

Prints Markdown tables and writes them to benchmark_results/simulators.md (``--out DIR``
elsewhere; ``--refresh`` overwrites the committed benchmarks/results/simulators.md).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _results import add_output_options
from _results import write_result

from autotune import catalog
from autotune.catalog import job_from_config
from autotune.config import AutotuneConfig
from autotune.config import fixed_layout_values
from autotune.config import load_config
from autotune.search import build_space

REPO = Path(__file__).resolve().parents[1]

# name -> overrides of `python -m autotune` (conf/model, conf/cluster)
JOBS = {
    "llama70b, 64 Ascend 910B2": ("model=llama70b", "cluster=ascend"),
    "llama405b, 16,384 H100, GBS 2048": (
        "model=llama405b",
        "cluster=h100",
        "cluster.num_nodes=2048",
        "train.global_batch_size=2048",
    ),
    "DeepSeek-V3, 2,048 Ascend 910B2": (
        "model=deepseek_v3",
        "cluster=ascend",
        "cluster.num_nodes=256",
    ),
    "Qwen3-235B-A22B, 1,024 H200": (
        "model=qwen3_235b_a22b",
        "cluster=h200",
        "cluster.num_nodes=128",
    ),
}


def _rate(count: int, price: Callable[[Any], object], repeats: int, warm: Any = None) -> float:
    """Median layouts per CPU second of ``price(simulator)`` over ``repeats``: a fresh
    simulator each time (built before the clock starts), or ``warm`` every time."""
    rates = []
    for _ in range(repeats):
        simulator = warm or catalog.load_simulator("analytical")
        started = time.process_time()
        price(simulator)
        rates.append(count / (time.process_time() - started))
    return statistics.median(rates)


def throughput(overrides: tuple[str, ...], repeats: int) -> tuple[int, float, float, float]:
    """(valid layouts, scalar, vectorized cold, vectorized warm) layouts per second."""
    cfg = load_config(AutotuneConfig, [*overrides, "tracking.enabled=false"])
    job = job_from_config(cfg)
    fixed = fixed_layout_values(cfg.parallel)
    space = build_space(job, cfg.search, fixed)
    layouts = space.layouts

    def scalar(simulator: Any) -> None:
        for layout in layouts:
            simulator.simulate(job, layout)

    def vectorized(simulator: Any) -> None:
        simulator.simulate_many(job, layouts)

    warm = catalog.load_simulator("analytical")
    vectorized(warm)
    return (
        space.size,
        _rate(space.size, scalar, repeats),
        _rate(space.size, vectorized, repeats),
        _rate(space.size, vectorized, repeats, warm=warm),
    )


def exhaustive_search(overrides: tuple[str, ...], repeats: int) -> tuple[float, float]:
    """(wall, CPU) seconds of the grid search command, medians over ``repeats``."""
    command = [
        sys.executable,
        "-m",
        "autotune",
        *overrides,
        "search.sampler=grid",
        "tracking.enabled=false",
    ]
    walls, cpus = [], []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(repeats):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run(
                command,
                cwd=folder,
                check=True,
                capture_output=True,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
            walls.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    add_output_options(parser)
    args = parser.parse_args()
    repeats = 3 if args.quick else 5
    lines = [
        f"## Analytical simulator, layouts per CPU second (one core, median of {repeats})",
        "",
        "| job | layouts | `simulate` | `simulate_many` cold | ratio | `simulate_many` warm |",
        "|---|---|---|---|---|---|",
    ]
    for name, overrides in JOBS.items():
        size, scalar, cold, warm = throughput(overrides, repeats)
        ratio = cold / scalar
        lines.append(
            f"| {name} | {size:,} | {scalar:,.0f} | {cold:,.0f} | {ratio:.1f}x | {warm:,.0f} |"
        )
        print(lines[-1], flush=True)
    searches = 3 if args.quick else 5
    lines += [
        "",
        f"## Exhaustive search (`search.sampler=grid`, no MLflow), median of {searches}",
        "",
        "| job | wall s | CPU s |",
        "|---|---|---|",
    ]
    for name, overrides in list(JOBS.items())[1:]:
        wall, cpu = exhaustive_search(overrides, searches)
        lines.append(f"| {name} | {wall:.1f} | {cpu:.1f} |")
        print(lines[-1], flush=True)
    load = os.getloadavg()[0]
    lines += ["", f"Load average at the end: {load:.1f} on {os.cpu_count()} CPUs."]
    write_result(args, "simulators.md", "\n".join(lines))


if __name__ == "__main__":
    main()
