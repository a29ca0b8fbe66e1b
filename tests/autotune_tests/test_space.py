"""The search space: the same valid layouts, in the same order, as checking every product."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from autotune.catalog import job_from_config
from autotune.config import AutotuneConfig
from autotune.config import fixed_layout_values
from autotune.config import load_config
from autotune.search._space import FIELDS
from autotune.search._space import SearchSpace
from autotune.search._space import _candidates
from autotune.search._space import build_space
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators.layout import SEARCHED
from autotune.simulators.layout import sharding_spelt

# Jobs and pins: splits that pp does not divide (and their light_ends variants), pinned
# degrees, modes, dp, recompute_layers, recompute modules and an explicit split, each
# framework's split rules.
JOBS = {
    "default": ("model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1"),
    "pinned-tp-recompute": (
        "model=llama2_7b",
        "cluster=ascend",
        "cluster.num_nodes=2",
        "parallel.tp=4",
        "parallel.recompute=full",
    ),
    "pinned-dp-and-optimizer": (
        "model=llama2_13b",
        "cluster=h100",
        "cluster.num_nodes=4",
        "parallel.dp=4",
        "parallel.distributed_optimizer=false",
    ),
    "pinned-recompute-layers": (
        "model=llama2_70b",
        "cluster=ascend",
        "cluster.num_nodes=4",
        "parallel.recompute_layers=4",
    ),
    "pinned-recompute-modules": (  # selective recompute only: the other modes are refused
        "model=mixtral_8x7b",
        "cluster=h100",
        "cluster.num_nodes=2",
        "parallel.recompute_modules=[moe_act,core_attn]",
    ),
    "explicit-split": (
        "model=chatglm3_6b",
        "cluster=h100",
        "cluster.num_nodes=1",
        "parallel.layer_split=[6,8,8,6]",
    ),
    "uneven-moe-light-ends": ("model=deepseek_v3", "cluster=h100", "cluster.num_nodes=16"),
    "uneven-deepspeed": (
        "model=deepseek_v2_lite",
        "cluster=a100",
        "cluster.num_nodes=4",
        "train.framework=megatron_deepspeed",
    ),
    "even-only-megatron-lm": (
        "model=llama3_8b",
        "cluster=a100",
        "cluster.num_nodes=2",
        "model.num_layers=30",
        "train.framework=megatron_lm",
    ),
    "moe-mindspeed-cp": (
        "model=qwen3_30b_a3b",
        "cluster=ascend",
        "cluster.num_nodes=4",
        "train.seq_len=8192",
    ),
    "zero-3-hybrid": (  # ZeRO-2 and -3 and hybrid sharding searched (Megatron-FSDP)
        "model=llama3_8b",
        "cluster=h100",
        "cluster.num_nodes=2",
        "search.zero_stages=[3,2]",
        "search.max_dp_replicate=4",
    ),
    "zero-deepspeed-pinned": (  # ZeRO-3 pinned with a ZeRO spelling: pp 1 only on DeepSpeed
        "model=llama3_8b",
        "cluster=a100",
        "cluster.num_nodes=2",
        "train.framework=megatron_deepspeed",
        "parallel.zero_stage=3",
    ),
    "zero-0-pinned": (  # ZeRO stage 0 as the user types it: no distributed optimizer
        "model=llama2_7b",
        "cluster=h100",
        "cluster.num_nodes=1",
        "parallel.zero_stage=0",
    ),
    "moe-a2a-overlap-reads-recompute": (
        "model=qwen3_30b_a3b",
        "cluster=h100",
        "cluster.num_nodes=2",
        "train.moe_a2a_overlap=true",
    ),
}


def _reference(job: Job, search: Any, fixed: Mapping[str, Any]) -> list[tuple[Layout, str]]:
    """Every product of the candidates, each of its split variants checked by the rules."""
    model, cluster, train = job.model, job.cluster, job.train
    candidates = _candidates(model, cluster, search)
    fixed = sharding_spelt(fixed)  # zero_stage 0 or 1 is distributed_optimizer's
    for name, value in fixed.items():
        if name in candidates:
            candidates[name] = [value]
    extra = {k: v for k, v in fixed.items() if k not in candidates}
    valid = []
    for combo in itertools.product(*(candidates[name] for name in SEARCHED)):
        values = dict(zip(SEARCHED, combo, strict=True))
        if values["zero_stage"] is not None and not values["distributed_optimizer"]:
            continue  # ZeRO-2 and -3 shard the optimizer states too
        tp, pp, cp = values["tp"], values["pp"], values["cp"]
        world = cluster.num_devices
        if world % (tp * pp * cp) or ("dp" in extra and extra["dp"] * tp * pp * cp != world):
            continue
        base = Layout.resolve(world, **values, **extra)
        if base.etp is None and values["etp"] is not None:
            continue  # etp equal to tp: the candidate None is that layout
        if base.layer_split is not None:
            variants = [("explicit", base)]
        else:
            splits = train.framework.split_variants(model.num_layers, base.pp)
            variants = [
                (kind, base if kind == "default" else dataclasses.replace(base, layer_split=split))
                for kind, split in splits.items()
            ]
        for kind, layout in variants:
            if not layout.violations(job):
                valid.append((layout, kind))
    return valid


@pytest.mark.parametrize("overrides", JOBS.values(), ids=JOBS.keys())
def test_space_is_every_valid_product_in_order(overrides: tuple[str, ...]) -> None:
    cfg = load_config(AutotuneConfig, [*overrides, "tracking.enabled=false"])
    job = job_from_config(cfg)
    fixed = fixed_layout_values(cfg.parallel)
    space = build_space(job, cfg.search, fixed)
    expected = _reference(job, cfg.search, fixed)
    assert list(zip(space.layouts, space.splits, strict=True)) == expected
    for name in FIELDS:  # the values that occur, in candidate order
        values = [kind if name == "split" else getattr(lay, name) for lay, kind in expected]
        assert list(space.choices[name]) == sorted(
            set(values), key=list(space.choices[name]).index
        )
        assert set(space.choices[name]) == set(values)
    for index in range(0, space.size, max(1, space.size // 40)):
        own = space.values(index)
        assert space.values_of(space.layouts[index]) == own
        assert space.nearest(own) == space.layouts[index]
        position = [space.choices[name].index(own[name]) for name in FIELDS]
        assert list(space._positions[index]) == position


def test_rules_ignore_the_fields_the_space_checks_once() -> None:
    """Layouts that differ in optimizer sharding, or (without recompute_layers and the EP
    all-to-all overlap) in the recompute mode, break the same rules: build_space checks the
    rules once for them."""
    cfg = load_config(AutotuneConfig, [*JOBS["uneven-deepspeed"], "tracking.enabled=false"])
    job = job_from_config(cfg)
    checked = 0
    for tp, pp, vpp, mb in itertools.product((1, 2, 3, 8), (1, 3, 4, 7), (1, 2), (1, 3)):
        layout = Layout.resolve(job.cluster.num_devices, tp=tp, pp=pp, vpp=vpp, micro_batch=mb)
        broken = layout.violations(job)
        for recompute, sharded in itertools.product(("none", "selective", "full"), (True, False)):
            other = dataclasses.replace(layout, recompute=recompute, distributed_optimizer=sharded)
            assert other.violations(job) == broken
            checked += 1
    assert checked > 100


def test_a_framework_without_selective_recompute_searches_none_of_it() -> None:
    """torchtitan has no selective recompute of modules (a rule reads the recompute mode
    there): no layout the space holds recomputes selectively."""
    overrides = ("model=llama3_8b", "cluster=a100_40g", "train.framework=torchtitan")
    cfg = load_config(AutotuneConfig, [*overrides, "tracking.enabled=false"])
    job = job_from_config(cfg)
    space = build_space(job, cfg.search, fixed_layout_values(cfg.parallel))
    assert {layout.recompute for layout in space.layouts} == {"none", "full"}
    assert all(not layout.violations(job) for layout in space.layouts)


def test_a_space_is_a_value() -> None:
    cfg = load_config(AutotuneConfig, [*JOBS["default"], "tracking.enabled=false"])
    job = job_from_config(cfg)
    space = build_space(job, cfg.search, {})
    assert isinstance(space, SearchSpace) and space.size == len(set(space.layouts))
    assert space._positions.dtype == np.int64 and space._positions.shape == (
        space.size,
        len(FIELDS),
    )


def test_recompute_modules_are_not_searched() -> None:
    """The field is the framework's default unless pinned: a search tries no module sets, and
    a pinned set keeps to selective recompute."""
    cfg = load_config(AutotuneConfig, [*JOBS["default"], "tracking.enabled=false"])
    job = job_from_config(cfg)
    space = build_space(job, cfg.search, {})
    assert "recompute_modules" not in SEARCHED
    assert {lay.recompute_modules for lay in space.layouts} == {None}
    cfg = load_config(
        AutotuneConfig, [*JOBS["pinned-recompute-modules"], "tracking.enabled=false"]
    )
    job = job_from_config(cfg)
    fixed = fixed_layout_values(cfg.parallel)
    assert fixed["recompute_modules"] == ["moe_act", "core_attn"]  # as the config lists them
    space = build_space(job, cfg.search, fixed)
    assert space.size and {(lay.recompute, lay.recompute_modules) for lay in space.layouts} == {
        ("selective", ("core_attn", "moe_act"))
    }


def _space(job_name: str, *more: str) -> tuple[Any, SearchSpace]:
    cfg = load_config(AutotuneConfig, [*JOBS[job_name], *more, "tracking.enabled=false"])
    job = job_from_config(cfg)
    space = build_space(job, cfg.search, fixed_layout_values(cfg.parallel))
    return job, space


def test_a_default_search_tries_no_sharding_beyond_the_optimizers() -> None:
    """search.zero_stages=[] and max_dp_replicate=1 by default: the space is what it was."""
    _, space = _space("default")
    assert {(lay.zero_stage, lay.dp_replicate) for lay in space.layouts} == {(None, 1)}
    assert space.choices["zero_stage"] == (None,) and space.choices["dp_replicate"] == (1,)


def test_a_search_with_zero_3_tries_it_with_the_optimizer_sharded() -> None:
    job, space = _space("zero-3-hybrid")
    stages = {(lay.sharding, lay.dp_replicate) for lay in space.layouts}
    assert {(s, r) for s in (2, 3) for r in (1, 2, 4)} <= stages
    assert (0, 2) not in stages  # replicas need sharded states
    assert space.choices["zero_stage"] == (None, 2, 3)
    assert all(lay.distributed_optimizer for lay in space.layouts if lay.zero_stage)
    _, deepspeed = _space("zero-deepspeed-pinned")
    assert deepspeed.size and {(lay.sharding, lay.pp) for lay in deepspeed.layouts} == {(3, 1)}
    _, stage_0 = _space("zero-0-pinned")
    assert {lay.sharding for lay in stage_0.layouts} == {0}
