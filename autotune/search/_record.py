"""The MLflow record of a search: a run that reads well in the MLflow UI.

One run per search: tags to filter and compare searches (model, cluster, simulator, mode,
protocol), a Markdown description (the job, the best layout, the top layouts, where the time
goes, the memory margin, the launch flags), the evaluated layouts as a table the UI renders,
the search's progress as a metric history, Optuna's plots, and one child run per top layout.
The chosen layout (the answer) is marked throughout: the tag ``chosen_layout``, a ``chosen``
column in the tables, the tag ``chosen=true`` on its child run, a star on the plots. A
sampler's gap to the exhaustive optimum is the metric ``sampler_gap_pct`` when it is known,
and the tag ``sampler_gap`` says it or why it is not.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from autotune.catalog import PricedJob
from autotune.config import AutotuneConfig
from autotune.config import config_yaml
from autotune.report import breakdown_table
from autotune.report import launch_text
from autotune.report import layout_row
from autotune.report import layout_table
from autotune.search._outcome import Outcome
from autotune.search._outcome import Timings
from autotune.search._plots import search_page
from autotune.simulators import LAYOUT_FIELDS
from autotune.simulators import Layout
from autotune.simulators import Prediction
from autotune.tracking import Recorded
from autotune.tracking import TrackedRun
from autotune.tracking import record

__all__ = ["UI_ROWS", "record_search"]

# Rows of the layouts table the MLflow UI renders (a 1,024-GPU search prices ~100,000 layouts,
# a table the browser cannot open); the whole list goes to layouts_all.csv.gz.
UI_ROWS = 1000
_HEADLINE = ("step_time_s", "tokens_per_s_per_device", "mfu", "memory_gib", "fits")


def record_search(
    config: AutotuneConfig, priced: PricedJob, outcome: Outcome, timings: Timings
) -> Recorded:
    """Record the search (status KILLED when a signal stopped it)."""
    job = priced.job
    tags = {
        "autotune.command": "search",
        "autotune.protocol": "search",
        "model": job.model.name,
        "cluster": job.cluster.name,
        "framework": job.train.framework.name,
        "framework_release": job.train.framework.release,
        "simulator": priced.simulator.name,
        "mode": outcome.mode,
        "chosen_layout": outcome.best_layout.describe(),
    }
    if outcome.gap is not None:
        tags["sampler_gap"] = outcome.gap.text().removeprefix("Sampler gap: ")

    def fill(run: TrackedRun) -> None:
        _fill(run, config, priced, outcome, timings)

    return record(
        config.tracking,
        f"{job.model.name} on {job.cluster.num_devices} x {job.cluster.name}",
        fill,
        tags=tags,
        description=_description(config, priced, outcome),
        status="KILLED" if outcome.stopped else "FINISHED",
    )


def _fill(
    run: TrackedRun, config: AutotuneConfig, priced: PricedJob, outcome: Outcome, timings: Timings
) -> None:
    best = outcome.best
    run.params(_job_params(priced, outcome))
    run.metrics(
        {
            "best_step_time_s": best.step_time_s,
            "best_tokens_per_s_per_device": best.tokens_per_s_per_device,
            "best_mfu": best.mfu,
            "best_memory_gib": best.memory_gib,
            "memory_headroom_gib": best.device_memory_gib - best.memory_with_margin_gib,
            "valid_layouts": outcome.valid,
            "evaluated_layouts": len(outcome.ranked),
            "search_s": timings.search_s,
            **_gap_metrics(outcome),
        }
    )
    table = layouts_frame(outcome)
    run.table("layouts.csv", table.head(UI_ROWS), ui=True)
    if len(table) > UI_ROWS:
        run.table("layouts_all.csv.gz", table)
    run.table("top_k.csv", table.head(config.search.top_k))
    if outcome.mode == "nsga2":  # step time against memory, the layouts that fit
        run.table("pareto_front.csv", _marked(outcome, outcome.pareto()), ui=True)
    run.text("config.yaml", config_yaml(config))
    launch = launch_text(priced.job, outcome.best_layout)
    run.text("launch_flags.txt", launch)
    if outcome.launch_files and config.launch_dir is not None:  # those files, nothing else
        files = [Path(f) for f in outcome.launch_files]
        run.files(files, "launch", root=Path(config.launch_dir))
        run.text("launch.md", launch_page(files, Path(config.launch_dir)))
    _progress_history(run, outcome)
    if not outcome.stopped:  # a stopped search exits within seconds: no plots (seconds each)
        notes = [outcome.gap.text()] if outcome.gap is not None else []
        chosen = outcome.best_layout.describe()
        run.html("plots.html", search_page(outcome.study, table, chosen, notes))
    _top_children(run, config, outcome)


def _job_params(priced: PricedJob, outcome: Outcome) -> dict[str, object]:
    """The search's parameters in MLflow: the job, the simulator and the layout chosen."""
    job = priced.job
    return {
        "model": job.model.name,
        "cluster": job.cluster.name,
        "num_nodes": job.cluster.num_nodes,
        "world_size": job.cluster.num_devices,
        "framework": job.train.framework.name,
        "framework_release": job.train.framework.release,
        "precision": job.train.precision,
        "simulator": priced.simulator.name,
        "mode": outcome.mode,
        "seq_len": job.train.seq_len,
        "global_batch_size": job.train.global_batch_size,
        "best_layout": outcome.best_layout.describe(),
    }


def _top_children(run: TrackedRun, config: AutotuneConfig, outcome: Outcome) -> None:
    """One child run per layout of the top k, the chosen one tagged ``chosen``."""
    # MLflow lists the newest run first: create the worst child first, a millisecond apart.
    top = list(enumerate(outcome.top(config.search.top_k), start=1))
    now = int(time.time() * 1000)
    for offset, (rank, (layout, prediction)) in enumerate(reversed(top)):
        row = layout_row(layout, prediction)
        run.child(
            f"#{rank} {layout.describe()}",
            {k: row[k] for k in LAYOUT_FIELDS},
            {k: v for k, v in row.items() if k not in LAYOUT_FIELDS},
            start_ms=now + offset,
            tags={"chosen": "true"} if rank == 1 else {},
        )


def _gap_metrics(outcome: Outcome) -> dict[str, float]:
    """``sampler_best_step_time_s`` of a sampler's search, and ``sampler_gap_pct`` when the
    gap is known (an unknown gap is no metric: the run's ``sampler_gap`` tag says why)."""
    gap = outcome.gap
    if gap is None:
        return {}
    metrics = {"sampler_best_step_time_s": gap.found[1].step_time_s}
    if gap.pct is not None:
        metrics["sampler_gap_pct"] = gap.pct
    return metrics


def _marked(outcome: Outcome, pairs: list[tuple[Layout, Prediction]]) -> pd.DataFrame:
    """``pairs`` as rows, with ``chosen`` true on the chosen layout's (the answer)."""
    table = pd.DataFrame([layout_row(lay, pred) for lay, pred in pairs])
    table.insert(0, "chosen", [lay == outcome.best_layout for lay, _ in pairs])
    return table


def layouts_frame(outcome: Outcome) -> pd.DataFrame:
    """One row per distinct layout evaluated, ranked (``layouts.csv``, the plots): the rank,
    ``chosen`` (true on the answer's row, the layout of ``launch/rank-1``) and the headline
    figures first, then the layout, then the time breakdown."""
    table = _marked(outcome, outcome.ranked)
    table.insert(0, "rank", range(1, len(table) + 1))
    first = ["rank", "chosen", *_HEADLINE]
    return table[first + [c for c in table.columns if c not in first]]


def _progress_history(run: TrackedRun, outcome: Outcome) -> None:
    """The best step time known after each evaluated layout (fits only), by step."""
    best = float("inf")
    history = []
    for step, (_, prediction) in enumerate(outcome.evaluated, start=1):
        if prediction.fits and prediction.step_time_s < best:
            best = prediction.step_time_s
            history.append((step, best))
    if history:
        run.history("best_step_time_s_by_layout", history)


def _description(config: AutotuneConfig, priced: PricedJob, outcome: Outcome) -> str:
    job = priced.job
    best = outcome.best
    top = outcome.top(config.search.top_k)
    return "\n".join(
        [
            f"**{job.model.name}** on {job.cluster.num_nodes} x {job.cluster.devices_per_node} "
            f"{job.cluster.device.name} ({job.train.describe()}), "
            f"sequence {job.train.seq_len}, global batch {job.train.global_batch_size}; "
            f"{priced.simulator.name} simulator, {outcome.mode} over {outcome.valid} valid "
            "layouts.",
            "",
            f"**Best layout:** `{outcome.best_layout.describe()}`: "
            f"{best.step_time_s:.3f} s per step, {best.tokens_per_s_per_device:.0f} tokens/s per "
            f"device, MFU {100 * best.mfu:.1f}%, {_memory_text(best)}. Marked as chosen: "
            "the `chosen` column of the tables, the star of `plots.html`, the tag "
            "`chosen_layout`.",
            "",
            *([outcome.gap.text() + ".", ""] if outcome.gap is not None else []),
            "```",
            layout_table(top),
            "```",
            "",
            "Where the time goes (seconds per step):",
            "",
            "```",
            breakdown_table(top),
            "```",
            "",
            "Launch flags of the best layout:",
            "",
            "```",
            launch_text(job, outcome.best_layout),
            "```",
        ]
    )


def _memory_text(prediction: Prediction) -> str:
    """``53.3 GiB predicted (63.5 with the 19.2% margin) of 64 GiB``."""
    margin = prediction.memory_margin
    with_margin = (
        f" ({prediction.memory_with_margin_gib:.1f} with the {100 * margin:.1f}% margin)"
        if margin
        else ""
    )
    return (
        f"{prediction.memory_gib:.1f} GiB predicted{with_margin} of "
        f"{prediction.device_memory_gib:.4g} GiB"
    )


def launch_page(files: list[Path], root: Path) -> str:
    """The launch files as one Markdown page (the MLflow UI previews ``.md``, not ``.sh``)."""
    fences = {".sh": "bash", ".py": "python", ".json": "json", ".yaml": "yaml", ".toml": "toml"}
    sections = ["# Launch files of the best layouts\n"]
    for path in files:
        text = path.read_text()
        fence = "````" if "```" in text else "```"
        sections.append(
            f"## {path.relative_to(root)}\n\n{fence}{fences.get(path.suffix, '')}\n"
            f"{text.rstrip()}\n{fence}\n"
        )
    return "\n".join(sections)
