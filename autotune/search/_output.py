"""What a search shows: the terminal report, or the one JSON object of ``output=json``."""

from __future__ import annotations

import dataclasses
import logging
import textwrap
from pathlib import Path
from typing import Any

from autotune.catalog import PricedJob
from autotune.cli import emit_json
from autotune.config import AutotuneConfig
from autotune.launch import layout_flags
from autotune.progress import duration
from autotune.report import breakdown_table
from autotune.report import launch_text
from autotune.report import layout_table
from autotune.search._outcome import Outcome
from autotune.search._outcome import SamplerGap
from autotune.search._outcome import Timings
from autotune.simulators import Layout
from autotune.simulators import Prediction
from autotune.tracking import Recorded

__all__ = ["emit_outcome", "json_payload"]

log = logging.getLogger("autotune")


def emit_outcome(
    config: AutotuneConfig,
    priced: PricedJob,
    outcome: Outcome,
    timings: Timings,
    recorded: Recorded,
    rounds: Any = None,
) -> None:
    """Print the report (or the JSON object) of a finished or stopped search; ``rounds``: the
    probe loop's round (autotune/calibrate/_loop.py), shown last."""
    if not outcome.best.fits:
        log.warning("warning: no evaluated layout fits in memory; the table shows the closest")
    run_id = None if recorded.problem else recorded.run_id  # a run that failed is no record
    if recorded.problem:
        part = f" (run {recorded.run_id} holds only part of it)" if recorded.run_id else ""
        log.warning(f"warning: the search was not recorded in MLflow: {recorded.problem}{part}")
    if config.output == "json":
        payload = json_payload(config, priced, outcome, timings, run_id)
        if rounds is not None:
            payload["probe_round"] = rounds.payload()
        emit_json(payload)
        return
    top = outcome.top(config.search.top_k)
    print("\n" + textwrap.fill(_headline(outcome, len(top), timings), width=119))
    if outcome.gap is not None:
        print(outcome.gap.text())
    print(_calibration_text(priced))
    print(layout_table(top))
    print("\nTime breakdown per step (seconds):")
    print(breakdown_table(top))
    if outcome.rerank is not None:
        print(_rerank_text(outcome))
    if outcome.mode == "nsga2":
        print("\nPareto front, step time against memory (fits only):")
        print(layout_table(outcome.pareto()))
    if outcome.stopped:
        print("\nThe search was stopped: the table shows the best layouts found so far.")
    print(f"\nLaunch flags of the best layout ({outcome.best_layout.describe()}):")
    print(launch_text(priced.job, outcome.best_layout))
    if outcome.launch_files:
        folders = sorted({str(Path(f).parent) for f in outcome.launch_files})
        best = [f for f in outcome.launch_files if Path(f).parent == Path(folders[0])]
        print(
            f"\nLaunch files of the best {len(folders)} layouts: {folders[0]}/ ... {folders[-1]}/"
        )
        print(f"  {', '.join(best)}: set the data paths at the top, run on every node")
    if outcome.config_file is not None:
        print(f"\nConfig of this search: {outcome.config_file}")
    if run_id is not None:
        print(f"\nMLflow run {run_id}: mlflow ui --backend-store-uri {config.tracking.uri}")
    if rounds is not None:
        print(rounds.text)


def _calibration_text(priced: PricedJob) -> str:
    """Which calibration priced the layouts, and the memory margin a layout must keep."""
    calibration, margin = priced.simulator.calibration, priced.simulator.memory_margin
    name = calibration.name if calibration is not None and calibration.factors else None
    return (
        f"{priced.simulator.name} simulator, "
        + (f"calibration {name!r}" if name else "uncalibrated")
        + f"; fits = predicted peak memory x {1 + margin:.3f} (+margin) within the device's "
        f"{priced.job.cluster.device.memory_gib:.4g} GiB"
    )


def _headline(outcome: Outcome, shown: int, timings: Timings) -> str:
    if outcome.mode == "grid":
        how = "grid: every layout priced, the simulator's optimum first"
    elif outcome.mode == "screen" and outcome.rerank is not None:
        how = (
            f"screen: every layout screened, the best {len(outcome.rerank.screened)} "
            f"priced by the {outcome.rerank.simulator} simulator"
        )
    elif outcome.mode == "screen":
        how = "screen stopped before the best layouts were priced again"
    elif outcome.exhaustive:
        how = f"{outcome.mode}, {outcome.trials} trials; every layout also priced"
    else:
        how = f"{outcome.mode}, {outcome.trials} trials; not every layout priced"
    spent = (
        f"search {duration(timings.search_s)}, MLflow {duration(timings.record_s)}, "
        f"total {duration(timings.total_s)}"
    )
    return f"Top {shown} of {outcome.valid} valid layouts ({how}; {spent}):"


def _rerank_text(outcome: Outcome) -> str:
    assert outcome.rerank is not None
    rerank = outcome.rerank
    moves = rerank.moves()
    head = (
        f"\nRe-ranked by the {rerank.simulator} simulator: the best {len(rerank.screened)} "
        "layouts of the screening"
    )
    if not moves:
        return head + ": the two agree on their order."
    lines = [head + f"; {len(moves)} changed place:"]
    screen, finer = dict(rerank.screened), dict(rerank.reranked)
    for layout, before, after in moves[:10]:
        lines.append(
            f"  #{before} -> #{after}  {layout.describe()}  screening "
            f"{screen[layout].step_time_s:.3f} s, {rerank.simulator} "
            f"{finer[layout].step_time_s:.3f} s"
        )
    return "\n".join(lines)


def _entry(layout: Layout, prediction: Prediction) -> dict[str, Any]:
    return {"layout": layout.as_dict(), "prediction": prediction.as_dict()}


def _gap_payload(gap: SamplerGap) -> dict[str, Any]:
    """The sampler's gap: ``gap_pct`` null and ``unknown`` saying why when it is not known."""
    return {
        "sampler": gap.sampler,
        "gap_pct": gap.pct,
        "unknown": gap.unknown,
        "sampler_best": _entry(*gap.found),
        "optimum": None if gap.optimum is None else _entry(*gap.optimum),
    }


def json_payload(
    config: AutotuneConfig,
    priced: PricedJob,
    outcome: Outcome,
    timings: Timings,
    run_id: str | None,
) -> dict[str, Any]:
    """The search as one JSON-ready object (the best layout first)."""
    job = priced.job
    best_layout = outcome.best_layout
    payload: dict[str, Any] = {
        "best": best_layout.as_dict(),
        "prediction": outcome.best.as_dict(),
        "world_size": job.cluster.num_devices,
        "framework": job.train.framework.name,
        "mode": outcome.mode,
        "valid_layouts": outcome.valid,
        "exhaustive": outcome.exhaustive,
        "n_trials": outcome.trials,
        "stopped": outcome.stopped,
        "seconds": {
            "search": timings.search_s,
            "mlflow": timings.record_s,
            "total": timings.total_s,
        },
        "mlflow_run_id": run_id,
        "memory_margin": priced.simulator.memory_margin,
        "top_k": [_entry(lay, pred) for lay, pred in outcome.top(config.search.top_k)],
        "launch_flags": dataclasses.asdict(layout_flags(job, best_layout)),
        "launch_files": list(outcome.launch_files),
        "config_file": outcome.config_file,
        "sampler_gap": None if outcome.gap is None else _gap_payload(outcome.gap),
    }
    if outcome.mode == "nsga2":
        payload["pareto_front"] = [_entry(lay, pred) for lay, pred in outcome.pareto()]
    if outcome.rerank is not None:
        payload["rerank"] = {
            "simulator": outcome.rerank.simulator,
            "moves": [
                {"layout": lay.as_dict(), "screening_rank": a, "rank": b}
                for lay, a, b in outcome.rerank.moves()
            ],
        }
    return payload
