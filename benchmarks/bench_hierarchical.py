"""Speed and sanity of the hierarchical simulator (issue 4 targets).

    python benchmarks/bench_hierarchical.py            # ~1-3 minutes on 2 cores
    python benchmarks/bench_hierarchical.py --quick    # fewer layouts
    python benchmarks/bench_hierarchical.py --refresh  # update benchmarks/results/hierarchical.md

1. Time per layout for llama70b on 1024 Ascend NPUs (cluster.num_nodes=128), over layouts of
   the search space: a cold pass (compiles each new layer shape on the meta device) and a
   warm pass (graphs cached, no prediction remembered), median / 95th percentile / max per
   layout. Target: warm <= 50 ms.
2. Sanity: hierarchical next to analytical for a few llama70b layouts on 64 NPUs.
3. A calibration's fit: the factors and memory model `python -m autotune.calibrate data=bloom
   simulator=hierarchical` fits (its 131 BLOOM rows, default settings with the bootstrap; not
   the layouts the command also remembers, ``layouts=True``), median over 3 repeats
   (1 with --quick); its simulations are most of what leave one model out and leave one source
   out cost with this simulator.
Prints a Markdown table and writes it to benchmark_results/hierarchical.md (``--out DIR``
elsewhere; ``--refresh`` overwrites the committed benchmarks/results/hierarchical.md).
"""

from __future__ import annotations

import argparse
import statistics
import time

from _results import add_output_options
from _results import write_result

from autotune import calibrate
from autotune import dataset
from autotune.catalog import load_simulator
from autotune.catalog import priced_job_from_config
from autotune.config import AutotuneConfig
from autotune.config import CalibrateConfig
from autotune.config import load_config
from autotune.search import build_space
from autotune.simulators import Layout
from autotune.simulators import Prediction
from autotune.simulators.hierarchical import HierarchicalSimulator

SANITY = (
    dict(tp=8, pp=4, micro_batch=1, recompute="none"),
    dict(tp=8, pp=8, vpp=2, micro_batch=1, recompute="none"),
    dict(tp=4, pp=8, micro_batch=1, recompute="full"),
)


def _job(*overrides: str):  # noqa: ANN202
    cfg = load_config(AutotuneConfig, overrides)
    priced = priced_job_from_config(cfg)
    return cfg, priced.job, priced.simulator


def speed(limit: int) -> tuple[int, list[float], list[float]]:
    """Seconds per layout, cold and warm, over up to ``limit`` layouts spread over the space."""
    cfg, job, simulator = _job("cluster.num_nodes=128", "simulator=hierarchical")
    layouts = build_space(job, cfg.search, {}).layouts
    chosen = layouts[:: max(1, len(layouts) // limit)][:limit]
    passes: list[list[float]] = [[], []]
    for times in passes:
        HierarchicalSimulator.forget_predictions()  # time the pricing, not the memory of it
        for layout in chosen:
            started = time.perf_counter()
            simulator.simulate(job, layout)
            times.append(time.perf_counter() - started)
    return len(layouts), passes[0], passes[1]


def sanity() -> list[tuple[Layout, Prediction, Prediction]]:
    """(layout, analytical, hierarchical) for the SANITY layouts of llama70b on 64 NPUs."""
    _, job, analytical = _job()
    *_, hierarchical = _job("simulator=hierarchical")
    rows = []
    for given in SANITY:
        layout = Layout.resolve(job.cluster.num_devices, **given)
        layout.check(job)
        rows.append((layout, analytical.simulate(job, layout), hierarchical.simulate(job, layout)))
    return rows


def fit_seconds(repeats: int) -> tuple[int, list[float]]:
    """Rows of BLOOM fitted, and seconds of the hierarchical simulator's fit on them, repeated
    with no prediction remembered from the previous fit (the layer graphs the first one compiles
    stay compiled)."""
    priceable = dataset.priceable_rows(dataset.load_public(["bloom"]))
    runs = [run for run in calibrate.row_runs(priceable.table, priceable.specs) if run]
    settings = calibrate.fit_settings(
        load_config(CalibrateConfig, ["data=bloom", "name=bench"]).calibrate
    )
    seconds = []
    for _ in range(repeats):
        HierarchicalSimulator.forget_predictions()
        simulator = load_simulator("hierarchical")
        started = time.perf_counter()
        calibrate.fit(simulator, runs, settings, plausible=True)
        seconds.append(time.perf_counter() - started)
    return len(runs), seconds


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered) * 1e3:.1f} / {p95 * 1e3:.1f} / {ordered[-1] * 1e3:.1f}"


def _top(prediction: Prediction) -> str:
    parts = sorted(prediction.breakdown.items(), key=lambda kv: -kv[1])[:4]
    return ", ".join(f"{k} {v:.1f}" for k, v in parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    add_output_options(parser)
    args = parser.parse_args()
    size, cold, warm = speed(20 if args.quick else 100)
    lines = [
        "## Time per layout: llama70b, 1024 Ascend 910B2 (median / p95 / max, ms)",
        "",
        "| pass | layouts | time per layout |",
        "|---|---|---|",
        f"| cold (compiles new shapes) | {len(cold)} of {size} | {_ms(cold)} |",
        f"| warm (graphs cached) | {len(warm)} of {size} | {_ms(warm)} |",
        "",
        "## Sanity: llama70b on 64 Ascend 910B2, GBS 512, seq 8192",
        "",
        "| layout | analytical s | hierarchical s | analytical GiB | hierarchical GiB "
        "| hierarchical top terms (s) |",
        "|---|---|---|---|---|---|",
    ]
    for layout, ana, hier in sanity():
        lines.append(
            f"| {layout.describe()} | {ana.step_time_s:.1f} | {hier.step_time_s:.1f} "
            f"| {ana.memory_gib:.1f} | {hier.memory_gib:.1f} | {_top(hier)} |"
        )
    rows, seconds = fit_seconds(1 if args.quick else 3)
    lines += [
        "",
        "## A calibration's fit: BLOOM, hierarchical simulator (median of repeats, s)",
        "",
        "| rows | repeats | fit |",
        "|---|---|---|",
        f"| {rows} | {len(seconds)} | {statistics.median(seconds):.1f} |",
    ]
    write_result(args, "hierarchical.md", "\n".join(lines))


if __name__ == "__main__":
    main()
