"""Speed and search quality of the autotuner (issue 2 targets).

    python benchmarks/bench_autotune.py            # all three parts, ~3 minutes on 2 cores
    python benchmarks/bench_autotune.py --quick    # fewer repeats and seeds
    python benchmarks/bench_autotune.py --refresh  # update benchmarks/results/autotune.md

1. Analytical simulator throughput: every valid layout of llama70b on the default Ascend
   cluster, a fresh simulator per repeat (its per-layer cache starts cold), median of repeats.
2. End-to-end wall time of `python -m autotune model=llama70b cluster=ascend` (defaults,
   MLflow on), in a fresh folder (first run: MLflow creates its database) and again in the
   same folder; median of repeats, imports included.
3. Search quality: the gap between each sampler's best layout and the exhaustive optimum of
   the same simulator, over seeds: on llama70b/ascend, and TPE and random on a larger space
   (Mixtral-8x7B on 16 H100 nodes).
4. The hierarchical simulator on llama70b/ascend, whose grid exceeds the default budget: the
   default search (auto: the analytical simulator screens every layout, the hierarchical one
   re-prices the best 32) against TPE driving the hierarchical simulator itself, each as a gap
   to the hierarchical simulator's exhaustive optimum, with its wall time.
Prints a Markdown table and writes it to benchmark_results/autotune.md (``--out DIR``
elsewhere; ``--refresh`` overwrites the committed benchmarks/results/autotune.md).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import add_output_options
from _results import write_result

from autotune import catalog
from autotune.catalog import priced_job_from_config
from autotune.config import AutotuneConfig
from autotune.config import load_config
from autotune.search import Evaluator
from autotune.search import StopFlag
from autotune.search import build_space
from autotune.search import open_study
from autotune.search import optimize
from autotune.search import ranked
from autotune.search import search_job

REPO = Path(__file__).resolve().parents[1]


def _job(*overrides: str):  # noqa: ANN202
    cfg = load_config(AutotuneConfig, overrides)
    return cfg, priced_job_from_config(cfg)


def throughput(repeats: int) -> tuple[float, int]:
    cfg, priced = _job()
    job = priced.job
    space = build_space(job, cfg.search, {})
    rates = []
    for _ in range(repeats):
        simulator = catalog.load_simulator("analytical")
        started = time.perf_counter()
        for layout in space.layouts:
            simulator.simulate(job, layout)
        rates.append(space.size / (time.perf_counter() - started))
    return statistics.median(rates), space.size


def end_to_end(repeats: int) -> tuple[float, float]:
    command = [sys.executable, "-m", "autotune", "model=llama70b", "cluster=ascend"]
    first, warm = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as folder:
            for bucket in (first, warm):
                started = time.perf_counter()
                subprocess.run(
                    command,
                    cwd=folder,
                    check=True,
                    capture_output=True,
                    env={"PYTHONPATH": str(REPO), "PATH": ""},
                )
                bucket.append(time.perf_counter() - started)
    return statistics.median(first), statistics.median(warm)


def search_gaps(
    sampler: str, seeds: range, n_trials: int, overrides: tuple[str, ...] = ()
) -> tuple[list[float], int]:
    """Gap of the best layout a sampler found to the exhaustive optimum, per seed (default
    polish), and the size of the space; the search itself answers the optimum when it prices
    every layout beside."""
    cfg, priced = _job(*overrides)
    space = build_space(priced.job, cfg.search, {})
    evaluate = Evaluator(priced)
    optimum = ranked(zip(space.layouts, evaluate.price(space.layouts), strict=True))[0][1]
    gaps = []
    for seed in seeds:
        study = open_study(None, f"bench-{sampler}-{seed}", sampler, seed, {"bench": sampler})
        result = optimize(
            study,
            space,
            evaluate,
            n_trials=n_trials,
            polish_fraction=cfg.search.polish,
            stop=StopFlag(),
        )
        found = ranked((lay, pred) for _, lay, pred in result.evaluated)[0][1]
        gaps.append(found.step_time_s / optimum.step_time_s - 1)
    return gaps, space.size


def hierarchical_search(seeds: range) -> list[str]:
    """Rows of part 4: the default (screen) and TPE, gaps to the hierarchical optimum."""
    cfg, priced = _job("simulator=hierarchical", "launch_dir=null")
    space = build_space(priced.job, cfg.search, {})
    evaluate = Evaluator(priced)
    started = time.perf_counter()
    optimum = ranked(zip(space.layouts, evaluate.price(space.layouts), strict=True))[0][1]
    every_s = time.perf_counter() - started
    rows = [
        f"| hierarchical, every layout of llama70b/ascend ({space.size}) priced (s) | "
        f"{every_s:.1f} |"
    ]
    started = time.perf_counter()
    outcome = search_job(cfg, priced_job_from_config(cfg), StopFlag())
    auto_s = time.perf_counter() - started
    gap = outcome.best.step_time_s / optimum.step_time_s - 1
    rows.append(
        f"| hierarchical, default search ({outcome.mode}: analytical screen, best "
        f"{cfg.search.rerank_top} re-priced): gap to its exhaustive optimum, time (s) | "
        f"{100 * gap:.2f}%, {auto_s:.1f} |"
    )
    gaps, times = [], []
    for seed in seeds:
        fresh = priced_job_from_config(cfg)  # a cold simulator, as a search starts
        study = open_study(None, f"bench-hier-{seed}", "tpe", seed, {"bench": "hier"})
        started = time.perf_counter()
        result = optimize(
            study,
            space,
            Evaluator(fresh),
            n_trials=cfg.search.n_trials,
            polish_fraction=cfg.search.polish,
            stop=StopFlag(),
        )
        times.append(time.perf_counter() - started)
        found = ranked((lay, pred) for _, lay, pred in result.evaluated)[0][1]
        gaps.append(found.step_time_s / optimum.step_time_s - 1)
    rows.append(
        f"| hierarchical, tpe {cfg.search.n_trials} trials: gap to its exhaustive optimum, "
        f"mean / max over {len(gaps)} seeds, median time (s) | {100 * statistics.mean(gaps):.2f}%"
        f" / {100 * max(gaps):.2f}%, {statistics.median(times):.1f} |"
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    add_output_options(parser)
    args = parser.parse_args()
    repeats, seeds = (3, range(5)) if args.quick else (5, range(10))
    rate, size = throughput(repeats)
    first, warm = end_to_end(2 if args.quick else 3)
    lines = [
        "| measurement | value |",
        "|---|---|",
        f"| analytical simulator, layouts/s (llama70b/ascend, {size} layouts, median of "
        f"{repeats}) | {rate:,.0f} |",
        f"| `python -m autotune model=llama70b cluster=ascend`, fresh folder (s) | {first:.1f} |",
        f"| the same, MLflow database already there (s) | {warm:.1f} |",
    ]
    mixtral = ("model=mixtral_8x7b", "cluster=h100", "cluster.num_nodes=16")
    runs = [
        ("llama70b/ascend", "tpe", 200, seeds, ()),
        ("llama70b/ascend", "random", 200, seeds, ()),
        ("llama70b/ascend", "gp", 60, range(3), ()),
        ("mixtral_8x7b/h100 x16", "tpe", 200, seeds, mixtral),
        ("mixtral_8x7b/h100 x16", "random", 200, seeds, mixtral),
    ]
    for job, sampler, n_trials, chosen, overrides in runs:
        gaps, layouts = search_gaps(sampler, chosen, n_trials, overrides)
        within = sum(g <= 0.02 for g in gaps)
        lines.append(
            f"| {sampler}, {n_trials} trials, {job} ({layouts} layouts): gap to exhaustive "
            f"optimum, mean / max over {len(gaps)} seeds (within 2%) | "
            f"{100 * statistics.mean(gaps):.2f}% / {100 * max(gaps):.2f}% "
            f"({within}/{len(gaps)}) |"
        )
    lines += hierarchical_search(range(2) if args.quick else range(5))
    write_result(args, "autotune.md", "\n".join(lines))


if __name__ == "__main__":
    main()
