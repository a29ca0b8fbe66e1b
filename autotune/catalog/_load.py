"""Specs and simulators from composed configs, and the catalog loaders built on them."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig
from omegaconf import OmegaConf

from autotune.catalog._compose import compose
from autotune.catalog._compose import options
from autotune.catalog._schemas import register
from autotune.simulators import ClusterSpec
from autotune.simulators import DeviceSpec
from autotune.simulators import Job
from autotune.simulators import LinkSpec
from autotune.simulators import ModelSpec
from autotune.simulators import Simulator
from autotune.simulators import SpecError
from autotune.simulators import TrainSpec
from autotune.simulators import UserError
from autotune.simulators.frameworks import FrameworkSpec
from autotune.simulators.registry import make_simulator

__all__ = [
    "PricedJob",
    "job_from_config",
    "load_cluster",
    "load_framework",
    "load_job",
    "load_model",
    "load_simulator",
    "plain",
    "priced_job_from_config",
    "simulator_constants",
    "simulator_from_config",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class PricedJob:
    """A training job and the simulator that prices it."""

    job: Job
    simulator: Simulator


def plain(node: Any) -> Any:
    """A config node (or a structured-config object) as plain dicts and lists, resolved."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        node = OmegaConf.structured(node)
    if isinstance(node, DictConfig) or OmegaConf.is_config(node):
        return OmegaConf.to_container(node, resolve=True)
    return node


def _spec(kind: type, values: Mapping[str, Any], what: str) -> Any:
    try:
        return kind(**values)
    except TypeError as exc:  # a wrong type that slipped past the schema
        raise SpecError(f"invalid {what}: {exc}") from None


def model_from_config(node: Any) -> ModelSpec:
    values = dict(plain(node))
    values.pop("recipe", None)
    spec: ModelSpec = _spec(ModelSpec, values, "model")
    return spec


def cluster_from_config(node: Any) -> ClusterSpec:
    values = dict(plain(node))
    values["device"] = _spec(DeviceSpec, values["device"], "cluster.device")
    values["intra_node"] = _spec(LinkSpec, values["intra_node"], "cluster.intra_node")
    values["inter_node"] = _spec(LinkSpec, values["inter_node"], "cluster.inter_node")
    spec: ClusterSpec = _spec(ClusterSpec, values, "cluster")
    return spec


def train_from_config(node: Any, cluster: ClusterSpec, release: str | None = None) -> TrainSpec:
    """The training step of a ``train`` node; its framework is loaded by name (None: the
    cluster's default) at ``release`` (None: its yaml's), and the step is checked against the
    cluster (FP8 needs FP8 cores)."""
    values = dict(plain(node))
    name = values.get("framework")
    values["framework"] = load_framework(
        cluster.default_framework if name is None else name, release
    )
    spec: TrainSpec = _spec(TrainSpec, values, "train")
    spec.check_on(cluster)
    return spec


@functools.lru_cache(maxsize=32)
def load_framework(name: str, release: str | None = None) -> FrameworkSpec:
    """The framework ``conf/framework/<name>.yaml`` (how a software stack runs a step), with
    launch files written for ``release`` (None: the release the yaml names).

    Raises:
        UserError: ``name`` is not a file of ``conf/framework/``, or ``release`` is not one of
            its ``releases``.
    """
    if name not in options("framework"):
        raise UserError(
            f"unknown framework {name!r}; available: {', '.join(options('framework'))}"
        )
    values = dict(plain(compose(None, [f"+framework={name}"]).framework))
    if release is not None:
        values["release"] = release
    return FrameworkSpec.from_mapping(name, values)


def simulator_from_config(node: Any) -> Simulator:
    """The simulator named by a ``simulator`` node (its ``name`` and constants)."""
    constants = dict(plain(node))
    name = str(constants.pop("name"))
    return make_simulator(name, constants)


def _release(cfg: Any) -> str | None:
    """``framework.release`` of a composed config (None where it has no ``framework``)."""
    framework = getattr(cfg, "framework", None)
    return None if framework is None else framework.release


def job_from_config(cfg: Any) -> Job:
    """The job of a composed config with the groups ``model``, ``cluster`` and ``train``."""
    cluster = cluster_from_config(cfg.cluster)
    return Job(
        model=model_from_config(cfg.model),
        cluster=cluster,
        train=train_from_config(cfg.train, cluster, _release(cfg)),
    )


def priced_job_from_config(cfg: Any) -> PricedJob:
    """The job and the simulator of a composed config with a job's four groups."""
    return PricedJob(job=job_from_config(cfg), simulator=simulator_from_config(cfg.simulator))


@functools.lru_cache(maxsize=256)
def _job_config(overrides: tuple[str, ...]) -> DictConfig:
    register()
    return compose("job", overrides)


def load_job(
    model: str = "llama70b", cluster: str = "ascend", overrides: Sequence[str] = ()
) -> Job:
    """A catalog job by name, with Hydra-style overrides (``load_simulator`` gives a
    simulator to price it).

    Example:
        >>> from autotune import catalog
        >>> job = catalog.load_job("llama70b", "ascend", ["cluster.num_nodes=16"])
        >>> job.model.name, job.cluster.num_devices, job.train.seq_len
        ('Llama-3.1-70B', 128, 8192)
    """
    return job_from_config(_job_config((f"model={model}", f"cluster={cluster}", *overrides)))


def load_model(name: str, overrides: Sequence[str] = ()) -> ModelSpec:
    """The model ``conf/model/<name>.yaml`` (``overrides`` like ``model.num_layers=4``)."""
    return model_from_config(_job_config((f"model={name}", *overrides)).model)


def load_cluster(name: str, overrides: Sequence[str] = ()) -> ClusterSpec:
    """The cluster ``conf/cluster/<name>.yaml`` (``overrides`` like ``cluster.num_nodes=2``)."""
    return cluster_from_config(_job_config((f"cluster={name}", *overrides)).cluster)


def simulator_constants(name: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The constants of ``conf/simulator/<name>.yaml`` (without ``name``) as a plain dict."""
    constants = dict(plain(_job_config((f"simulator={name}", *overrides)).simulator))
    constants.pop("name", None)
    return constants


def load_simulator(name: str, overrides: Sequence[str] = ()) -> Simulator:
    """The simulator ``conf/simulator/<name>.yaml`` with its constants (and overrides)."""
    return simulator_from_config(_job_config((f"simulator={name}", *overrides)).simulator)
