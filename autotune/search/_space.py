"""The layout search space: every layout the rules allow for a model, cluster and batch."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import numpy as np

from autotune.config import SearchConfig
from autotune.simulators import ClusterSpec
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import LayoutError
from autotune.simulators import ModelSpec
from autotune.simulators.layout import SEARCHED
from autotune.simulators.layout import ZERO_GRADS
from autotune.simulators.layout import field_info
from autotune.simulators.layout import sharding_spelt

__all__ = ["FIELDS", "SearchSpace", "build_space"]

# What a sampler chooses: the layout's searched fields, and which of the framework's layer
# splits (FrameworkSpec.split_variants: default, light_ends) the pipeline stages take.
FIELDS = (*SEARCHED, "split")
_MODES = [
    FIELDS.index(name) for name in ("recompute", "distributed_optimizer", "zero_stage", "split")
]


# Changing a mode (recompute, optimizer sharding) counts as this many steps along a degree's
# list of choices when a proposed point is moved to the nearest valid layout.
_MODE_STEP = 10


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """The valid layouts and, per searched field, the values that occur in them.

    A sampler proposes one value per field from ``choices``; most combinations of them break
    a rule (tp * pp * cp must divide the world, ...). :meth:`nearest` maps every proposal to
    the closest valid layout (itself, when valid), so every trial is a real layout and the
    samplers see a function defined on the whole grid.
    """

    layouts: tuple[Layout, ...]
    splits: tuple[str, ...]  # the split variant of each layout
    choices: Mapping[str, tuple[Any, ...]]
    _positions: np.ndarray  # (layouts, fields): index of each layout's value in its choices
    _index: dict[Layout, int] = field(default_factory=dict)  # filled on first use

    @property
    def size(self) -> int:
        return len(self.layouts)

    def values(self, index: int) -> dict[str, Any]:
        """The sampler's values (:data:`FIELDS`) of layout ``index``."""
        layout = self.layouts[index]
        return {name: getattr(layout, name) for name in SEARCHED} | {"split": self.splits[index]}

    def values_of(self, layout: Layout) -> dict[str, Any]:
        if not self._index:
            self._index.update(zip(self.layouts, range(self.size), strict=True))
        return self.values(self._index[layout])

    def nearest(self, values: Mapping[str, Any]) -> Layout:
        """The valid layout closest to a proposal (weighted steps along each choice list)."""
        point = np.array([self.choices[name].index(values[name]) for name in FIELDS])
        steps = np.abs(self._positions - point)
        steps[:, _MODES] = np.minimum(steps[:, _MODES], 1) * _MODE_STEP
        return self.layouts[int(np.argmin(steps.sum(axis=1)))]

    def neighbours(self, layout: Layout) -> list[Layout]:
        """Valid layouts that differ from ``layout`` in one searched field (any other value)."""
        found: dict[Layout, None] = {}
        own = self.values_of(layout)
        for name in FIELDS:
            for value in self.choices[name]:
                if value != own[name]:
                    found.setdefault(self.nearest(own | {name: value}))
        found.pop(layout, None)
        return list(found)


def _candidates(
    model: ModelSpec, cluster: ClusterSpec, search: SearchConfig
) -> dict[str, list[Any]]:
    """Per searched field, the values the search may try (from the layout's field table)."""
    settings = dataclasses.asdict(search)
    found = {}
    for name in SEARCHED:
        candidates = field_info(name).candidates
        assert candidates is not None, f"searched layout field {name} has no candidates"
        found[name] = list(candidates(model, cluster, settings))
    return found


# Layout fields that no rule of Layout.violations reads (recompute: unless recompute_layers or
# recompute_modules is pinned, the run overlaps the EP all-to-all or the framework has no
# selective recompute to run), so layouts that differ
# only in them are valid or invalid together and the rules run once for them all
# (tests/autotune_tests/test_space.py holds the rules to this).
_RULE_FREE = ("distributed_optimizer", "recompute")


# size: one candidate list per layout field, in the order of Layout's fields
def build_space(
    job: Job,
    search: SearchConfig,
    fixed: Mapping[str, Any],
) -> SearchSpace:
    """Enumerate every valid layout; ``fixed`` pins fields (``parallel.*`` overrides).

    Layouts come in the order of the product of the searched fields' candidates, each with
    its split variants after it. The rules run once per class of layouts that differ only in
    fields no rule reads, and a layout is built only when it is valid.

    Raises LayoutError when no layout is valid, quoting the rules the pinned values break.
    """
    model, cluster, train = job.model, job.cluster, job.train
    candidates = _candidates(model, cluster, search)
    stages = train.framework.zero_stages
    if 1 not in stages:  # no optimizer-only sharding (torchtitan): its sharded stages stand in
        extra_stages = [s for s in stages if s >= ZERO_GRADS and s not in candidates["zero_stage"]]
        candidates["zero_stage"] = [*candidates["zero_stage"], *extra_stages]
    fixed = sharding_spelt(fixed)  # zero_stage 0 or 1 pins distributed_optimizer
    for name, value in fixed.items():
        if name in candidates:
            candidates[name] = [value]
    extra = {k: v for k, v in fixed.items() if k not in candidates}
    pinned = "recompute_layers" in extra or "recompute_modules" in extra
    selective_runs = bool(train.framework.recompute_modules)
    ruled = pinned or (train.moe_a2a_overlap and model.is_moe) or not selective_runs
    # ZeRO-2 and -3 and hybrid sharding need the distributed optimizer: it is ruled with them
    sharded = candidates["zero_stage"] != [None] or candidates["dp_replicate"] != [1]
    free = [
        name
        for name in _RULE_FREE
        if (name != "recompute" or not ruled) and (name != "distributed_optimizer" or not sharded)
    ]
    checked = [name for name in SEARCHED if name not in free]
    place = [(checked + free).index(name) for name in SEARCHED]  # to the order of SEARCHED
    free_combos = list(itertools.product(*(enumerate(candidates[name]) for name in free)))
    for free_combo in free_combos:  # each value checked on its own, as every layout checks it
        Layout(**{name: value for name, (_, value) in zip(free, free_combo, strict=True)})
    world = cluster.num_devices
    variants: dict[int, dict[str, tuple[int, ...]]] = {}  # the framework's splits, by pp
    found: list[tuple[list[int], str, Layout]] = []  # candidate indices + variant, kind, layout
    for combo in itertools.product(*(enumerate(candidates[name]) for name in checked)):
        values = {name: value for name, (_, value) in zip(checked, combo, strict=True)}
        if values.get("zero_stage") is not None and not values.get("distributed_optimizer"):
            continue  # ZeRO-2 and -3 shard the optimizer states too
        tp, pp, cp = values["tp"], values["pp"], values["cp"]
        if world % (tp * pp * cp) or ("dp" in extra and extra["dp"] * tp * pp * cp != world):
            continue
        base = Layout.resolve(world, **values, **extra)
        if any(getattr(base, name) != value for name, value in values.items()):
            continue  # spelt by another candidate (etp equal to tp is etp None): once
        if pp not in variants:
            variants[pp] = train.framework.split_variants(model.num_layers, pp)
        for order, (kind, layout) in enumerate(_split_variants(base, variants[pp])):
            if layout.violations(job):
                continue
            fields = layout.as_dict()
            for free_combo in free_combos:
                at = [i for i, _ in combo] + [i for i, _ in free_combo]
                index = [at[k] for k in place]
                fields.update(
                    (name, value) for name, (_, value) in zip(free, free_combo, strict=True)
                )
                found.append(([*index, order], kind, _layout(fields)))
    if not found:
        raise LayoutError(_explain_empty(job, fixed))
    found.sort(key=lambda item: item[0])  # the order of the product, as when checking it all
    indices = np.array([index[:-1] for index, _, _ in found], dtype=np.int64)
    splits = tuple(kind for _, kind, _ in found)
    choices, positions = _choices(candidates, indices, splits)
    return SearchSpace(
        layouts=tuple(layout for _, _, layout in found),
        splits=splits,
        choices=choices,
        _positions=positions,
    )


def _layout(fields: Mapping[str, Any]) -> Layout:
    """The layout of ``fields`` (every one), as ``Layout(**fields)`` would build it but
    without its field checks: they look at one field at a time (docs/conventions.md rule 4)
    and every value here passed them already. A space holds tens of thousands of layouts."""
    layout = object.__new__(Layout)
    for name, value in fields.items():
        object.__setattr__(layout, name, value)
    return layout


def _choices(
    candidates: Mapping[str, list[Any]], indices: np.ndarray, splits: tuple[str, ...]
) -> tuple[dict[str, tuple[Any, ...]], np.ndarray]:
    """Per field, the candidates that occur in valid layouts (in candidate order), and each
    layout's position in them; ``indices`` holds each layout's candidate indices."""
    kinds = list(dict.fromkeys(splits))
    choices: dict[str, tuple[Any, ...]] = {"split": tuple(kinds)}
    positions = np.empty((len(splits), len(FIELDS)), dtype=np.int64)
    for column, name in enumerate(SEARCHED):
        present = np.zeros(len(candidates[name]), dtype=bool)
        present[indices[:, column]] = True
        choices[name] = tuple(v for v, seen in zip(candidates[name], present, strict=True) if seen)
        positions[:, column] = (np.cumsum(present) - 1)[indices[:, column]]
    code = {kind: i for i, kind in enumerate(kinds)}
    positions[:, len(SEARCHED)] = [code[kind] for kind in splits]
    return {name: choices[name] for name in FIELDS}, positions


def _split_variants(
    base: Layout, variants: Mapping[str, tuple[int, ...]]
) -> list[tuple[str, Layout]]:
    """``base`` with each of the framework's splits worth searching (``variants``:
    FrameworkSpec.split_variants); an explicit split, when the user pinned one, is the only
    one."""
    if base.layer_split is not None:
        return [("explicit", base)]
    return [
        (kind, base if kind == "default" else dataclasses.replace(base, layer_split=split))
        for kind, split in variants.items()
    ]


def _explain_empty(job: Job, fixed: Mapping[str, Any]) -> str:
    """Why nothing is valid: the rules the pinned values break on their own."""
    model, cluster = job.model, job.cluster
    head = f"no valid layout for {model.name} on {cluster.num_devices} devices of {cluster.name}"
    try:
        probe = Layout.resolve(cluster.num_devices, **dict(fixed))
    except LayoutError as exc:
        return f"{head}: {exc}"
    broken = probe.violations(job)
    pinned = ", ".join(f"{k}={v}" for k, v in fixed.items()) or "nothing pinned"
    if broken:
        return f"{head} ({pinned}):\n  - " + "\n  - ".join(broken)
    return f"{head} ({pinned}); widen the search (search.max_tp, search.micro_batch, ...)"
