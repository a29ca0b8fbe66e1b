"""The vectorized analytical simulator gives the scalar path's numbers for every valid layout."""

from __future__ import annotations

import functools
import math
import pickle
import random

import numpy as np
import pytest

from autotune import catalog
from autotune.catalog import job_from_config
from autotune.config import AutotuneConfig
from autotune.config import fixed_layout_values
from autotune.config import load_config
from autotune.search._space import build_space
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import Prediction
from autotune.simulators.analytical import AnalyticalSimulator
from autotune.simulators.analytical import BatchPrediction
from autotune.simulators.calibrated import calibrated
from autotune.simulators.calibration import Calibration

# Catalog jobs whose valid layouts cover what the formulas branch on.
JOBS = {
    "dense-mindspeed-ascend": ("model=llama70b", "cluster=ascend"),
    "gqa-uneven-splits-vpp-cp": (
        "model=llama3_8b",
        "cluster=h100",
        "cluster.num_nodes=2",
        "model.num_layers=30",
    ),
    "moe-ep-fp8-h100": (
        "model=mixtral8x7b",
        "cluster=h100",
        "cluster.num_nodes=4",
        "train.precision=fp8",
    ),
    "mla-moe-first-dense-deepspeed": (
        "model=deepseek_v2_lite",
        "cluster=a100",
        "cluster.num_nodes=2",
        "train.framework=megatron_deepspeed",
    ),
    "mla-moe-mindspeed-ascend": (
        "model=deepseek_v2_lite",
        "cluster=ascend",
        "cluster.num_nodes=2",
    ),
    "megatron-lm-even-fp16": (
        "model=llama2_13b",
        "cluster=a100",
        "cluster.num_nodes=2",
        "train.framework=megatron_lm",
        "train.precision=fp16",
    ),
    "unfused-attention-v100": ("model=llama2_7b", "cluster=v100", "cluster.num_nodes=2"),
    "block-recompute": (
        "model=llama2_70b",
        "cluster=ascend",
        "cluster.num_nodes=4",
        "parallel.recompute=full",
        "parallel.recompute_layers=3",
    ),
    "explicit-split-tied-head": (
        "model=chatglm3_6b",
        "cluster=h100",
        "cluster.num_nodes=1",
        "parallel.pp=4",
        "parallel.layer_split=[6,8,8,6]",
    ),
    "recompute-modules-mla-moe": (  # no core attention: the layer keeps what it saves
        "model=deepseek_v2_lite",
        "cluster=h100",
        "cluster.num_nodes=1",
        "parallel.recompute_modules=[layernorm,mla_up_proj,moe_act,shared_experts,mlp]",
    ),
    "fp32": ("model=qwen2_5_7b", "cluster=a100", "cluster.num_nodes=1", "train.precision=fp32"),
    "tied-embedding-across-nodes": (
        "model=gpt3_175b",
        "model.num_layers=8",
        "cluster=a100",
        "cluster.num_nodes=2",
    ),
    # DeepSpeed reduces the tied embedding's gradient in fp32 without ZeRO (BF16_Optimizer),
    # in bf16 with it: the all-reduce's price depends on the optimizer's sharding
    "tied-embedding-deepspeed-bf16": (
        "model=gpt3_175b",
        "model.num_layers=8",
        "cluster=jean_zay_a100",
        "cluster.num_nodes=2",
        "train.framework=megatron_deepspeed",
    ),
}


@functools.cache
def _job(*overrides: str) -> tuple[Job, tuple[Layout, ...]]:
    """The job and its valid layouts (every one the search enumerates)."""
    cfg = load_config(AutotuneConfig, [*overrides, "tracking.enabled=false"])
    job = job_from_config(cfg)
    space = build_space(job, cfg.search, fixed_layout_values(cfg.parallel))
    return job, space.layouts


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def assert_same(vector: Prediction, scalar: Prediction) -> None:
    """Every field of the two predictions equal to 1e-9 relative (names and order exact)."""
    for name in (
        "step_time_s",
        "memory_gib",
        "cached_gib",
        "memory_capacity_gib",
        "tokens_per_s_per_device",
        "mfu",
    ):
        assert _close(getattr(vector, name), getattr(scalar, name)), name
    assert vector.fits == scalar.fits
    for name in ("breakdown", "memory_breakdown_gib"):
        ours, theirs = getattr(vector, name), getattr(scalar, name)
        assert list(ours) == list(theirs)
        assert all(_close(ours[key], theirs[key]) for key in ours), (name, ours, theirs)
    assert list(vector.detail) == list(scalar.detail)
    assert vector.detail["stage_layers"] == scalar.detail["stage_layers"]
    for name in ("stage_time_s", "stage_memory_gib"):
        ours, theirs = vector.detail[name], scalar.detail[name]
        assert len(ours) == len(theirs) and all(map(_close, ours, theirs)), name


@pytest.mark.parametrize("overrides", JOBS.values(), ids=JOBS.keys())
def test_vectorized_equals_scalar_on_every_valid_layout(overrides: tuple[str, ...]) -> None:
    job, layouts = _job(*overrides)
    assert len(layouts) > 1
    simulator = catalog.load_simulator("analytical")
    assert isinstance(simulator, AnalyticalSimulator)
    batch = simulator.simulate_many(job, layouts)
    fresh = catalog.load_simulator("analytical")  # the scalar path, its caches cold
    assert len(batch) == len(layouts)
    for index, layout in enumerate(layouts):
        vector = batch.prediction(index)
        scalar = fresh.simulate(job, layout)
        assert_same(vector, scalar)
        assert _close(batch.step_time_s[index], scalar.step_time_s)


def test_the_covered_jobs_exercise_every_branch() -> None:
    """The jobs above hold uneven and explicit splits, vpp, cp, ep, every recompute mode,
    block recompute and recompute by module, FP8, unfused attention and each framework."""
    seen: dict[str, set[object]] = {}
    for overrides in JOBS.values():
        job, layouts = _job(*overrides)
        seen.setdefault("framework", set()).add(job.train.framework.name)
        seen.setdefault("precision", set()).add(job.train.precision)
        seen.setdefault("flash", set()).add(job.flash_attention)
        for layout in layouts:
            for name in ("vpp", "cp", "ep", "recompute", "recompute_layers", "recompute_modules"):
                seen.setdefault(name, set()).add(getattr(layout, name))
            split = layout.stage_layers(job.model, job.train)
            seen.setdefault("uneven", set()).add(len(set(split)) > 1)
            seen.setdefault("explicit", set()).add(layout.layer_split is not None)
    assert seen["framework"] == {"megatron_core", "megatron_lm", "megatron_deepspeed", "mindspeed"}
    assert {"bf16", "fp8", "fp16", "fp32"} <= seen["precision"]
    assert seen["flash"] == {True, False}
    assert seen["recompute"] == {"none", "selective", "full"} and 3 in seen["recompute_layers"]
    assert len(seen["recompute_modules"]) == 2  # the default and a set of every other module
    assert max(seen["vpp"]) > 1 and max(seen["cp"]) > 1 and max(seen["ep"]) > 1  # type: ignore[type-var]
    assert seen["uneven"] == seen["explicit"] == {True, False}


@pytest.mark.parametrize("overrides", JOBS.values(), ids=JOBS.keys())
def test_the_scalar_caches_are_keyed_by_every_field_that_matters(
    overrides: tuple[str, ...],
) -> None:
    """One simulator pricing a whole job (its caches shared), in either order, equals a fresh
    one per layout: what a layout costs does not depend on what was priced before it."""
    job, layouts = _job(*overrides)
    some = random.Random(0).sample(layouts, min(len(layouts), 400))
    forward, backward = catalog.load_simulator("analytical"), catalog.load_simulator("analytical")
    priced = {layout: backward.simulate(job, layout) for layout in reversed(some)}
    assert all(forward.simulate(job, layout) == priced[layout] for layout in some)
    for layout in some[::20]:
        assert catalog.load_simulator("analytical").simulate(job, layout) == priced[layout]


def test_a_calibrated_simulator_prices_a_batch_as_one_by_one() -> None:
    job, layouts = _job(*JOBS["moe-ep-fp8-h100"])
    calibration = Calibration(simulator="analytical", factors={"tp_overlap": 0.3})
    simulator = calibrated(catalog.load_simulator("analytical"), calibration, memory_margin=0.1)
    batch = simulator.simulate_many(job, layouts[:40])
    for index, layout in enumerate(layouts[:40]):
        one = simulator.simulate(job, layout)
        assert_same(batch.prediction(index), one)


def test_batch_prediction_holds_arrays_and_gives_predictions() -> None:
    job, layouts = _job(*JOBS["gqa-uneven-splits-vpp-cp"])
    simulator = catalog.load_simulator("analytical")
    batch = simulator.simulate_many(job, layouts[:10])
    assert isinstance(batch, BatchPrediction) and len(batch) == 10
    assert isinstance(batch.step_time_s, np.ndarray) and batch.step_time_s.shape == (10,)
    assert batch.fits.dtype == bool and list(batch.fits) == [
        batch.prediction(i).fits for i in range(10)
    ]
    assert set(batch.breakdown) == set(batch.prediction(0).breakdown)
    np.testing.assert_allclose(sum(batch.breakdown.values()), batch.step_time_s, rtol=1e-12)
    assert batch.prediction(-1) == batch.prediction(9)
    assert isinstance(batch.prediction(3).step_time_s, float)
    with pytest.raises(IndexError):
        batch.prediction(10)
    assert pickle.loads(pickle.dumps(batch.prediction(2))) == batch.prediction(2)
    empty = simulator.simulate_many(job, [])
    assert len(empty) == 0
    with pytest.raises(IndexError):
        empty.prediction(0)
