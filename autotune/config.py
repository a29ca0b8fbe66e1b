"""Hydra config schemas and the one function that turns a composed config into specs.

The schemas for ``model/`` and ``cluster/`` are derived from the spec dataclasses themselves
(same field names, types and defaults, but mutable so that command-line overrides apply), so a
misspelt key fails at compose time ("Key 'layerz' is not in struct") and a field added to a
spec is configurable at once.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING
from omegaconf import DictConfig
from omegaconf import OmegaConf

from simulators import ClusterSpec
from simulators import DeviceSpec
from simulators import LinkSpec
from simulators import ModelSpec
from simulators import Simulator
from simulators import SpecError
from simulators import TrainSpec
from simulators import UserError
from simulators.registry import make_simulator

__all__ = [
    "CONF_DIR",
    "fixed_layout_values",
    "plain_dict",
    "register_schemas",
    "simulator_from_conf",
    "to_specs",
]


def _schema_of(spec: type, name: str, extra: dict[str, type] | None = None) -> type:
    """A mutable dataclass with the fields of ``spec`` (nested specs become nested schemas);
    ``extra`` adds fields whose defaults are instances of the given dataclasses."""
    hints = typing.get_type_hints(spec)
    rows: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(spec):
        kind = hints[f.name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            nested = _schema_of(kind, f"{kind.__name__}Schema")
            rows.append((f.name, nested, field(default_factory=nested)))
        elif f.default is not dataclasses.MISSING:
            rows.append((f.name, kind, field(default=f.default)))
        else:
            rows.append((f.name, kind, field(default=MISSING)))
    for key, kind in (extra or {}).items():
        rows.append((key, kind, field(default_factory=kind)))
    return dataclasses.make_dataclass(name, rows)


@dataclass
class RecipeSchema:
    """A model's usual training job: the defaults of ``train.seq_len`` / ``global_batch_size``."""

    seq_len: int = 4096
    global_batch_size: int = 512


ModelSchema = _schema_of(ModelSpec, "ModelSchema", {"recipe": RecipeSchema})
ClusterSchema = _schema_of(ClusterSpec, "ClusterSchema")


@dataclass
class TrainSchema:
    seq_len: int = MISSING  # tokens per sequence
    global_batch_size: int = MISSING  # sequences per optimizer step
    precision: str = "bf16"  # bf16, fp16 or fp32
    optimizer: str = "adam"
    flash_attention: bool = True  # fused attention kernels (Megatron --use-flash-attn)


@dataclass
class ParallelSchema:
    """Fixed layout values; ``None`` leaves the dimension to the search (or its default)."""

    dp: int | None = None
    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    ep: int | None = None
    vpp: int | None = None
    micro_batch: int | None = None
    recompute: str | None = None
    recompute_layers: int | None = None
    sequence_parallel: bool | None = None
    distributed_optimizer: bool | None = None


@dataclass
class SearchSchema:
    """The Optuna search; ``conf/search/default.yaml`` documents each field."""

    sampler: str = "tpe"
    n_trials: int = 200
    seed: int = 0
    top_k: int = 5
    storage: str | None = None
    study_name: str | None = None
    max_tp: int = 8
    max_cp: int = 8
    max_vpp: int = 4
    micro_batch: list[int] = field(default_factory=lambda: [1, 2, 4])
    recompute: list[str] = field(default_factory=lambda: ["none", "selective", "full"])
    distributed_optimizer: list[bool] = field(default_factory=lambda: [True, False])
    exhaustive_limit: int = 200000
    polish: float = 0.1


@dataclass
class TrackingSchema:
    enabled: bool = True  # record in MLflow
    uri: str = "sqlite:///mlruns/mlflow.db"  # MLflow tracking URI


@dataclass
class AutotuneSchema:
    """The root of ``conf/config.yaml`` (search) and ``conf/simulate.yaml`` (one layout)."""

    model: Any = MISSING
    cluster: Any = MISSING
    train: Any = MISSING
    simulator: dict[str, Any] = MISSING
    search: SearchSchema = field(default_factory=SearchSchema)
    parallel: ParallelSchema = field(default_factory=ParallelSchema)
    tracking: TrackingSchema = field(default_factory=TrackingSchema)
    output: str = "table"  # table or json
    trace: str | None = None  # simulate: write a Chrome trace here (hierarchical simulator)


def register_schemas() -> None:
    """Register the schemas that the yaml files name in their defaults lists."""
    store = ConfigStore.instance()
    store.store(group="model", name="schema", node=ModelSchema)
    store.store(group="cluster", name="schema", node=ClusterSchema)
    store.store(group="train", name="schema", node=TrainSchema)
    store.store(name="autotune_schema", node=AutotuneSchema)


CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def simulator_from_conf(name: str, conf_dir: Path = CONF_DIR) -> Simulator:
    """The simulator ``name`` with the constants of ``conf/simulator/<name>.yaml``.

    Raises:
        UserError: an unknown simulator name (the message lists the registered ones).
    """
    path = conf_dir / "simulator" / f"{name}.yaml"
    node = OmegaConf.load(path) if path.is_file() else OmegaConf.create({})
    if not isinstance(node, DictConfig):
        raise UserError(f"{path}: expected a mapping of constants")
    constants = plain_dict(node, drop=("name",))
    return make_simulator(name, constants)


def fixed_layout_values(cfg: DictConfig) -> dict[str, Any]:
    """The ``parallel.*`` values the user set (the others are left to the search)."""
    return {k: v for k, v in plain_dict(cfg.parallel).items() if v is not None}


def plain_dict(node: DictConfig, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """A resolved config node as a plain dict, without the keys in ``drop``."""
    values = OmegaConf.to_container(node, resolve=True)
    assert isinstance(values, dict)
    return {str(k): v for k, v in values.items() if k not in drop}


def _reject_unknown(group: str, values: dict[str, Any], spec: type) -> None:
    """``+model.layerz=3`` passes compose (``+`` adds keys); refuse it with the allowed keys."""
    allowed = {f.name for f in dataclasses.fields(spec)}
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise SpecError(
            f"unknown {group} field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )


def to_specs(cfg: DictConfig) -> tuple[ModelSpec, ClusterSpec, TrainSpec]:
    """Build the three specs from a composed config (``model``, ``cluster``, ``train``)."""
    _reject_unknown("model", plain_dict(cfg.model, drop=("recipe",)), ModelSpec)
    _reject_unknown("cluster", plain_dict(cfg.cluster), ClusterSpec)
    _reject_unknown("train", plain_dict(cfg.train), TrainSpec)
    try:
        model = ModelSpec(**plain_dict(cfg.model, drop=("recipe",)))
        cluster_values = plain_dict(cfg.cluster)
        cluster = ClusterSpec(
            **{
                **cluster_values,
                "device": DeviceSpec(**cluster_values["device"]),
                "intra_node": LinkSpec(**cluster_values["intra_node"]),
                "inter_node": LinkSpec(**cluster_values["inter_node"]),
            }
        )
        train = TrainSpec(**plain_dict(cfg.train))
    except TypeError as exc:  # a wrong type that slipped past the schema
        raise SpecError(f"invalid config: {exc}") from None
    return model, cluster, train
