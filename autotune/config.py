"""The commands' config schemas, and the one step that turns a composed config into types.

Each command composes its root config (``conf/config.yaml`` for search and simulate,
``conf/benchmark.yaml``) and converts it once with :func:`typed` into the dataclasses below;
from there on everything is typed. The values (and so the defaults) of these settings live in
the yaml files; the schemas give their types, and ``MISSING`` marks what the yaml must set.
The job groups' schemas (model, cluster, train) come from :mod:`catalog`.
"""

# size: the commands' schemas and their checks are one table of settings, each beside its check

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any
from typing import TypeVar

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING
from omegaconf import DictConfig
from omegaconf import OmegaConf
from omegaconf.errors import MissingMandatoryValue
from omegaconf.errors import OmegaConfBaseException

from autotune import catalog
from autotune.catalog import JobConfig
from autotune.simulators import UserError
from autotune.simulators.calibration import FACTORS
from autotune.simulators.files import check_output_path
from autotune.simulators.layout import LAYOUT_FIELDS
from autotune.simulators.layout import RECOMPUTE_MODES
from autotune.simulators.layout import ZERO_STAGES
from autotune.simulators.layout import Layout
from autotune.simulators.limits import MAX_BATCH
from autotune.simulators.limits import MAX_DEVICES
from autotune.simulators.limits import MAX_SEED
from autotune.simulators.names import check_name
from autotune.simulators.registry import SIMULATOR_NAMES

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
    "config_yaml",
    "fixed_layout_values",
    "hide_passwords",
    "load_config",
    "register_schemas",
    "typed",
]


OUTPUTS = ("table", "json")
# A study of this many trials runs for hours; more is a typo (1e11), not a search.
MAX_TRIALS = 100_000
MAX_REPEATS = 1_000  # profile: timed runs per operator (the median of 1,000 is settled)
# profile: seconds of timing; a layout's few hundred distinct operators take minutes on a CPU
MAX_BUDGET_S = 86_400.0
MAX_BOOTSTRAP = 1_000_000  # benchmark: resamples (2,000 give a 95% interval to ~1%)
MAX_PROBES = 1_000  # layouts to measure: a job's measured sweeps hold a few dozen
MAX_RELINEARIZE = 100  # calibrate: Gauss-Newton steps (3 settle; each costs a robust fit)


def _check_output(output: str) -> None:
    if output not in OUTPUTS:
        raise UserError(f"unknown output {output!r}; allowed: {', '.join(OUTPUTS)}")


def _at_least(key: str, value: float, low: float) -> None:
    if not value >= low:
        raise UserError(f"{key}={value!r} must be >= {low}")


def _between(key: str, value: float, low: float, high: float, what: str = "") -> None:
    """``value`` in [low, high] (NaN is not)."""
    if not low <= value <= high:
        raise UserError(f"{key}={value!r} must be from {low:,} to {high:,}{what}")


def _positive(key: str, value: float, what: str = "") -> None:
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"{key}={value!r} must be a finite number > 0{what}")


def _share(key: str, value: float, what: str, *, zero_allowed: bool = False) -> None:
    """``value`` in (0, 1), or in [0, 1) with ``zero_allowed`` (NaN is in neither)."""
    if not ((value >= 0 if zero_allowed else value > 0) and value < 1):
        low = "from 0 to" if zero_allowed else "above 0 and"
        raise UserError(f"{key}={value!r} must be {low} below 1{what}")


def _check_given(key: str, value: str, allowed: str) -> None:
    """A path or name that is not empty (``Path('')`` is the working folder)."""
    if not value.strip():
        raise UserError(f"{key}={value!r} is empty; give {allowed}")


def _check_margin(key: str, margin: float | None) -> None:
    """A memory margin given by hand: None (derived) or a fraction of the predicted peak."""
    if margin is not None:
        _between(key, margin, 0, 1, " (a fraction of the predicted peak memory: 0.05 is 5%)")


def _check_names(key: str, value: Any, *, empty_allowed: bool = False) -> None:
    """A name or a flat list of names (``x``, ``[x,y]``; None: no filter), none twice."""
    if value is None:
        return
    values = list(value) if isinstance(value, list | tuple) else [value]
    if not values and not empty_allowed:
        raise UserError(f"{key}=[] is empty; give at least one, or leave {key} unset")
    for name in values:
        if isinstance(name, list | tuple | dict) or name is None:
            raise UserError(f"{key}: {name!r} is not a name; give NAME or [NAME,...]")
    _once_each(key, values)


def _once_each(key: str, values: Any) -> None:
    """Refuse a list setting that names one value twice: its rows or candidates would be
    counted twice (``simulators=[analytical,analytical]`` scores every row twice)."""
    if not isinstance(values, list | tuple):
        return
    twice = [value for value in dict.fromkeys(values) if values.count(value) > 1]
    if twice:
        given = ",".join(map(_plain, values))
        raise UserError(
            f"{key}=[{given}] names {', '.join(map(_plain, twice))} more than once; give each once"
        )


def _plain(value: Any) -> str:
    """A value as written on the command line (``true``, not ``True``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _check_seed(key: str, seed: int) -> None:
    _between(key, seed, 0, MAX_SEED, " (the range of Optuna's and numpy's seeds)")


def _check_calibration(key: str, value: str | None) -> None:
    """A calibration to apply: a path, or a name of ./calibrations/ (read when used)."""
    if value is not None:
        catalog.check_calibration(key, value)


def _check_parallel(parallel: Any) -> None:
    """Each pinned ``parallel.*`` value on its own (a degree >= 1, a known recompute mode), as
    the layout it pins checks it; the rules between fields and the job come later
    (``Layout.violations``)."""
    Layout.resolve(1, **fixed_layout_values(parallel))


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
    max_etp: int = MISSING
    micro_batch: list[int] = MISSING
    recompute: list[str] = MISSING
    distributed_optimizer: list[bool] = MISSING
    zero_stages: list[int] = MISSING
    max_dp_replicate: int = MISSING
    polish: float = MISSING
    grid_budget_s: float = MISSING
    rerank: str | None = MISSING
    rerank_top: int = MISSING
    workers: int = MISSING
    memory_margin: float | None = MISSING  # None: derived (autotune/calibrate/_apply.py)

    def check(self) -> None:
        """Refuse values meaningless on their own (UserError); the sampler and rerank names
        are checked by the search, which knows them."""
        _between("search.n_trials", self.n_trials, 1, MAX_TRIALS, " (trials of one study)")
        _check_seed("search.seed", self.seed)
        _check_margin("search.memory_margin", self.memory_margin)
        for key in ("top_k", "rerank_top", "workers"):
            _at_least(f"search.{key}", getattr(self, key), 1)
        for key in ("max_tp", "max_cp", "max_vpp", "max_etp", "max_dp_replicate"):
            _between(f"search.{key}", getattr(self, key), 1, MAX_DEVICES)
        if not 0 <= self.polish < 1:
            raise UserError(
                f"search.polish={self.polish!r} must be from 0 to below 1 (a share of the trials)"
            )
        if not (math.isfinite(self.grid_budget_s) and self.grid_budget_s > 0):
            raise UserError(
                f"search.grid_budget_s={self.grid_budget_s!r} must be a finite number of "
                "seconds > 0 (search.sampler=grid prices every layout whatever it costs)"
            )
        for key in ("micro_batch", "recompute", "distributed_optimizer"):
            if not getattr(self, key):
                raise UserError(f"search.{key}=[] is empty; give at least one value to try")
            _once_each(f"search.{key}", getattr(self, key))
        for size in self.micro_batch:
            _between("search.micro_batch", size, 1, MAX_BATCH, " sequences")
        _once_each("search.zero_stages", self.zero_stages)
        for stage in self.zero_stages:
            if stage not in ZERO_STAGES:
                raise UserError(
                    f"search.zero_stages: {stage!r} is not a ZeRO stage (0, 1, 2 or 3; 0 and 1 "
                    "are search.distributed_optimizer's false and true)"
                )
        for mode in self.recompute:
            if mode not in RECOMPUTE_MODES:
                raise UserError(
                    f"search.recompute: {mode!r} is not one of {', '.join(RECOMPUTE_MODES)}"
                )
        if self.study_name is not None:
            check_name("search.study_name", self.study_name)


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
    stop_gain: float = MISSING  # probes stop when no layout likely beats the best by this share
    stop_probability: float = MISSING  # "likely": that any one does, above this (0.05)

    def check(self) -> None:
        """Refuse values that are meaningless on their own, and counts that would run for
        ever or exhaust memory (UserError)."""
        for name, width in dataclasses.asdict(self.prior).items():
            _positive(f"calibrate.prior.{name}", width, " (a prior width)")
        _positive("calibrate.time_noise", self.time_noise, " (a log step-time error)")
        _positive("calibrate.memory_noise", self.memory_noise, " (a log memory error)")
        _at_least("calibrate.max_rows", self.max_rows, 1)
        _between("calibrate.max_evaluations", self.max_evaluations, 1, MAX_TRIALS, " solver steps")
        _between(
            "calibrate.relinearize", self.relinearize, 0, MAX_RELINEARIZE, " (0: an exact fit)"
        )
        _between(
            "calibrate.bootstrap_samples", self.bootstrap_samples, 0, MAX_BOOTSTRAP, " (0: none)"
        )
        _check_seed("calibrate.seed", self.seed)
        _share("calibrate.interval", self.interval, " (a probability)")
        _share(
            "calibrate.stop_gain", self.stop_gain, " (a share of the step time)", zero_allowed=True
        )
        _share("calibrate.stop_probability", self.stop_probability, " (a probability)")


@dataclass
class TrackingConfig:
    """Where MLflow records a command's run."""

    enabled: bool = MISSING  # record in MLflow
    uri: str = MISSING  # MLflow tracking URI (always set explicitly)
    experiment: str = MISSING  # MLflow experiment name

    def check(self) -> None:
        """Refuse an empty URI or an experiment that is not a name when tracking is on (the
        URI itself is checked by ``autotune.tracking.check_tracking``, which may reach a
        server)."""
        if self.enabled:
            if not self.uri.strip():
                raise UserError(
                    f"tracking.uri={self.uri!r} is empty; give one, or tracking.enabled=false "
                    "to record nothing"
                )
            check_name("tracking.experiment", self.experiment)


def _parallel_schema() -> type:
    """``parallel.<field>``: one optional value per layout field (None: not pinned)."""
    hints = {f.name: f.type for f in dataclasses.fields(Layout)}
    rows = []
    for name in LAYOUT_FIELDS:
        kinds = {"int": int, "str": str, "bool": bool, "int | None": int}
        kinds["tuple[str, ...] | None"] = list[str]  # a tuple field: a list in the config
        kind = kinds.get(str(hints[name]), list[int])
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
    calibration: str | None = MISSING  # a calibration name (./calibrations/) or path
    probes: int = MISSING  # search: end with this many layouts to measure (0: none)
    measured: str | None = MISSING  # search: measured probes (CSV) to calibrate on and pick
    probes_out: str = MISSING  # search: the CSV of layouts to measure
    launch_dir: str | None = MISSING  # search: launch files of the best layouts (rank-N/)
    calibrate: CalibrateSettings = field(default_factory=CalibrateSettings)

    def check(self) -> None:
        """Refuse values that are meaningless on their own (UserError)."""
        _check_output(self.output)
        _check_parallel(self.parallel)
        self.search.check()
        self.tracking.check()
        if self.trace is not None:
            check_output_path("trace", self.trace)
        _between("probes", self.probes, 0, MAX_PROBES, " layouts to measure (0: none)")
        _check_calibration("calibration", self.calibration)
        if self.measured is not None:
            _check_given("measured", self.measured, "the filled-in probes CSV, or leave it unset")
        if self.probes > 0:
            check_output_path("probes_out", self.probes_out)
        self.calibrate.check()


@dataclass
class RowsConfig:
    """Which rows a calibration is fitted on (``rows.*`` of ``conf/calibrate.yaml``)."""

    cluster: str | None = MISSING  # the cluster every row must be on
    framework: str | None = MISSING  # the framework every row must run
    model: str | None = MISSING  # the model every row must be of
    source: Any = MISSING  # None, a source name or a list of them
    hardware: Any = MISSING  # None, or the cluster(s) whose rows are kept
    exclude_model: Any = MISSING  # None, or the model(s) whose rows are left out


@dataclass
class CalibrateConfig:
    """The root of ``conf/calibrate.yaml``: ``python -m autotune.calibrate``."""

    simulator: dict[str, Any] = field(default_factory=dict)
    calibrate: CalibrateSettings = field(default_factory=CalibrateSettings)
    data: str = MISSING  # a measurement file, a shipped source, or public
    name: str = MISSING  # calibrations/<name>.yaml
    out: str | None = MISSING  # write here instead
    rows: RowsConfig = field(default_factory=RowsConfig)
    calibration: str | None = MISSING  # start from this calibration
    output: str = MISSING  # table or json

    def check(self) -> None:
        """Refuse values that are meaningless on their own (UserError), and a file that
        could not be written."""
        _check_output(self.output)
        _check_given("data", self.data, "public, a shipped source or a file path")
        catalog.check_calibration_name("name", self.name)
        _check_calibration("calibration", self.calibration)
        for key in ("source", "hardware", "exclude_model"):
            _check_names(f"rows.{key}", getattr(self.rows, key))
        self.calibrate.check()
        if self.out is not None:
            check_output_path("out", self.out)
            if not self.out.endswith((".yaml", ".yml")):
                raise UserError(
                    f"out={self.out!r}: a calibration is a .yaml or .yml file (what "
                    "calibration= reads as a path); give such a name"
                )
        else:
            check_output_path("name", self.output_path(), given=self.name)

    def output_path(self) -> Path:
        """Where the calibration is written: ``out``, else ``calibrations/<name>.yaml`` of the
        working directory."""
        if self.out is not None:
            return Path(self.out)
        return catalog.calibration_file(self.name)


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
        _check_parallel(self.parallel)
        _between("repeats", self.repeats, 1, MAX_REPEATS, " timed runs per operator")
        if self.limit is not None:
            _at_least("limit", self.limit, 1)
        if self.budget_s is not None and not 0 < self.budget_s <= MAX_BUDGET_S:
            raise UserError(
                f"budget_s={self.budget_s!r} must be above 0 and at most {MAX_BUDGET_S:,.0f} "
                "(a day of timing), or null to time every operator"
            )
        check_output_path("out", self.out)


@dataclass
class HeuristicConfig:
    """The rule-of-thumb baseline of the benchmark (``conf/benchmark.yaml``)."""

    state_memory_fraction: float = MISSING  # share of device memory the states may fill


@dataclass
class BenchmarkConfig:
    """The root of ``conf/benchmark.yaml``; simulator constants under ``simulator.<name>``."""

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
    protocols: Any = MISSING  # a protocol name or a list (autotune/calibrate/_protocols.py)
    probes: list[int] = MISSING  # the K of the probe protocol
    workers: int = MISSING  # processes fitting the calibrations of two protocols at once
    calibration: str | None = MISSING  # also score this calibration (name or path)
    memory_margin: float | None = MISSING  # zero-shot fits; None: each simulator's shipped one
    calibrate: CalibrateSettings = field(default_factory=CalibrateSettings)
    # name -> conf/simulator/<name>.yaml, for every registered simulator (overridable)
    simulator: dict[str, dict[str, Any]] = MISSING

    def check(self) -> None:
        """Refuse values that are meaningless on their own (UserError)."""
        _check_output(self.output)
        self.calibrate.check()
        for key in ("simulators", "baselines"):  # none: score only the others
            _check_names(key, getattr(self, key), empty_allowed=True)
        if not self.simulators and not self.baselines:
            raise UserError(
                "simulators=[] and baselines=[]: nothing to score; give a simulator "
                "(simulators=[analytical]) or a baseline (baselines=[random])"
            )
        for key in ("hardware", "source", "protocols"):
            _check_names(key, getattr(self, key))
        _once_each("probes", self.probes)
        if not self.probes or not 1 <= min(self.probes) <= max(self.probes) <= MAX_PROBES:
            raise UserError(
                f"probes={list(self.probes)}: give at least one K, each from 1 to {MAX_PROBES:,} "
                "(layouts measured per scenario)"
            )
        _check_given("data", self.data, "public, a shipped source or a file path")
        _at_least("top_k", self.top_k, 1)
        _at_least("workers", self.workers, 1)
        _between("bootstrap_samples", self.bootstrap_samples, 1, MAX_BOOTSTRAP, " resamples")
        _between(
            "oom_penalty_regret",
            self.oom_penalty_regret,
            0,
            1,
            " (the regret charged for a pick that ran out of memory)",
        )
        _check_seed("seed", self.seed)
        _check_margin("memory_margin", self.memory_margin)
        _check_calibration("calibration", self.calibration)
        fraction = self.heuristic.state_memory_fraction
        if not 0 < fraction <= 1:
            raise UserError(
                f"heuristic.state_memory_fraction={fraction!r} must be in (0, 1] "
                "(a share of device memory)"
            )
        check_output_path("report_dir", self.report_dir, folder=True)
        self.tracking.check()


def register_schemas() -> None:
    """Register every schema the root configs name in their defaults lists."""
    catalog.register()
    store = ConfigStore.instance()
    store.store(name="autotune_schema", node=AutotuneConfig)
    store.store(name="benchmark_schema", node=BenchmarkConfig)
    store.store(name="benchmark_simulators", node=_every_simulator())
    store.store(name="profile_schema", node=ProfileConfig)
    store.store(name="calibrate_schema", node=CalibrateConfig)


def _every_simulator() -> dict[str, Any]:
    """A config whose defaults list puts ``conf/simulator/<name>.yaml`` of every registered
    simulator under ``simulator.<name>`` (the benchmark scores any of them)."""
    return {"defaults": [{f"simulator@simulator.{name}": name} for name in SIMULATOR_NAMES]}


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
    except MissingMandatoryValue as exc:
        raise UserError(
            f"{exc.full_key}= is required and has no default: give it on the command line "
            f"({exc.full_key}=...; --help lists the settings)"
        ) from None
    except OmegaConfBaseException as exc:
        raise UserError(str(exc).strip().splitlines()[0]) from None
    if not isinstance(value, schema):
        raise TypeError(f"expected a {schema.__name__}, got {type(value).__name__}")
    value.check()  # type: ignore[attr-defined]
    return value


def fixed_layout_values(parallel: Any) -> dict[str, Any]:
    """The ``parallel.*`` values the user set (the others are left to the search)."""
    return {k: getattr(parallel, k) for k in LAYOUT_FIELDS if getattr(parallel, k) is not None}


# The password of a URL: postgresql://USER:PASSWORD@HOST/DB (search.storage, tracking.uri).
_PASSWORD = re.compile(r"(?P<user>://[^/:@\s]*):[^/@\s]*@")


def config_yaml(config: Any) -> str:
    """A typed config as YAML, every password of a URL in it written ``***``.

    Example:
        >>> from autotune.config import AutotuneConfig, config_yaml, load_config
        >>> url = "search.storage=postgresql://me:secret@db/optuna"
        >>> "me:***@db" in config_yaml(load_config(AutotuneConfig, [url]))
        True
    """
    return hide_passwords(OmegaConf.to_yaml(OmegaConf.structured(config)))


def hide_passwords(text: str) -> str:
    """``text`` with the password of every URL in it written ``***``."""
    return _PASSWORD.sub(r"\g<user>:***@", text)
