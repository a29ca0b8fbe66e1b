"""The commands' config schemas, and the one step that turns a composed config into types.

Each command composes its root config (``conf/config.yaml`` for search and simulate,
``conf/benchmark.yaml``) and converts it once with :func:`typed` into the dataclasses below;
from there on everything is typed. The values (and so the defaults) of these settings live in
the yaml files; the schemas give their types, and ``MISSING`` marks what the yaml must set.
The job groups' schemas (model, cluster, train) come from :mod:`catalog`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import TypeVar

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING
from omegaconf import DictConfig
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

import catalog
from catalog import JobConfig
from simulators import UserError
from simulators.calibration import FACTORS
from simulators.layout import LAYOUT_FIELDS
from simulators.layout import Layout

__all__ = [
    "AutotuneConfig",
    "BenchmarkConfig",
    "CalibrateConfig",
    "CalibrateSettings",
    "HeuristicConfig",
    "ParallelConfig",
    "ProfileConfig",
    "SearchConfig",
    "TrackingConfig",
    "fixed_layout_values",
    "load_config",
    "register_schemas",
    "typed",
]


OUTPUTS = ("table", "json")


def _check_output(output: str) -> None:
    if output not in OUTPUTS:
        raise UserError(f"unknown output {output!r}; allowed: {', '.join(OUTPUTS)}")


@dataclass
class SearchConfig:
    """The layout search (``conf/search/default.yaml`` documents each field)."""

    sampler: str = MISSING
    n_trials: int = MISSING
    seed: int = MISSING
    top_k: int = MISSING
    storage: str | None = MISSING
    study_name: str | None = MISSING
    max_tp: int = MISSING
    max_cp: int = MISSING
    max_vpp: int = MISSING
    micro_batch: list[int] = MISSING
    recompute: list[str] = MISSING
    distributed_optimizer: list[bool] = MISSING
    polish: float = MISSING
    grid_budget_s: float = MISSING
    rerank: str | None = MISSING
    rerank_top: int = MISSING
    workers: int = MISSING
    memory_margin: float | None = MISSING  # None: derived (autotune/calibrate/_apply.py)


def _prior_schema() -> type:
    """``calibrate.prior.<factor>``: one prior width per calibration factor."""
    rows = [(name, float, field(default=MISSING)) for name in FACTORS]
    return dataclasses.make_dataclass("PriorConfig", rows)


PriorConfig = _prior_schema()


@dataclass
class CalibrateSettings:
    """How calibrations are fitted and probes chosen (``conf/calibrate/default.yaml``)."""

    prior: Any = field(default_factory=PriorConfig)
    time_noise: float = MISSING
    memory_noise: float = MISSING
    max_rows: int = MISSING
    max_evaluations: int = MISSING
    relinearize: int = MISSING
    bootstrap_samples: int = MISSING
    interval: float = MISSING
    seed: int = MISSING
    probe_pool: float = MISSING

    def check(self) -> None:
        """Refuse values that are meaningless on their own (UserError)."""
        bad = [f"prior.{k}={v}" for k, v in dataclasses.asdict(self.prior).items() if not v > 0]
        bad += [
            f"{k}={getattr(self, k)}"
            for k in ("time_noise", "memory_noise", "max_rows", "max_evaluations")
            if not getattr(self, k) > 0
        ]
        for key in ("bootstrap_samples", "relinearize"):
            if getattr(self, key) < 0:
                bad.append(f"{key}={getattr(self, key)}")
        if not 0 < self.interval < 1:
            bad.append(f"interval={self.interval} (a probability in (0, 1))")
        if not self.probe_pool >= 0:
            bad.append(f"probe_pool={self.probe_pool}")
        if bad:
            raise UserError(f"calibrate: {', '.join(bad)} out of range (widths, noise > 0)")


@dataclass
class TrackingConfig:
    """Where MLflow records a command's run."""

    enabled: bool = MISSING  # record in MLflow
    uri: str = MISSING  # MLflow tracking URI (always set explicitly)
    experiment: str = MISSING  # MLflow experiment name


def _parallel_schema() -> type:
    """``parallel.<field>``: one optional value per layout field (None: not pinned)."""
    hints = {f.name: f.type for f in dataclasses.fields(Layout)}
    rows = []
    for name in LAYOUT_FIELDS:
        kinds = {"int": int, "str": str, "bool": bool, "int | None": int}
        kind = kinds.get(str(hints[name]), list[int])  # a tuple field: a list in the config
        rows.append((name, kind | None, field(default=None)))
    return dataclasses.make_dataclass("ParallelConfig", rows)


ParallelConfig = _parallel_schema()


@dataclass
class AutotuneConfig(JobConfig):
    """The root of ``conf/config.yaml``: ``python -m autotune`` and ``autotune.simulate``."""

    search: SearchConfig = field(default_factory=SearchConfig)
    parallel: Any = field(default_factory=ParallelConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    output: str = MISSING  # table or json
    trace: str | None = MISSING  # simulate: write a Chrome trace here (hierarchical simulator)
    calibration: str | None = MISSING  # a calibration name (conf/calibrations/) or path
    probes: int = MISSING  # search: end with this many layouts to measure (0: none)
    measured: str | None = MISSING  # search: measured probes (CSV) to calibrate on and pick
    probes_out: str = MISSING  # search: the CSV of layouts to measure
    launch_dir: str | None = MISSING  # search: launch files of the best layouts (rank-N/)
    calibrate: CalibrateSettings = field(default_factory=CalibrateSettings)

    def check(self) -> None:
        """Refuse values that are meaningless on their own (UserError)."""
        _check_output(self.output)
        if self.probes < 0:
            raise UserError(f"probes={self.probes} must be >= 0 (0: no layouts to measure)")
        self.calibrate.check()


@dataclass
class RowsConfig:
    """Which rows a calibration is fitted on (``rows.*`` of ``conf/calibrate.yaml``)."""

    cluster: str | None = MISSING  # the cluster every row must be on
    framework: str | None = MISSING  # the framework every row must run
    model: str | None = MISSING  # the model every row must be of
    source: Any = MISSING  # None, a source name or a list of them


@dataclass
class CalibrateConfig:
    """The root of ``conf/calibrate.yaml``: ``python -m autotune.calibrate``."""

    simulator: dict[str, Any] = field(default_factory=dict)
    calibrate: CalibrateSettings = field(default_factory=CalibrateSettings)
    data: str = MISSING  # a measurement file, a shipped source, or public
    name: str = MISSING  # conf/calibrations/<name>.yaml
    out: str | None = MISSING  # write here instead
    rows: RowsConfig = field(default_factory=RowsConfig)
    calibration: str | None = MISSING  # start from this calibration
    output: str = MISSING  # table or json

    def check(self) -> None:
        """Refuse values that are meaningless on their own (UserError)."""
        _check_output(self.output)
        self.calibrate.check()


@dataclass
class ProfileConfig(JobConfig):
    """The root of ``conf/profile.yaml``: ``python -m autotune.profile``."""

    parallel: Any = field(default_factory=ParallelConfig)
    out: str = MISSING  # the CSV cost table written
    device: str = MISSING  # auto, cpu, cuda or npu
    repeats: int = MISSING  # timed runs per operator (median)
    limit: int | None = MISSING  # at most this many distinct operators (None: all)
    budget_s: float | None = MISSING  # seconds of timing, cheapest operators first (None: all)
    output: str = MISSING  # table or json

    def check(self) -> None:
        """Refuse values that are meaningless on their own (UserError)."""
        _check_output(self.output)


@dataclass
class HeuristicConfig:
    """The rule-of-thumb baseline of the benchmark (``conf/benchmark.yaml``)."""

    state_memory_fraction: float = MISSING  # share of device memory the states may fill


@dataclass
class BenchmarkConfig:
    """The root of ``conf/benchmark.yaml``; simulator constants under their names."""

    simulators: Any = MISSING  # a simulator name or a list of them
    baselines: Any = MISSING  # names or a list of them
    peers: bool = MISSING
    data: str = MISSING
    hardware: Any = MISSING  # None, a cluster name or a list of them
    source: Any = MISSING  # None, a source name or a list of them
    output: str = MISSING
    report_dir: str = MISSING
    top_k: int = MISSING
    oom_penalty_regret: float = MISSING
    bootstrap_samples: int = MISSING
    seed: int = MISSING
    heuristic: HeuristicConfig = field(default_factory=HeuristicConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    protocols: Any = MISSING  # a protocol name or a list (autotune/benchmark/_protocols.py)
    probes: list[int] = MISSING  # the K of the probe protocol
    calibration: str | None = MISSING  # also score this calibration (name or path)
    calibrate: CalibrateSettings = field(default_factory=CalibrateSettings)
    analytical: dict[str, Any] = MISSING  # conf/simulator/analytical.yaml, overridable
    hierarchical: dict[str, Any] = MISSING  # conf/simulator/hierarchical.yaml, overridable

    def check(self) -> None:
        """Refuse values that are meaningless on their own (UserError)."""
        _check_output(self.output)
        self.calibrate.check()
        bad = [k for k in self.probes if k < 1]
        if bad:
            raise UserError(f"probes={list(self.probes)}: each K must be >= 1")


def register_schemas() -> None:
    """Register every schema the root configs name in their defaults lists."""
    catalog.register()
    store = ConfigStore.instance()
    store.store(name="autotune_schema", node=AutotuneConfig)
    store.store(name="benchmark_schema", node=BenchmarkConfig)
    store.store(name="profile_schema", node=ProfileConfig)
    store.store(name="calibrate_schema", node=CalibrateConfig)


T = TypeVar("T")
_ROOTS: dict[type, str] = {
    AutotuneConfig: "config",
    BenchmarkConfig: "benchmark",
    ProfileConfig: "profile",
    CalibrateConfig: "calibrate",
}


def load_config(schema: type[T], overrides: Sequence[str] = ()) -> T:
    """A command's typed config, composed with ``overrides`` as on its command line.

    Example:
        >>> from autotune.config import AutotuneConfig, load_config
        >>> load_config(AutotuneConfig, ["search.sampler=grid"]).search.sampler
        'grid'
    """
    register_schemas()
    return typed(catalog.compose(_ROOTS[schema], overrides), schema)


def typed(cfg: DictConfig, schema: type[T]) -> T:
    """The composed config as its schema's dataclass instance (checked once, here).

    Raises:
        UserError: a value the schema refuses, or a required value the config lacks.
    """
    try:
        value = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as exc:
        raise UserError(str(exc).strip().splitlines()[0]) from None
    if not isinstance(value, schema):
        raise TypeError(f"expected a {schema.__name__}, got {type(value).__name__}")
    value.check()  # type: ignore[attr-defined]
    return value


def fixed_layout_values(parallel: Any) -> dict[str, Any]:
    """The ``parallel.*`` values the user set (the others are left to the search)."""
    return {k: getattr(parallel, k) for k in LAYOUT_FIELDS if getattr(parallel, k) is not None}
