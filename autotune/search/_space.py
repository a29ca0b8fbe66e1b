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
from simulators import ClusterSpec
from simulators import Layout
from simulators import LayoutError
from simulators import ModelSpec
from simulators import TrainSpec
from simulators.layout import SEARCHED
from simulators.layout import field_info

__all__ = ["FIELDS", "SearchSpace", "build_space"]

# What a sampler chooses: the layout's searched fields, and which of the framework's layer
# splits (FrameworkSpec.split_variants: default, light_ends) the pipeline stages take.
FIELDS = (*SEARCHED, "split")
_MODES = [FIELDS.index("recompute"), FIELDS.index("distributed_optimizer"), FIELDS.index("split")]


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
    _index: dict[Layout, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {lay: i for i, lay in enumerate(self.layouts)})

    @property
    def size(self) -> int:
        return len(self.layouts)

    def values(self, index: int) -> dict[str, Any]:
        """The sampler's values (:data:`FIELDS`) of layout ``index``."""
        layout = self.layouts[index]
        return {name: getattr(layout, name) for name in SEARCHED} | {"split": self.splits[index]}

    def values_of(self, layout: Layout) -> dict[str, Any]:
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


def build_space(
    model: ModelSpec,
    cluster: ClusterSpec,
    train: TrainSpec,
    search: SearchConfig,
    fixed: Mapping[str, Any],
) -> SearchSpace:
    """Enumerate every valid layout; ``fixed`` pins fields (``parallel.*`` overrides).

    Raises LayoutError when no layout is valid, quoting the rules the pinned values break.
    """
    candidates = _candidates(model, cluster, search)
    for name, value in fixed.items():
        if name in candidates:
            candidates[name] = [value]
    extra = {k: v for k, v in fixed.items() if k not in candidates}
    world = cluster.num_devices
    valid: list[tuple[Layout, str]] = []
    for combo in itertools.product(*(candidates[name] for name in SEARCHED)):
        values = dict(zip(SEARCHED, combo, strict=True))
        tp, pp, cp = values["tp"], values["pp"], values["cp"]
        if world % (tp * pp * cp) or ("dp" in extra and extra["dp"] * tp * pp * cp != world):
            continue
        base = Layout.resolve(world, **values, **extra)
        for kind, layout in _split_variants(base, model, train):
            if not layout.violations(model, cluster, train):
                valid.append((layout, kind))
    if not valid:
        raise LayoutError(_explain_empty(model, cluster, train, fixed))
    candidates["split"] = list(dict.fromkeys(kind for _, kind in valid))
    choices = {
        name: tuple(v for v in candidates[name] if any(_value(x, k, name) == v for x, k in valid))
        for name in FIELDS
    }
    positions = np.array(
        [[choices[name].index(_value(lay, k, name)) for name in FIELDS] for lay, k in valid]
    )
    layouts, splits = zip(*valid, strict=True)
    return SearchSpace(
        layouts=tuple(layouts), splits=tuple(splits), choices=choices, _positions=positions
    )


def _value(layout: Layout, split: str, name: str) -> Any:
    return split if name == "split" else getattr(layout, name)


def _split_variants(base: Layout, model: ModelSpec, train: TrainSpec) -> list[tuple[str, Layout]]:
    """``base`` with each of the framework's splits worth searching (an explicit split, when
    the user pinned one, is the only one)."""
    if base.layer_split is not None:
        return [("explicit", base)]
    variants = train.framework.split_variants(model.num_layers, base.pp)
    return [
        (kind, base if kind == "default" else dataclasses.replace(base, layer_split=split))
        for kind, split in variants.items()
    ]


def _explain_empty(
    model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, fixed: Mapping[str, Any]
) -> str:
    """Why nothing is valid: the rules the pinned values break on their own."""
    head = f"no valid layout for {model.name} on {cluster.num_devices} devices of {cluster.name}"
    try:
        probe = Layout.resolve(cluster.num_devices, **dict(fixed))
    except LayoutError as exc:
        return f"{head}: {exc}"
    broken = probe.violations(model, cluster, train)
    pinned = ", ".join(f"{k}={v}" for k, v in fixed.items()) or "nothing pinned"
    if broken:
        return f"{head} ({pinned}):\n  - " + "\n  - ".join(broken)
    return f"{head} ({pinned}); widen the search (search.max_tp, search.micro_batch, ...)"
