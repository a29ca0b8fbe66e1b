"""Time the regret benchmark over all shipped data (no MLflow, no report files).

Usage: ``python benchmarks/bench_regret.py [simulators=[analytical]]`` (Hydra overrides).
Prints the wall time of loading, simulating and scoring, and the time per simulated layout.
"""

from __future__ import annotations

import sys
import time

from autotune.benchmark import run_benchmark
from autotune.config import BenchmarkConfig
from autotune.config import load_config


def main(overrides: list[str]) -> None:
    cfg = load_config(BenchmarkConfig, ["tracking.enabled=false", *overrides])
    start = time.perf_counter()
    result = run_benchmark(cfg)
    elapsed = time.perf_counter() - start
    print(f"benchmark (load + simulate + score): {elapsed:.2f} s")
    for name, summary in result.summaries.items():
        per_layout_us = summary.get("seconds_per_layout", float("nan")) * 1e6
        scenarios = summary["n_scenarios"]
        print(f"  {name:12s} {scenarios:4d} scenarios, {per_layout_us:8.1f} us/layout")


if __name__ == "__main__":
    main(sys.argv[1:])
