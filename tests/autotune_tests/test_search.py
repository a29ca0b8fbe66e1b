"""The layout search on the real catalog: space, pricing, Optuna studies, resume, rerank."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from autotune.catalog import PricedJob
from autotune.catalog import job_from_config
from autotune.catalog import priced_job_from_config
from autotune.config import AutotuneConfig
from autotune.config import TrackingConfig
from autotune.config import fixed_layout_values
from autotune.order import order_key
from autotune.search import SAMPLERS
from autotune.search import Evaluator
from autotune.search import StopFlag
from autotune.search import open_study
from autotune.search import optimize
from autotune.search import search_job
from autotune.search._outcome import Outcome
from autotune.search._outcome import ranked
from autotune.search._outcome import sampler_gap
from autotune.search._plots import memory_window
from autotune.search._plots import search_page
from autotune.search._record import layouts_frame
from autotune.search._space import build_space
from autotune.search._storage import check_storage
from autotune.search._storage import open_storage
from autotune.simulators import LayoutError
from autotune.simulators import UserError
from autotune.tracking import _create_sqlite

SMALL = ("model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1", "tracking.enabled=false")


def _job(make_cfg: Callable[..., AutotuneConfig], *overrides: str):  # noqa: ANN202
    cfg = make_cfg(*SMALL, *overrides)
    priced = priced_job_from_config(cfg)
    fixed = fixed_layout_values(cfg.parallel)
    space = build_space(priced.job, cfg.search, fixed)
    return cfg, space, Evaluator(priced), fixed


def _priced(evaluate: Evaluator) -> PricedJob:
    """The job and the simulator ``evaluate`` prices with."""
    return PricedJob(job=evaluate.job, simulator=evaluate.simulator)


def _study(space, evaluate, sampler: str, n: int, seed: int = 0, storage=None, polish=0.0):  # noqa: ANN001, ANN202
    study = open_study(storage, "t", sampler, seed, {"job": "test"})
    return optimize(study, space, evaluate, n_trials=n, polish_fraction=polish, stop=StopFlag())


def test_space_holds_only_valid_layouts(make_cfg: Callable[..., AutotuneConfig]) -> None:
    cfg, space, evaluate, _ = _job(make_cfg)
    assert space.size > 50
    for layout in space.layouts:
        assert not layout.violations(evaluate.job)
        assert layout.world_size == 8
    assert set(space.choices["tp"]) == {1, 2, 4, 8}


def test_pinned_values_restrict_the_space(make_cfg: Callable[..., AutotuneConfig]) -> None:
    _, space, _, _ = _job(make_cfg, "parallel.tp=4", "parallel.recompute=full")
    assert {lay.tp for lay in space.layouts} == {4}
    assert {lay.recompute for lay in space.layouts} == {"full"}


def test_impossible_pin_explains_itself(make_cfg: Callable[..., AutotuneConfig]) -> None:
    with pytest.raises(LayoutError, match="pp=7 does not divide num_layers=32"):
        _job(make_cfg, "parallel.pp=7", "train.framework=megatron_lm")


def test_every_proposal_maps_to_the_nearest_valid_layout(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    _, space, _, _ = _job(make_cfg)
    for layout in space.layouts[:50]:  # a valid point maps to itself
        assert space.nearest(space.values_of(layout)) == layout
    # tp8 * pp8 does not fit 8 devices: the nearest valid layout changes a degree, not a mode.
    values = {
        "tp": 8,
        "pp": 8,
        "cp": 1,
        "ep": 1,
        "etp": None,
        "vpp": 1,
        "micro_batch": 1,
        "recompute": "full",
        "distributed_optimizer": True,
        "zero_stage": None,
        "dp_replicate": 1,
        "split": "default",
    }
    moved = space.nearest(values)
    assert moved.tp * moved.pp == 8
    assert (moved.recompute, moved.distributed_optimizer) == ("full", True)


def test_grid_prices_every_layout_and_answers_the_optimum(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    cfg, space, evaluate, _ = _job(make_cfg, "search.sampler=grid")
    outcome = search_job(cfg, _priced(evaluate), StopFlag())
    assert outcome.mode == "grid" and outcome.exhaustive and not outcome.stopped
    assert {lay for lay, _ in outcome.ranked} == set(space.layouts)
    fitting = [p.step_time_s for _, p in outcome.ranked if p.fits]
    assert outcome.best.fits and outcome.best.step_time_s == min(fitting)
    assert len(outcome.study.trials) == min(cfg.search.n_trials, space.size)
    assert outcome.gap is None  # no sampler, no sampler's gap


def test_auto_picks_grid_within_the_budget_and_a_sampler_beyond(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    cfg, _, evaluate, _ = _job(make_cfg)
    assert search_job(cfg, _priced(evaluate), StopFlag()).mode == "grid"
    cfg, _, evaluate, _ = _job(make_cfg, "search.grid_budget_s=1e-9", "search.n_trials=20")
    outcome = search_job(cfg, _priced(evaluate), StopFlag())
    assert outcome.mode == "tpe" and outcome.trials == 20 and not outcome.exhaustive


def test_the_answer_is_the_best_layout_known(make_cfg: Callable[..., AutotuneConfig]) -> None:
    """A sampler's best may miss the optimum; when every layout can be priced beside the
    search, the answer (table, JSON, flags, MLflow) is the optimum all the same."""
    cfg, _, evaluate, _ = _job(make_cfg, "search.sampler=random", "search.n_trials=5")
    outcome = search_job(cfg, _priced(evaluate), StopFlag())
    grid, _, evaluate, _ = _job(make_cfg, "search.sampler=grid")
    optimum = search_job(grid, _priced(evaluate), StopFlag())
    assert outcome.exhaustive and outcome.best_layout == optimum.best_layout


def test_a_sampler_knows_its_gap_when_every_layout_is_priced_beside(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    cfg, _, evaluate, _ = _job(make_cfg, "search.sampler=tpe", "search.n_trials=20")
    outcome = search_job(cfg, _priced(evaluate), StopFlag())
    gap = outcome.gap
    assert outcome.exhaustive and gap is not None and gap.unknown is None
    # The sampler's own layouts come first in `evaluated`, the exhaustive pricing after them.
    found = ranked(outcome.evaluated[: outcome.trials])[0]
    assert gap.found == found and gap.optimum == outcome.ranked[0]
    expected = 100 * (found[1].step_time_s / outcome.best.step_time_s - 1)
    assert gap.pct == pytest.approx(expected) and gap.pct >= 0
    assert gap.text() == (
        f"Sampler gap: {expected:.2f}% (tpe's own best {found[1].step_time_s:.3f} s against "
        f"the exhaustive optimum {outcome.best.step_time_s:.3f} s of the same simulator)"
    )


def test_a_sampler_gap_is_unknown_beyond_the_budget_never_zero(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    cfg, space, evaluate, _ = _job(
        make_cfg, "search.sampler=tpe", "search.n_trials=20", "search.grid_budget_s=1e-9"
    )
    gap = search_job(cfg, _priced(evaluate), StopFlag()).gap
    assert gap is not None and gap.pct is None and gap.optimum is None
    assert gap.unknown is not None
    assert gap.unknown.startswith(f"pricing all {space.size} layouts would take ~")
    assert gap.unknown.endswith("above search.grid_budget_s=1e-09 s")
    assert gap.text().startswith("Sampler gap: unknown (pricing all ")


def test_a_sampler_that_priced_every_layout_knows_its_gap_without_the_budget(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    pins = ("parallel.tp=2", "parallel.pp=2", "parallel.recompute=none", "parallel.micro_batch=1")
    cfg, space, evaluate, _ = _job(
        make_cfg, *pins, "search.sampler=random", "search.n_trials=60", "search.grid_budget_s=1e-9"
    )
    outcome = search_job(cfg, _priced(evaluate), StopFlag())
    assert space.size == 12 and len(outcome.ranked) == space.size  # its trials priced them all
    assert outcome.exhaustive and outcome.gap is not None and outcome.gap.pct == 0.0


def test_a_sampler_gap_needs_layouts_that_fit(make_cfg: Callable[..., AutotuneConfig]) -> None:
    some, _ = _oom_heavy_outcome(make_cfg, "llama2_13b")
    too_big = [pair for pair in some.ranked if not pair[1].fits]
    gap = sampler_gap("tpe", too_big, some.ranked)
    assert gap is not None and gap.pct is None
    assert gap.unknown == "none of the sampler's layouts fits in memory; the optimum does"
    none, _ = _oom_heavy_outcome(make_cfg, "llama2_70b")
    gap = sampler_gap("tpe", none.ranked[:5], none.ranked)
    assert gap is not None and gap.pct is None
    assert gap.unknown == "no valid layout fits in memory"
    assert sampler_gap("tpe", [], some.ranked) is None


def test_repeated_proposals_are_answered_from_the_cache(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    _, space, evaluate, _ = _job(make_cfg)
    result = _study(space, evaluate, "random", 80)
    distinct = {lay for _, lay, _ in result.evaluated}
    assert evaluate.simulations == len(distinct) < len(result.evaluated) == 80


def test_layouts_that_do_not_fit_are_infeasible_constraints(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    # Llama-2-70B on one 8-NPU node: most layouts run out of memory.
    cfg = make_cfg("model=llama2_70b", "cluster=ascend", "cluster.num_nodes=1")
    priced = priced_job_from_config(cfg)
    space = build_space(priced.job, cfg.search, {})
    evaluate = Evaluator(priced)
    result = _study(space, evaluate, "tpe", 40)
    for trial, (number, _, prediction) in zip(result.study.trials, result.evaluated, strict=True):
        assert trial.number == number
        assert (trial.constraints["memory_gib"] <= 0) == prediction.fits
        assert trial.values[0] == prediction.step_time_s
    assert not all(p.fits for _, _, p in result.evaluated)


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_every_sampler_runs_and_finds_a_fitting_layout(
    make_cfg: Callable[..., AutotuneConfig], sampler: str
) -> None:
    _, space, evaluate, _ = _job(make_cfg)
    n = 12 if sampler == "gp" else 40
    result = _study(space, evaluate, sampler, n)
    assert len(result.study.trials) == n
    assert any(p.fits for _, _, p in result.evaluated)


def test_seeded_study_repeats_itself(make_cfg: Callable[..., AutotuneConfig]) -> None:
    _, space, evaluate, _ = _job(make_cfg)
    first = _study(space, evaluate, "tpe", 30, seed=3)
    second = _study(space, evaluate, "tpe", 30, seed=3)
    assert [t.params for t in first.study.trials] == [t.params for t in second.study.trials]


def test_nsga2_reports_the_time_memory_front(make_cfg: Callable[..., AutotuneConfig]) -> None:
    cfg, _, evaluate, _ = _job(make_cfg, "search.sampler=nsga2", "search.n_trials=40")
    front = search_job(cfg, _priced(evaluate), StopFlag()).pareto()
    assert front and all(p.fits for _, p in front)
    times = [p.step_time_s for _, p in front]
    memory = [p.memory_gib for _, p in front]
    assert times == sorted(times) and memory == sorted(memory, reverse=True)


def test_n_trials_counts_the_whole_resumed_study(
    make_cfg: Callable[..., AutotuneConfig], tmp_path: Path
) -> None:
    _, space, evaluate, _ = _job(make_cfg)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    assert len(_study(space, evaluate, "tpe", 10, storage=storage).study.trials) == 10
    assert len(_study(space, evaluate, "tpe", 15, storage=storage).study.trials) == 15


def test_a_study_is_bound_to_its_job_and_sampler(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    open_study(storage, "s", "tpe", 0, {"model": "a"})
    with pytest.raises(UserError, match=r"\(model: 'a' in the study, 'b' here\)"):
        open_study(storage, "s", "tpe", 0, {"model": "b"})
    with pytest.raises(UserError, match="made for another job or sampler \\(sampler: 'tpe'"):
        open_study(storage, "s", "random", 0, {"model": "a"})


def test_a_trial_of_a_dead_process_is_failed(
    make_cfg: Callable[..., AutotuneConfig], tmp_path: Path
) -> None:
    _, space, evaluate, _ = _job(make_cfg)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = open_study(storage, "t", "tpe", 0, {"job": "test"})
    with pytest.warns(UserWarning, match="Heartbeat"):  # ask() outside optimize, on purpose
        dead = study.ask()  # a trial whose process died mid-evaluation (no such pid)
    dead.set_user_attr("autotune.worker", f"{os.uname().nodename}:{2**22 + 1}")
    result = _study(space, evaluate, "tpe", 5, storage=storage)
    states = [t.state for t in result.study.trials]
    assert states[0] == optuna.trial.TrialState.FAIL  # only the trial in flight is lost
    assert states.count(optuna.trial.TrialState.COMPLETE) == 5 == len(states) - 1


def test_a_trial_killed_before_it_names_its_process_is_failed_once_its_writers_are_dead(
    tmp_path: Path,
) -> None:
    """``kill -9`` between Optuna creating a trial and the objective's first line leaves a
    RUNNING trial that names no process (and has no heartbeat): it is failed once every
    process that opened the study is dead, and left alone while one lives."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    killed = (
        "import os, warnings; from autotune.search import open_study; "
        f"study = open_study({storage!r}, 't', 'tpe', 0, {{'job': 'test'}}); "
        "warnings.simplefilter('ignore'); study.ask(); os._exit(0)"
    )
    proc = subprocess.run([sys.executable, "-c", killed], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    running = [optuna.trial.TrialState.RUNNING]
    study = open_study(storage, "t", "tpe", 0, {"job": "test"})  # this process: alive from now
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL]
    with pytest.warns(UserWarning, match="Heartbeat"):
        study.ask()  # in flight here, naming no process yet
    again = open_study(storage, "t", "tpe", 0, {"job": "test"})
    assert [t.state for t in again.trials][1:] == running  # its writer lives: not failed


def test_a_stop_flag_ends_the_study_after_the_trial_in_flight(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    _, space, evaluate, _ = _job(make_cfg)
    stop = StopFlag()
    study = open_study(None, "t", "tpe", 0, {"job": "test"})

    def progress(done: int, _: object) -> None:
        if done == 7:
            stop.set(15)

    result = optimize(
        study, space, evaluate, n_trials=50, polish_fraction=0.0, stop=stop, progress=progress
    )
    assert result.stopped and len(result.evaluated) == 7


def test_polish_spends_the_last_trials_on_neighbours_of_the_best(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    _, space, evaluate, _ = _job(make_cfg)
    trials = _study(space, evaluate, "random", 40, seed=1, polish=0.5).study.trials
    assert len(trials) == 40
    polished = [t for t in trials if t.user_attrs.get("autotune.origin") == "polish"]
    assert polished and min(t.number for t in polished) >= 20
    layouts = [space.nearest(t.params) for t in trials]
    assert len({space.nearest(t.params) for t in polished}) == len(polished)
    for trial in polished:  # a neighbour of a layout seen before it
        layout = space.nearest(trial.params)
        assert any(layout in space.neighbours(seen) for seen in layouts[: trial.number])


def test_storage_urls_are_checked_before_any_work(tmp_path: Path) -> None:
    for url, message in (
        ("notaurl", "is not a storage URL"),
        ("", "is not a storage URL"),
        (f"sqlite:///{tmp_path}", "is a folder; give a file path"),
        ("sqlite:////proc/nope/study.db", "/proc takes no new file"),
        ("postgresql://u@127.0.0.1:1/db", "cannot connect to the data|needs a database driver"),
    ):
        with pytest.raises(UserError, match=message):
            open_study(url, "t", "tpe", 0, {})
    journal = open_study(f"journal:{tmp_path / 'study.log'}", "j", "tpe", 0, {"job": "x"})
    assert json.loads(journal.user_attrs["autotune.job"])["sampler"] == "tpe"


def test_storage_refuses_a_file_that_is_not_a_study_database(tmp_path: Path) -> None:
    """Read only: MLflow's database, someone else's or a broken one is left byte for byte,
    and nothing is created beside it; an empty file, a new path or a study's database do."""
    folder = tmp_path / "files"
    folder.mkdir()
    mlflow_db = folder / "mlflow.db"
    _create_sqlite(mlflow_db)
    with contextlib.closing(sqlite3.connect(folder / "other.db")) as connection:
        connection.execute("CREATE TABLE orders (id)")
        connection.execute("CREATE TABLE users (id)")
    whole = mlflow_db.read_bytes()
    (folder / "truncated.db").write_bytes(whole[:50000])
    files = {path.name: path.read_bytes() for path in folder.iterdir()}
    allowed = "; give an Optuna study database, an empty file or a new path"
    for name, said in (
        ("mlflow.db", "holds MLflow's tables (a tracking.uri database), not Optuna's"),
        ("other.db", "holds tables of neither MLflow nor Optuna (orders, users)"),
        ("truncated.db", f"is a truncated SQLite database (50000 of its {len(whole)} bytes)"),
    ):
        url = f"sqlite:///{folder / name}"
        for check in (check_storage, open_storage):  # before the work, and when opened
            with pytest.raises(UserError) as refused:
                check(url)
            assert str(refused.value) == f"search.storage={url!r}: {folder / name} {said}{allowed}"
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == files
    (folder / "empty.db").touch()
    for name in ("empty.db", "new.db", "empty.db"):  # created, then resumed
        study = open_study(f"sqlite:///{folder / name}", "s", "tpe", 0, {"job": "x"})
        assert json.loads(study.user_attrs["autotune.job"])["sampler"] == "tpe"


def test_storage_and_tracking_on_one_file_are_refused(tmp_path: Path) -> None:
    """Whatever the file holds, or if it is not there yet; under any of its names."""
    path = tmp_path / "one.db"
    (tmp_path / "sub").mkdir()
    for storage in (f"sqlite:///{path}", f"sqlite:///{tmp_path}/sub/../one.db", f"journal:{path}"):
        tracking = TrackingConfig(enabled=True, uri=f"sqlite:///{path}", experiment="x")
        with pytest.raises(UserError) as refused:
            check_storage(storage, tracking)
        assert str(refused.value) == (
            f"search.storage={storage!r} and tracking.uri={tracking.uri!r} name one file, "
            f"{path}: Optuna's study and MLflow's runs need a database each; give two paths"
        )
        check_storage(storage, dataclasses.replace(tracking, enabled=False))  # no MLflow record
    path.touch()
    os.link(path, tmp_path / "link.db")
    tracking = TrackingConfig(
        enabled=True, uri=f"sqlite:///{tmp_path / 'link.db'}", experiment="x"
    )
    with pytest.raises(UserError, match="name one file"):
        check_storage(f"sqlite:///{path}", tracking)
    check_storage(f"sqlite:///{tmp_path / 'study.db'}", tracking)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.db", "one.db", "sub"]


@pytest.mark.slow
def test_rerank_prices_the_best_layouts_again_in_processes(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    cfg, _, evaluate, _ = _job(
        make_cfg,
        "model.num_layers=4",
        "search.rerank=hierarchical",
        "search.rerank_top=6",
        "search.workers=2",
    )
    outcome = search_job(cfg, _priced(evaluate), StopFlag())
    assert outcome.rerank is not None and len(outcome.rerank.reranked) == 6
    finer = [p.step_time_s for _, p in outcome.rerank.reranked if p.fits]
    assert finer == sorted(finer)
    assert outcome.ranked[:6] == outcome.rerank.reranked


def test_auto_screens_a_slow_simulator_and_finds_its_optimum(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    """With a grid too slow for the hierarchical simulator but not for the analytical one,
    auto screens every layout with the latter and re-prices the best with the former: the
    answer is the hierarchical simulator's own optimum over the whole space."""
    cfg, space, evaluate, _ = _job(
        make_cfg, "model.num_layers=4", "simulator=hierarchical", "search.grid_budget_s=2"
    )
    outcome = search_job(cfg, _priced(evaluate), StopFlag())
    assert outcome.mode == "screen" and not outcome.exhaustive
    assert outcome.rerank is not None and outcome.rerank.simulator == "hierarchical"
    assert len(outcome.ranked) == cfg.search.rerank_top == outcome.trials
    everything = sorted(
        zip(space.layouts, evaluate.price(space.layouts), strict=True),
        key=lambda pair: order_key(pair[1].fits, pair[1].step_time_s, pair[1].memory_gib),
    )
    assert outcome.best_layout == everything[0][0]
    assert outcome.best.step_time_s == everything[0][1].step_time_s


def test_a_screen_stopped_by_a_signal_says_its_layouts_were_not_priced_again(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    cfg, _, evaluate, _ = _job(
        make_cfg, "model.num_layers=4", "simulator=hierarchical", "search.sampler=screen"
    )
    stop = StopFlag()
    stop.set(15)  # SIGTERM before the screen ends: it is not re-priced
    outcome = search_job(cfg, _priced(evaluate), stop)
    assert outcome.mode == "screen" and outcome.stopped and outcome.rerank is None
    assert len(outcome.ranked) == cfg.search.rerank_top
    assert "stage_memory_gib" in outcome.best.detail  # the analytical screen's prediction


def test_space_covers_uneven_splits_and_their_variants(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    # DeepSeek-V3 has 61 layers: pp 4, 8 and 16 divide the world but not the layers.
    cfg = make_cfg("model=deepseek_v3", "cluster=h100", "cluster.num_nodes=128")
    job = job_from_config(cfg)
    space = build_space(job, cfg.search, {"tp": 2, "ep": 32})
    assert {4, 8, 16} <= set(space.choices["pp"])
    assert set(space.choices["split"]) == {"default", "light_ends"}
    light = [
        lay for lay, kind in zip(space.layouts, space.splits, strict=True) if kind == "light_ends"
    ]
    assert light and all(sum(lay.layer_split or ()) == 61 for lay in light)
    for layout in space.layouts[:: max(1, space.size // 50)]:
        assert not layout.violations(job)


def test_even_only_framework_keeps_dividing_pp(make_cfg: Callable[..., AutotuneConfig]) -> None:
    _, space, _, _ = _job(make_cfg, "model.num_layers=30", "train.framework=megatron_lm")
    assert all(30 % pp == 0 for pp in space.choices["pp"])
    assert space.choices["split"] == ("default",)


def _oom_heavy_outcome(
    make_cfg: Callable[..., AutotuneConfig], model: str
) -> tuple[Outcome, float]:
    """Every layout on one 8-NPU node. Llama-2-13B: some fit, some need 5 times the device
    memory; Llama-2-70B: none fits, none needs less than twice the memory."""
    cfg, _, evaluate, _ = _job(make_cfg, f"model={model}", "search.sampler=grid")
    return search_job(cfg, _priced(evaluate), StopFlag()), evaluate.job.cluster.device.memory_gib


def test_layouts_table_lists_fitting_layouts_first_then_the_fastest(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    outcome, _ = _oom_heavy_outcome(make_cfg, "llama2_13b")
    table = layouts_frame(outcome)
    assert 0 < table["fits"].sum() < len(table)
    keys = [order_key(f, t) for f, t in zip(table["fits"], table["step_time_s"], strict=True)]
    assert keys == sorted(keys) and list(table["rank"]) == list(range(1, len(table) + 1))


def test_time_vs_memory_shows_the_region_around_the_device_memory(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    outcome, capacity = _oom_heavy_outcome(make_cfg, "llama2_13b")
    table = layouts_frame(outcome)
    window = memory_window(table)
    assert window.capacity_gib == capacity and window.limit_gib == 1.5 * capacity
    margin = outcome.best.memory_margin
    assert window.fits_below_gib == pytest.approx(capacity / (1 + margin))
    assert table["memory_gib"].max() > 3 * capacity  # what squashed the plot
    assert window.beyond == (table["memory_gib"] > 1.5 * capacity).sum() > 0
    assert len(window.shown) + window.beyond == len(table)
    assert window.shown["memory_gib"].max() <= window.limit_gib
    assert f"({window.beyond} layouts above {1.5 * capacity:.0f} GiB not shown)" in window.title
    assert window.shown["memory"].iloc[0] == "fits"


def test_time_vs_memory_shows_every_layout_when_none_is_near_the_device_memory(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    outcome, capacity = _oom_heavy_outcome(make_cfg, "llama2_70b")
    table = layouts_frame(outcome)
    window = memory_window(table)
    assert table["memory_gib"].min() > 2 * capacity
    assert window.beyond == 0 and window.limit_gib == table["memory_gib"].max()
    assert window.title == "Predicted step time against peak memory per device"


def test_search_plots_embed_plotly_js(make_cfg: Callable[..., AutotuneConfig]) -> None:
    outcome, _ = _oom_heavy_outcome(make_cfg, "llama2_13b")
    chosen = outcome.best_layout.describe()
    page = search_page(outcome.study, layouts_frame(outcome), chosen, ["a note"])
    assert "plotly.js v" in page  # the library's own banner: it works offline
    assert not re.search(r"<script[^>]*\bsrc=", page)  # nothing loaded from a CDN
    assert page.count("Plotly.newPlot(") == 3
    # A grid's trials are its best layouts in rank order: a ranked profile, not a history.
    assert "Ranked profile" in page and "Optimization History" not in page
    # The chosen layout: named above the plots, a star on the profile and on time vs memory
    assert f"<p style='font-family:sans-serif'>Chosen layout: {chosen}, " in page
    assert "<p style='font-family:sans-serif'>a note</p>" in page
    assert page.count('"name":"chosen layout"') == 2 and page.count('"symbol":"star"') == 2


def test_the_chosen_layout_is_marked_in_the_layouts_table(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    outcome, _ = _oom_heavy_outcome(make_cfg, "llama2_13b")
    table = layouts_frame(outcome)
    assert list(table.columns[:3]) == ["rank", "chosen", "step_time_s"]
    assert table["chosen"].sum() == 1 and bool(table["chosen"].iloc[0])


def test_a_stored_study_is_bound_to_its_framework_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two Megatron-LM releases with the same layouts: a study made for one is not resumed
    for the other (their launch files differ), and each run records its release."""
    from autotune.__main__ import COMMAND as SEARCH
    from autotune.cli import run_command

    monkeypatch.chdir(tmp_path)
    job = ["model=llama2_7b", "cluster=h100", "cluster.num_nodes=1", "search.sampler=tpe"]
    job += ["search.n_trials=5", f"search.storage=sqlite:///{tmp_path / 'study.db'}"]
    job += ["search.study_name=s", "tracking.enabled=false", "launch_dir=null"]
    assert run_command(SEARCH, [*job, "framework.release=core_v0.17.1"]) == 0
    capsys.readouterr()
    assert run_command(SEARCH, [*job, "framework.release=core_v0.19.0"]) == 2
    err = capsys.readouterr().err
    assert "made for another job or sampler" in err
    assert "release: 'core_v0.17.1' in the study, 'core_v0.19.0' here" in err
