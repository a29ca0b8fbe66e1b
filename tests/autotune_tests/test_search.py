"""The layout space and the Optuna study, on the real catalog."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from autotune.config import AutotuneConfig
from autotune.config import fixed_layout_values
from autotune.order import order_key
from autotune.search import SAMPLERS
from autotune.search import Evaluator
from autotune.search import SearchResult
from autotune.search import exhaustive_best
from autotune.search import run_search
from autotune.search._job import trials_frame
from autotune.search._plots import memory_window
from autotune.search._plots import search_page
from autotune.search._space import build_space
from catalog import job_from_config
from simulators import LAYOUT_FIELDS
from simulators import LayoutError

SMALL = ("model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1")


def _job(make_cfg: Callable[..., AutotuneConfig], *overrides: str):  # noqa: ANN202
    cfg = make_cfg(*SMALL, *overrides)
    job = job_from_config(cfg)
    model, cluster, train, simulator = job.model, job.cluster, job.train, job.simulator
    fixed = fixed_layout_values(cfg.parallel)
    space = build_space(model, cluster, train, cfg.search, fixed)
    return cfg, space, Evaluator(simulator, model, cluster, train), fixed


def test_space_holds_only_valid_layouts(make_cfg: Callable[..., AutotuneConfig]) -> None:
    cfg, space, evaluate, _ = _job(make_cfg)
    assert space.size > 50
    for layout in space.layouts:
        assert not layout.violations(evaluate.model, evaluate.cluster, evaluate.train)
        assert layout.world_size == 8
    assert set(space.choices["tp"]) == {1, 2, 4, 8}


def test_pinned_values_restrict_the_space(make_cfg: Callable[..., AutotuneConfig]) -> None:
    _, space, _, _ = _job(make_cfg, "parallel.tp=4", "parallel.recompute=full")
    assert {lay.tp for lay in space.layouts} == {4}
    assert {lay.recompute for lay in space.layouts} == {"full"}


def test_impossible_pin_explains_itself(make_cfg: Callable[..., AutotuneConfig]) -> None:
    with pytest.raises(LayoutError, match="pp=7 does not divide num_layers=32"):
        _job(make_cfg, "parallel.pp=7")


def _search(space, evaluate, fixed, sampler: str, n: int, seed: int = 0):  # noqa: ANN001, ANN202
    return run_search(
        space,
        evaluate,
        sampler=sampler,
        n_trials=n,
        seed=seed,
        storage=None,
        study_name="t",
    )


def test_seeded_search_repeats_exactly(make_cfg: Callable[..., AutotuneConfig]) -> None:
    _, space, evaluate, fixed = _job(make_cfg)
    first = _search(space, evaluate, fixed, "tpe", 30, seed=3)
    second = _search(space, evaluate, fixed, "tpe", 30, seed=3)
    assert [t.params for t in first.study.trials] == [t.params for t in second.study.trials]


def test_every_proposal_maps_to_the_nearest_valid_layout(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    _, space, _, _ = _job(make_cfg)
    for layout in space.layouts[:50]:  # a valid point maps to itself
        assert space.nearest({n: getattr(layout, n) for n in space.choices}) == layout
    # tp8 * pp8 does not fit 8 devices: the nearest valid layout changes a degree, not a mode.
    values = {
        "tp": 8,
        "pp": 8,
        "cp": 1,
        "ep": 1,
        "vpp": 1,
        "micro_batch": 1,
        "recompute": "full",
        "distributed_optimizer": True,
    }
    moved = space.nearest(values)
    assert moved.tp * moved.pp == 8
    assert (moved.recompute, moved.distributed_optimizer) == ("full", True)


def test_grid_finds_the_exhaustive_optimum(make_cfg: Callable[..., AutotuneConfig]) -> None:
    _, space, evaluate, fixed = _job(make_cfg, "search.micro_batch=[1]", "parallel.cp=1")
    result = _search(space, evaluate, fixed, "grid", 1)
    best_layout, best = result.ranked()[0]
    exhaustive = exhaustive_best(space, evaluate)
    assert exhaustive is not None
    assert best_layout == exhaustive[0]
    assert {lay for _, lay, _ in result.evaluated} == set(space.layouts)


def test_repeated_proposals_are_answered_from_the_cache(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    _, space, evaluate, fixed = _job(make_cfg)
    result = _search(space, evaluate, fixed, "random", 80)
    distinct = {lay for _, lay, _ in result.evaluated}
    assert evaluate.simulations == len(distinct) < len(result.evaluated) == 80


def test_layouts_that_do_not_fit_are_infeasible_constraints(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    # Llama-2-70B on one 8-NPU node: most layouts run out of memory.
    cfg = make_cfg("model=llama2_70b", "cluster=ascend", "cluster.num_nodes=1")
    job = job_from_config(cfg)
    model, cluster, train, simulator = job.model, job.cluster, job.train, job.simulator
    space = build_space(model, cluster, train, cfg.search, {})
    evaluate = Evaluator(simulator, model, cluster, train)
    result = _search(space, evaluate, {}, "tpe", 40)
    for trial, (number, _, prediction) in zip(result.study.trials, result.evaluated, strict=True):
        assert trial.number == number
        assert (trial.constraints["memory_gib"] <= 0) == prediction.fits
        assert trial.values[0] == prediction.step_time_s
    fits = [p.fits for _, _, p in result.evaluated]
    assert not all(fits)
    ranked = result.ranked()
    assert all(p.fits for _, p in ranked[: sum(fits)])


@pytest.mark.parametrize("sampler", sorted(set(SAMPLERS) - {"grid"}))
def test_every_sampler_runs_and_finds_a_fitting_layout(
    make_cfg: Callable[..., AutotuneConfig], sampler: str
) -> None:
    _, space, evaluate, fixed = _job(make_cfg)
    n = 12 if sampler == "gp" else 40
    result = _search(space, evaluate, fixed, sampler, n)
    assert len(result.study.trials) == n
    assert result.ranked()[0][1].fits


def test_resumed_study_keeps_its_trials(make_cfg: Callable[..., AutotuneConfig], tmp_path) -> None:  # noqa: ANN001
    _, space, evaluate, fixed = _job(make_cfg)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    for _ in range(2):
        result = run_search(
            space,
            evaluate,
            sampler="tpe",
            n_trials=10,
            seed=0,
            storage=storage,
            study_name="resume",
        )
    assert len(result.study.trials) == 20


def test_polish_spends_the_last_trials_on_neighbours_of_the_best(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    _, space, evaluate, _ = _job(make_cfg)
    result = run_search(
        space,
        evaluate,
        sampler="random",
        n_trials=40,
        seed=1,
        storage=None,
        study_name="p",
        polish_fraction=0.5,
    )
    trials = result.study.trials
    assert len(trials) == 40
    enqueued = [t for t in trials if "fixed_params" in t.system_attrs]
    assert enqueued and min(t.number for t in enqueued) >= 20
    first_half_best = min(t.values[0] for t in trials[:20] if t.constraints["memory_gib"] <= 0)
    assert result.ranked()[0][1].step_time_s <= first_half_best
    for layout in space.neighbours(result.ranked()[0][0]):
        assert layout in set(space.layouts) and layout != result.ranked()[0][0]


def _oom_heavy_search(
    make_cfg: Callable[..., AutotuneConfig], model: str = "llama2_13b"
) -> tuple[SearchResult, float]:
    """A search on one 8-NPU node. Llama-2-13B: 241 of 630 layouts fit, some need 5 times the
    device memory; Llama-2-70B: none of 702 fits, none needs less than twice the memory."""
    cfg = make_cfg(f"model={model}", "cluster=ascend", "cluster.num_nodes=1")
    job = job_from_config(cfg)
    space = build_space(job.model, job.cluster, job.train, cfg.search, {})
    evaluate = Evaluator(job.simulator, job.model, job.cluster, job.train)
    return _search(space, evaluate, {}, "random", 60), job.cluster.device.memory_gib


def test_trials_table_lists_fitting_layouts_first_then_the_fastest(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    result, _ = _oom_heavy_search(make_cfg)
    trials = trials_frame(result)
    assert len(trials) == 60 and 0 < trials["fits"].sum() < 60
    keys = [order_key(f, t) for f, t in zip(trials["fits"], trials["step_time_s"], strict=True)]
    assert keys == sorted(keys)
    assert trials["fits"].iloc[0] and not trials["fits"].iloc[-1]


def test_time_vs_memory_shows_the_region_around_the_device_memory(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    result, capacity = _oom_heavy_search(make_cfg)
    trials = trials_frame(result)
    window = memory_window(trials)
    assert window.capacity_gib == capacity and window.limit_gib == 1.5 * capacity
    distinct = trials.drop_duplicates([c for c in LAYOUT_FIELDS if c in trials])
    assert trials["memory_gib"].max() > 3 * capacity  # what squashed the plot
    assert window.beyond == (distinct["memory_gib"] > 1.5 * capacity).sum() > 0
    assert len(window.shown) + window.beyond == len(distinct)
    assert window.shown["memory_gib"].max() <= window.limit_gib
    assert f"({window.beyond} layouts above {1.5 * capacity:.0f} GiB not shown)" in window.title
    assert window.shown["memory"].iloc[0] == "fits"


def test_time_vs_memory_shows_every_layout_when_none_is_near_the_device_memory(
    make_cfg: Callable[..., AutotuneConfig],
) -> None:
    result, capacity = _oom_heavy_search(make_cfg, "llama2_70b")
    trials = trials_frame(result)
    window = memory_window(trials)
    assert trials["memory_gib"].min() > 2 * capacity
    assert window.beyond == 0 and window.limit_gib == trials["memory_gib"].max()
    assert window.title == "Predicted step time against peak memory per device"


def test_search_plots_embed_plotly_js(make_cfg: Callable[..., AutotuneConfig]) -> None:
    result, _ = _oom_heavy_search(make_cfg)
    page = search_page(result.study, trials_frame(result))
    assert "plotly.js v" in page  # the library's own banner: it works offline
    assert not re.search(r"<script[^>]*\bsrc=", page)  # nothing loaded from a CDN
    assert page.count("Plotly.newPlot(") == 3
