"""One search, end to end: specs -> space -> Optuna study -> MLflow record -> report."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import optuna
import pandas as pd
from omegaconf import DictConfig
from omegaconf import OmegaConf

from autotune.cli import emit_json
from autotune.cli import load_job
from autotune.cli import tracking_config
from autotune.config import fixed_layout_values
from autotune.launch_flags import megatron_flags
from autotune.launch_flags import mindspeed_flags
from autotune.plots import search_figures
from autotune.report import breakdown_table
from autotune.report import launch_text
from autotune.report import layout_row
from autotune.report import layout_table
from autotune.search import SAMPLERS
from autotune.search import Evaluator
from autotune.search import SearchResult
from autotune.search import exhaustive_best
from autotune.search import run_search
from autotune.space import SEARCHED
from autotune.space import build_space
from autotune.tracking import child_runs
from autotune.tracking import tracked_run
from simulators import LAYOUT_FIELDS
from simulators import Layout
from simulators import Prediction
from simulators import UserError

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


def run_search_job(cfg: DictConfig) -> None:
    started = time.perf_counter()
    model, cluster, train, simulator = load_job(cfg)
    search = cfg.search
    if search.sampler not in SAMPLERS:
        raise UserError(f"unknown sampler {search.sampler!r}; available: {', '.join(SAMPLERS)}")
    fixed = fixed_layout_values(cfg)
    space = build_space(model, cluster, train, search, fixed)
    evaluate = Evaluator(simulator, model, cluster, train)
    world = cluster.num_devices
    log.info(
        f"{model.name} on {cluster.name} ({cluster.num_nodes} x {cluster.devices_per_node} = "
        f"{world} devices), seq {train.seq_len}, global batch {train.global_batch_size}: "
        f"{space.size} valid layouts; {simulator.name} simulator, {search.sampler} sampler"
    )
    study_name = search.study_name or (
        f"{model.name}-{cluster.name}-{cluster.num_nodes}n-{simulator.name}-{search.sampler}"
    )
    with tracked_run(tracking_config(cfg, "autotune"), run_name=study_name) as run:
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
        exhaustive = (
            exhaustive_best(space, evaluate) if space.size <= search.exhaustive_limit else None
        )
        ranked = result.ranked()
        if not ranked:
            raise UserError("the search evaluated no valid layout; raise search.n_trials")
        top = ranked[: search.top_k]
        best_layout, best = top[0]
        trials = _trials_frame(result)
        summary = _summary(best, exhaustive)
        if run is not None:
            run.params(
                {
                    "model": model.name,
                    "cluster": cluster.name,
                    "num_nodes": cluster.num_nodes,
                    "world_size": world,
                    "simulator": simulator.name,
                    "sampler": search.sampler,
                    "n_trials": search.n_trials,
                    "seed": search.seed,
                    "seq_len": train.seq_len,
                    "global_batch_size": train.global_batch_size,
                    "best_layout": best_layout.describe(),
                }
            )
            run.metrics({**summary, "n_valid_layouts": space.size, "search_s": result.elapsed_s})
            run.text("config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
            run.table("trials.csv", trials)
            run.table("top_k.csv", pd.DataFrame([layout_row(lay, pred) for lay, pred in top]))
            run.text("launch_flags.txt", launch_text(model, train, best_layout))
            for name, figure in search_figures(result.study, trials).items():
                run.figure(name, figure)
            child_runs(run, trials.to_dict("records"), ("trial", *_param_columns()))
    elapsed = time.perf_counter() - started
    if not best.fits:
        log.warning("warning: no evaluated layout fits in memory; the table shows the closest")
    if cfg.output == "json":
        emit_json(
            _json_payload(
                best_layout,
                best,
                top,
                world,
                result,
                elapsed,
                run.run_id if run else None,
                exhaustive,
                evaluate.simulations,
                model,
                train,
            )
        )
        return
    _print_report(model, train, top, exhaustive, result, elapsed, run.run_id if run else None)


def _param_columns() -> tuple[str, ...]:
    return ("dp", *SEARCHED, "sequence_parallel")


def _trials_frame(result: SearchResult) -> pd.DataFrame:
    rows = [{"trial": n, **layout_row(lay, pred)} for n, lay, pred in result.evaluated]
    return pd.DataFrame(rows)


def _summary(best: Prediction, exhaustive: tuple[Layout, Prediction] | None) -> dict[str, float]:
    summary = {
        "best_step_time_s": best.step_time_s,
        "best_tokens_per_s_per_device": best.tokens_per_s_per_device,
        "best_mfu": best.mfu,
        "best_memory_gib": best.memory_gib,
    }
    if exhaustive is not None:
        summary["exhaustive_best_step_time_s"] = exhaustive[1].step_time_s
        summary["gap_to_exhaustive"] = best.step_time_s / exhaustive[1].step_time_s - 1
    return summary


def _layout_json(layout: Layout) -> dict[str, Any]:
    return {k: getattr(layout, k) for k in LAYOUT_FIELDS}


def _json_payload(
    best_layout: Layout,
    best: Prediction,
    top: Sequence[tuple[Layout, Prediction]],
    world: int,
    result: SearchResult,
    elapsed: float,
    run_id: str | None,
    exhaustive: tuple[Layout, Prediction] | None,
    simulations: int,
    model: Any,
    train: Any,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "best": _layout_json(best_layout),
        "prediction": _prediction_json(best),
        "world_size": world,
        "n_trials": len(result.study.trials),
        "n_simulations": simulations,
        "elapsed_s": elapsed,
        "mlflow_run_id": run_id,
        "top_k": [
            {"layout": _layout_json(lay), "prediction": _prediction_json(pred)}
            for lay, pred in top
        ],
        "launch_flags": {
            "megatron": megatron_flags(model, train, best_layout),
            "mindspeed": mindspeed_flags(model, train, best_layout),
        },
    }
    if exhaustive is not None:
        payload["exhaustive_best"] = {
            "layout": _layout_json(exhaustive[0]),
            "prediction": _prediction_json(exhaustive[1]),
            "gap": best.step_time_s / exhaustive[1].step_time_s - 1,
        }
    return payload


def _prediction_json(p: Prediction) -> dict[str, Any]:
    return {
        "step_time_s": p.step_time_s,
        "tokens_per_s_per_device": p.tokens_per_s_per_device,
        "mfu": p.mfu,
        "memory_gib": p.memory_gib,
        "memory_capacity_gib": p.memory_capacity_gib,
        "fits": p.fits,
        "breakdown": dict(p.breakdown),
    }


def _print_report(
    model: Any,
    train: Any,
    top: Sequence[tuple[Layout, Prediction]],
    exhaustive: tuple[Layout, Prediction] | None,
    result: SearchResult,
    elapsed: float,
    run_id: str | None,
) -> None:
    best_layout, best = top[0]
    print(f"\nTop {len(top)} layouts ({len(result.study.trials)} trials, {elapsed:.1f} s):")
    print(layout_table(top))
    print("\nTime breakdown per step (seconds):")
    print(breakdown_table(top))
    if exhaustive is not None:
        gap = best.step_time_s / exhaustive[1].step_time_s - 1
        print(
            f"\nExhaustive optimum of the same simulator: {exhaustive[1].step_time_s:.3f} s "
            f"({exhaustive[0].describe()}); the search's best is {100 * gap:.2f}% slower."
        )
    print(f"\nLaunch flags of the best layout ({best_layout.describe()}):")
    print(launch_text(model, train, best_layout))
    if run_id:
        print(f"\nMLflow run {run_id}: mlflow ui --backend-store-uri sqlite:///mlruns/mlflow.db")
