"""Expert agreement: search each hand-tuned job and compare our pick with the shipped config.

    python benchmarks/bench_expert_agreement.py [--sources nemo dgxc ...] [--refresh]

The sources ``nemo``, ``megatron_bridge``, ``dgxc`` and ``mindspeed_2026`` publish hand-tuned
configs. A job is the model architecture, cluster (and its overrides), devices, framework,
precision, sequence length and global batch; where a source lists several measured configs of
one job (releases), the fastest measured one is the shipped config. Each job is searched with
the default search settings (``conf/search/default.yaml``: the job's own framework and
precision, the derived memory margin) and the analytical simulator; every valid layout is
priced (a random sample of ``--sample`` layouts plus the shipped one when the space is larger)
and ranked as the search ranks (fits first, then step time).

When the shipped layout uses a value outside the search's choices (a micro-batch, recompute
mode, or a TP/CP/VPP above the default limits), that job's candidate lists are extended so it
is included; a shipped layout that the space's rules refuse is added as it is and counted
"outside the rules". Reported per source and overall: how often the shipped config is our top 1
and top 5, its rank percentile, the predicted speedup of our pick over it (predicted shipped
step time / predicted pick step time) and how often we predict that it does not fit (a false
OOM: every shipped config ran). Writes benchmark_results/expert_agreement.md (``--out DIR``
elsewhere; ``--refresh`` overwrites the committed one in benchmarks/results/).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
import time
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from _results import add_output_options
from _results import write_result

from autotune import catalog
from autotune import dataset
from autotune.calibrate import calibrated_job
from autotune.config import AutotuneConfig
from autotune.config import SearchConfig
from autotune.config import load_config
from autotune.dataset import MODEL_FIELDS
from autotune.dataset import records
from autotune.search import Evaluator
from autotune.search import build_space
from autotune.search import ranked
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import LayoutError

SOURCES = ("nemo", "megatron_bridge", "dgxc", "mindspeed_2026")
SAMPLE = 5000  # layouts priced (plus the shipped one) when the space is larger
_CLUSTER = ("cluster", "devices_per_node", "device_memory_gib", "intra_node_gbps")
_JOB = (
    *MODEL_FIELDS,
    *_CLUSTER,
    "inter_node_gbps",
    "num_devices",
    "framework",
    "precision",
    "seq_len",
    "global_batch_size",
)


@dataclass(frozen=True, slots=True)
class Agreement:
    """One job: where the shipped config ranks among the priced layouts, and our pick."""

    source: str
    job: str
    shipped: str
    pick: str
    rank: int  # of the shipped config, 1 = our pick
    priced: int  # layouts ranked (the space, or its sample, with the shipped one)
    valid: int  # valid layouts in the space
    sampled: bool
    extended: tuple[str, ...]  # candidate lists widened to include the shipped layout
    outside_rules: bool  # the space's rules refuse the shipped layout (added as it is)
    shipped_fits: bool
    over_device: bool  # predicted above the device's memory itself, not only inside the margin
    speedup: float  # predicted shipped step time / predicted pick step time

    @property
    def percentile(self) -> float:
        """The shipped config's rank as a percentile (100: our best, 0: our worst)."""
        return 100.0 if self.priced <= 1 else 100.0 * (self.priced - self.rank) / (self.priced - 1)


def jobs(table: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per job: the fastest measured config of each (status ok)."""
    rows = records(table[table["status"] == "ok"])
    best: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = (row["source"], *(row.get(name) for name in _JOB))
        if key not in best or row["step_time_s"] < best[key]["step_time_s"]:
            best[key] = row
    return list(best.values())


def _widened(search: SearchConfig, shipped: Layout) -> tuple[SearchConfig, tuple[str, ...]]:
    """``search`` with its candidate lists widened to hold the shipped layout's values."""
    changes: dict[str, Any] = {}
    if shipped.micro_batch not in search.micro_batch:
        changes["micro_batch"] = [*search.micro_batch, shipped.micro_batch]
    if shipped.recompute not in search.recompute:
        changes["recompute"] = [*search.recompute, shipped.recompute]
    if shipped.distributed_optimizer not in search.distributed_optimizer:
        changes["distributed_optimizer"] = [
            *search.distributed_optimizer,
            shipped.distributed_optimizer,
        ]
    for name, value in (
        ("max_tp", shipped.tp),
        ("max_cp", shipped.cp),
        ("max_vpp", shipped.vpp),
        ("max_etp", shipped.etp or 1),
    ):
        if value > getattr(search, name):
            changes[name] = value
    return dataclasses.replace(search, **changes), tuple(changes)


def _analytical(job: Job) -> catalog.PricedJob:
    """``job`` priced by the analytical simulator, uncalibrated."""
    return catalog.PricedJob(job=job, simulator=catalog.load_simulator("analytical"))


def agreement(
    row: dict[str, Any], search: SearchConfig, margin: float, sample: int = SAMPLE, seed: int = 0
) -> Agreement:
    """Search the job of ``row`` and place its shipped layout among the priced layouts."""
    job, shipped = dataset.row_to_specs(row)
    priced, _ = calibrated_job(_analytical(job), None, margin)
    widened, extended = _widened(search, shipped)
    try:
        layouts = list(build_space(job, widened, {}).layouts)
    except LayoutError:
        layouts = []
    valid = len(layouts)
    in_space = shipped in set(layouts)
    sampled = valid > sample
    if sampled:
        layouts = random.Random(seed).sample(layouts, sample)
    if shipped not in layouts:
        layouts.append(shipped)
    pairs = ranked(zip(layouts, Evaluator(priced).price(layouts), strict=True))
    rank = next(i for i, (lay, _) in enumerate(pairs, start=1) if lay == shipped)
    pick, best = pairs[0]
    own = pairs[rank - 1][1]
    return Agreement(
        source=str(row["source"]),
        job=(
            f"{row['model']} {job.cluster.name} x{job.cluster.num_devices} "
            f"{job.train.precision} seq {job.train.seq_len} gbs {job.train.global_batch_size}"
        ),
        shipped=shipped.describe(),
        pick=pick.describe(),
        rank=rank,
        priced=len(pairs),
        valid=valid,
        sampled=sampled,
        extended=extended,
        outside_rules=not in_space and bool(shipped.violations(job)),
        shipped_fits=own.fits,
        over_device=own.memory_gib > own.device_memory_gib,
        speedup=own.step_time_s / best.step_time_s,
    )


def default_search() -> tuple[SearchConfig, float]:
    """The default search settings and the memory margin the default search derives."""
    search = load_config(AutotuneConfig, ["tracking.enabled=false"]).search
    return search, float(search.memory_margin) if search.memory_margin is not None else -1.0


def run(
    sources: Sequence[str],
    sample: int = SAMPLE,
    limit: int | None = None,
    progress: Callable[[int, int, Agreement], None] | None = None,
) -> list[Agreement]:
    """:func:`agreement` of every job of ``sources`` (the first ``limit`` of each)."""
    search, margin = default_search()
    table = dataset.load_public(list(sources))
    todo = []
    for source in sources:
        found = jobs(table[table["source"] == source])
        todo += found[:limit] if limit is not None else found
    results = []
    for done, row in enumerate(todo, start=1):
        job_margin = margin
        if margin < 0:  # derived, as the search derives it: the margin of the job's stack
            job, _ = dataset.row_to_specs(row)
            job_margin = calibrated_job(_analytical(job), None, None)[1].value
        results.append(agreement(row, search, job_margin, sample))
        if progress is not None:
            progress(done, len(todo), results[-1])
    return results


def _summary(name: str, group: list[Agreement]) -> str:
    n = len(group)
    speedups = [a.speedup for a in group]
    quart = statistics.quantiles(speedups, n=4) if n > 1 else speedups * 3
    return (
        f"| {name} | {n} | {sum(a.rank == 1 for a in group)} ({100 * _share(group, 1):.0f}%) | "
        f"{sum(a.rank <= 5 for a in group)} ({100 * _share(group, 5):.0f}%) | "
        f"{statistics.median(a.percentile for a in group):.1f} | "
        f"{statistics.median(speedups):.2f}x | {quart[0]:.2f}x / {quart[2]:.2f}x | "
        f"{max(speedups):.2f}x | {sum(not a.shipped_fits for a in group)} "
        f"({100 * sum(not a.shipped_fits for a in group) / n:.0f}%; "
        f"{sum(a.over_device for a in group)} over the device) |"
    )


def _share(group: list[Agreement], top: int) -> float:
    return sum(a.rank <= top for a in group) / len(group)


def report(results: list[Agreement], sample: int) -> str:
    """The Markdown result: a summary table, then one table of jobs per source."""
    lines = [
        "# Expert agreement (analytical simulator, default search settings)",
        "",
        "Shipped hand-tuned config vs. our pick. Rank: of the shipped config among the priced "
        "layouts (fits first, then predicted step time); percentile: 100 = our best. Speedup: "
        "predicted shipped step time / predicted step time of our pick. False OOM: we predict "
        "the shipped config does not fit (every one of them ran); over the device: of those, the "
        "ones predicted above the device's memory itself, not only inside the memory margin.",
        "",
        "| source | jobs | top 1 | top 5 | median rank percentile | median speedup | "
        "speedup p25 / p75 | max speedup | false OOM |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    sources = list(dict.fromkeys(a.source for a in results))
    lines += [_summary(s, [a for a in results if a.source == s]) for s in sources]
    lines.append(_summary("**all**", results))
    sampled = sum(a.sampled for a in results)
    extended = sum(bool(a.extended) for a in results)
    outside = sum(a.outside_rules for a in results)
    lines += [
        "",
        f"{extended} of {len(results)} jobs had their candidate lists extended to include the "
        f"shipped layout; {outside} shipped layouts break the space's rules and were priced "
        f"beside it; {sampled} jobs were priced on a random sample of {sample} layouts plus "
        "the shipped one (the rest exhaustively).",
    ]
    for source in sources:
        lines += [
            "",
            f"## {source}",
            "",
            "| job | shipped | our pick | rank | priced | fits | speedup | notes |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for a in (a for a in results if a.source == source):
            notes = [f"extended: {', '.join(a.extended)}"] if a.extended else []
            notes += ["outside the rules"] * a.outside_rules + ["sampled"] * a.sampled
            lines.append(
                f"| {a.job} | {a.shipped} | {a.pick} | {a.rank} | {a.priced} | "
                f"{'yes' if a.shipped_fits else 'no (over the device)' if a.over_device else 'no'}"
                f" | {a.speedup:.2f}x | {'; '.join(notes)} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", nargs="+", default=list(SOURCES))
    parser.add_argument("--sample", type=int, default=SAMPLE)
    parser.add_argument("--limit", type=int, default=None, help="jobs per source at most")
    add_output_options(parser)
    args = parser.parse_args()
    started = time.perf_counter()

    def progress(done: int, total: int, a: Agreement) -> None:
        print(
            f"[{done}/{total}] {a.source}: {a.job}: rank {a.rank}/{a.priced}, "
            f"speedup {a.speedup:.2f}x ({time.perf_counter() - started:.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    results = run(args.sources, args.sample, args.limit, progress)
    write_result(args, "expert_agreement.md", report(results, args.sample))


if __name__ == "__main__":
    main()
