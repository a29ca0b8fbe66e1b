"""What the memory model misses per source, as a ratio of the prediction and as a share of the
device: the evidence of docs/decisions/0056-a-margin-is-a-share-of-the-device.md.

    python benchmarks/bench_memory_misses.py [hierarchical]   # writes benchmark_results/
    python benchmarks/bench_memory_misses.py --refresh        # updates benchmarks/results/

Over the shipped runs with a measured peak or an out-of-memory outcome (the runs the memory
margins come from, :func:`autotune.calibrate.memory_runs`), per source: the predicted peaks
of the runs with a measured one, the slope of a line through their misses in GiB against the
prediction (near 0 or below: the miss does not grow with the prediction), the mean miss and
the 95th percentile of the misses as ``(measured - predicted) / device memory`` (how far the
sources lie apart: docs/decisions/0068) and the 95th percentile as ``measured / predicted -
1`` (out-of-memory runs counted with the device's memory as their measurement). Then the
margins the search applies per stack. Last, whether a layout's miss follows the misses of its
job's layouts that share a field with it (the evidence for a memory belief with per-field parts
in the probe loop, docs/calibration.md 8): over the jobs with three or more measured peaks, the
RMS of a layout's ``log(measured / predicted)`` less the mean of its job's other layouts, and
less the mean of those of the same TP degree (pipeline depth, micro-batch, recompute), each
over the layouts that share the field with another.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from _results import table_per_simulator

from autotune import catalog
from autotune.calibrate import evidence
from autotune.calibrate import memory_runs
from autotune.calibrate import shipped_margins
from autotune.simulators import Layout


def _table(simulator_name: str) -> str:
    simulator = catalog.load_simulator(simulator_name)
    runs, sources = memory_runs()
    found: dict[str, list[tuple[float, float, float, bool]]] = defaultdict(list)
    misses: list[tuple[str, Layout, float]] = []  # scenario, layout, log measured / predicted
    measures: dict[str, set[str]] = defaultdict(set)
    for run, source in zip(runs, sources, strict=True):
        prediction = simulator.simulate(*run.specs)
        capacity = run.specs[0].cluster.device.memory_gib
        predicted, measured = evidence(
            prediction.peak_gib(run.peak_memory_measure, run.peak_memory_rank),
            prediction.memory_gib,
            run.peak_memory_gib,
            capacity,
        )
        found[source].append((predicted, measured, capacity, np.isfinite(run.peak_memory_gib)))
        if np.isfinite(run.peak_memory_gib):  # an out-of-memory run's measure says nothing
            measures[source].add(run.peak_memory_measure)
            misses.append((run.group, run.specs[1], float(np.log(measured / predicted))))
    lines = [
        f"# What the memory model misses ({simulator_name} simulator)",
        "",
        "| source (measure) | runs | predicted, GiB | slope of the miss (GiB per GiB) "
        "| 95th pct, of the prediction | mean, of the device | 95th pct, of the device |",
        "|---|---|---|---|---|---|---|",
    ]
    for source in sorted(found):
        predicted, measured, capacity, peak = np.array(found[source]).T
        peak = peak.astype(bool)
        slope = np.polyfit(predicted[peak], measured[peak] - predicted[peak], 1)[0]
        ratio = np.percentile(measured / predicted - 1, 95)
        shares = (measured - predicted) / capacity
        lines.append(
            f"| {source} ({', '.join(sorted(measures[source]))}) | {len(predicted)} "
            f"| {predicted[peak].min():.1f}-{predicted[peak].max():.1f} | {slope:+.2f} "
            f"| {100 * ratio:.1f}% | {100 * shares.mean():+.1f}% "
            f"| {100 * np.percentile(shares, 95):.1f}% |"
        )
    lines += ["", "| stack | margin | evidence |", "|---|---|---|"]
    for stack, margin in shipped_margins(simulator).items():
        lines.append(f"| {stack} | {100 * margin.value:.1f}% | {margin.source} |")
    return "\n".join(lines + _shared_fields(misses))


FIELDS = ("tp", "pp", "micro_batch", "recompute")


def _shared_fields(misses: list[tuple[str, Layout, float]]) -> list[str]:
    """The table of the docstring's last sentence."""
    jobs: dict[str, list[tuple[Layout, float]]] = defaultdict(list)
    for scenario, layout, miss in misses:
        jobs[scenario].append((layout, miss))
    lines = [
        "",
        "| field | layouts | RMS less the job's other layouts | less those of the same field |",
        "|---|---|---|---|",
    ]
    for field in FIELDS:
        by_job, by_field = [], []
        for members in (m for m in jobs.values() if len(m) >= 3):
            for i, (layout, miss) in enumerate(members):
                others = [m for j, (_, m) in enumerate(members) if j != i]
                alike = [
                    m
                    for j, (other, m) in enumerate(members)
                    if j != i and getattr(other, field) == getattr(layout, field)
                ]
                if alike:
                    by_job.append(miss - np.mean(others))
                    by_field.append(miss - np.mean(alike))
        rms = [float(np.sqrt(np.mean(np.square(e)))) for e in (by_job, by_field)]
        lines.append(f"| {field} | {len(by_job)} | {rms[0]:.3f} | {rms[1]:.3f} |")
    return lines


def main() -> None:
    table_per_simulator(__doc__.splitlines()[0], "memory_misses", _table)


if __name__ == "__main__":
    main()
