"""One search, end to end: specs -> space -> Optuna study -> MLflow record -> report."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
import pandas as pd
from omegaconf import OmegaConf

from autotune.cli import emit_json
from autotune.config import AutotuneConfig
from autotune.config import fixed_layout_values
from autotune.launch import layout_flags
from autotune.report import breakdown_table
from autotune.report import launch_text
from autotune.report import layout_row
from autotune.report import layout_table
from autotune.search._plots import search_figures
from autotune.search._space import build_space
from autotune.search._study import SAMPLERS
from autotune.search._study import Evaluator
from autotune.search._study import SearchResult
from autotune.search._study import exhaustive_best
from autotune.search._study import run_search
from autotune.tracking import TrackedRun
from autotune.tracking import child_runs
from autotune.tracking import tracked_run
from catalog import job_from_config
from simulators import Layout
from simulators import Prediction
from simulators import UserError
from simulators.layout import LAYOUT_FIELDS

__all__ = ["run_search_job"]

log = logging.getLogger("autotune")


def _progress(every: int) -> Callable[[int, int, optuna.Study], None]:
    """Log the best feasible step time every ``every`` trials (stderr)."""

    def report(done: int, total: int, study: optuna.Study) -> None:
        if done % every and done != total:
            return
        feasible = [
            t
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if all(c <= 0 for c in t.constraints.values())
        ]
        best = min((t.values[0] for t in feasible), default=None)
        shown = f"{best:.3f} s" if best is not None else "none fits yet"
        log.info(f"  trial {done:>5}/{total}  best step time {shown}")

    return report


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What a finished search found: its best layouts and the exhaustive optimum, if any."""

    result: SearchResult
    top: list[tuple[Layout, Prediction]]
    exhaustive: tuple[Layout, Prediction] | None
    simulations: int

    @property
    def best_layout(self) -> Layout:
        return self.top[0][0]

    @property
    def best(self) -> Prediction:
        return self.top[0][1]

    @property
    def gap(self) -> float | None:
        """How much slower the search's best is than the exhaustive optimum (0.01 = 1%)."""
        if self.exhaustive is None:
            return None
        return self.best.step_time_s / self.exhaustive[1].step_time_s - 1


def run_search_job(config: AutotuneConfig) -> None:
    """Search, record in MLflow, and print the table (or the JSON object) of ``config``."""
    started = time.perf_counter()
    job = job_from_config(config)
    model, cluster, train, simulator = job.model, job.cluster, job.train, job.simulator
    search = config.search
    if search.sampler not in SAMPLERS:
        raise UserError(f"unknown sampler {search.sampler!r}; available: {', '.join(SAMPLERS)}")
    space = build_space(model, cluster, train, search, fixed_layout_values(config.parallel))
    evaluate = Evaluator(simulator, model, cluster, train)
    log.info(
        f"{model.name} on {cluster.name} ({cluster.num_nodes} x {cluster.devices_per_node} = "
        f"{cluster.num_devices} devices), seq {train.seq_len}, global batch "
        f"{train.global_batch_size}: {space.size} valid layouts; {simulator.name} simulator, "
        f"{search.sampler} sampler"
    )
    study_name = search.study_name or (
        f"{model.name}-{cluster.name}-{cluster.num_nodes}n-{simulator.name}-{search.sampler}"
    )
    with tracked_run(config.tracking, run_name=study_name) as run:
        result = run_search(
            space,
            evaluate,
            sampler=search.sampler,
            n_trials=search.n_trials,
            seed=search.seed,
            storage=search.storage,
            study_name=study_name,
            polish_fraction=search.polish,
            progress=_progress(max(1, search.n_trials // 10)),
        )
        ranked = result.ranked()
        if not ranked:
            raise UserError("the search evaluated no valid layout; raise search.n_trials")
        exhaustive = (
            exhaustive_best(space, evaluate) if space.size <= search.exhaustive_limit else None
        )
        outcome = _Outcome(result, ranked[: search.top_k], exhaustive, evaluate.simulations)
        if run is not None:
            _record(run, config, evaluate, space.size, outcome)
    elapsed = time.perf_counter() - started
    if not outcome.best.fits:
        log.warning("warning: no evaluated layout fits in memory; the table shows the closest")
    if config.output == "json":
        emit_json(_json_payload(outcome, evaluate, elapsed, run.run_id if run else None))
        return
    _print_report(outcome, evaluate, elapsed)
    if run is not None:
        print(f"\nMLflow run {run.run_id}: mlflow ui --backend-store-uri {config.tracking.uri}")


def _record(
    run: TrackedRun, config: AutotuneConfig, job: Evaluator, n_valid: int, outcome: _Outcome
) -> None:
    """The parent run's params, metrics and artifacts, and one child run per trial."""
    model, cluster, train = job.model, job.cluster, job.train
    best_layout, best = outcome.best_layout, outcome.best
    run.params(
        {
            "model": model.name,
            "cluster": cluster.name,
            "num_nodes": cluster.num_nodes,
            "world_size": cluster.num_devices,
            "simulator": job.simulator.name,
            "sampler": config.search.sampler,
            "n_trials": config.search.n_trials,
            "seed": config.search.seed,
            "seq_len": train.seq_len,
            "global_batch_size": train.global_batch_size,
            "best_layout": best_layout.describe(),
        }
    )
    metrics = {
        "best_step_time_s": best.step_time_s,
        "best_tokens_per_s_per_device": best.tokens_per_s_per_device,
        "best_mfu": best.mfu,
        "best_memory_gib": best.memory_gib,
        "n_valid_layouts": n_valid,
        "search_s": outcome.result.elapsed_s,
    }
    if outcome.exhaustive is not None and outcome.gap is not None:
        metrics["exhaustive_best_step_time_s"] = outcome.exhaustive[1].step_time_s
        metrics["gap_to_exhaustive"] = outcome.gap
    run.metrics(metrics)
    trials = pd.DataFrame(
        [{"trial": n, **layout_row(lay, pred)} for n, lay, pred in outcome.result.evaluated]
    )
    run.text("config.yaml", OmegaConf.to_yaml(OmegaConf.structured(config)))
    run.table("trials.csv", trials)
    run.table("top_k.csv", pd.DataFrame([layout_row(lay, pred) for lay, pred in outcome.top]))
    run.text("launch_flags.txt", launch_text(model, cluster, train, best_layout))
    for name, figure in search_figures(outcome.result.study, trials).items():
        run.figure(name, figure)
    child_runs(run, trials.to_dict("records"), ("trial", *LAYOUT_FIELDS))


def _json_payload(
    outcome: _Outcome, job: Evaluator, elapsed: float, run_id: str | None
) -> dict[str, Any]:
    best_layout = outcome.best_layout
    payload: dict[str, Any] = {
        "best": best_layout.as_dict(),
        "prediction": outcome.best.as_dict(),
        "world_size": job.cluster.num_devices,
        "n_trials": len(outcome.result.study.trials),
        "n_simulations": outcome.simulations,
        "elapsed_s": elapsed,
        "mlflow_run_id": run_id,
        "top_k": [
            {"layout": lay.as_dict(), "prediction": pred.as_dict()} for lay, pred in outcome.top
        ],
        "launch_flags": dataclasses.asdict(
            layout_flags(job.model, job.cluster, job.train, best_layout)
        ),
    }
    if outcome.exhaustive is not None:
        payload["exhaustive_best"] = {
            "layout": outcome.exhaustive[0].as_dict(),
            "prediction": outcome.exhaustive[1].as_dict(),
            "gap": outcome.gap,
        }
    return payload


def _print_report(outcome: _Outcome, job: Evaluator, elapsed: float) -> None:
    top = outcome.top
    trials = len(outcome.result.study.trials)
    print(f"\nTop {len(top)} layouts ({trials} trials, {elapsed:.1f} s):")
    print(layout_table(top))
    print("\nTime breakdown per step (seconds):")
    print(breakdown_table(top))
    if outcome.exhaustive is not None and outcome.gap is not None:
        optimum_layout, optimum = outcome.exhaustive
        print(
            f"\nExhaustive optimum of the same simulator: {optimum.step_time_s:.3f} s "
            f"({optimum_layout.describe()}); the search's best is {100 * outcome.gap:.2f}% slower."
        )
    print(f"\nLaunch flags of the best layout ({outcome.best_layout.describe()}):")
    print(launch_text(job.model, job.cluster, job.train, outcome.best_layout))
