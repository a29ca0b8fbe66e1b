"""Cluster entries of ``conf/cluster/*.yaml``, read without Hydra, with a row's overrides."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from simulators.errors import SpecError
from simulators.specs import ClusterSpec
from simulators.specs import DeviceSpec
from simulators.specs import LinkSpec

__all__ = ["CONF_DIR", "build_cluster", "cluster_names"]

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def cluster_names(conf_dir: Path = CONF_DIR) -> tuple[str, ...]:
    """Names of the cluster entries (``conf/cluster/<name>.yaml``), sorted."""
    return tuple(sorted(p.stem for p in (conf_dir / "cluster").glob("*.yaml")))


@lru_cache(maxsize=64)
def _entry(path: Path) -> dict[str, Any]:
    node = OmegaConf.load(path)
    values = OmegaConf.to_container(node, resolve=True)
    if not isinstance(values, dict):
        raise SpecError(f"{path}: expected a mapping")
    values.pop("defaults", None)
    return {str(k): v for k, v in values.items()}


def build_cluster(
    name: str,
    num_devices: int,
    *,
    devices_per_node: int | None = None,
    device_memory_gib: float | None = None,
    intra_node_gbps: float | None = None,
    inter_node_gbps: float | None = None,
    conf_dir: Path = CONF_DIR,
) -> ClusterSpec:
    """The cluster ``name`` sized to ``num_devices``, with a measurement's own overrides.

    A job smaller than one node runs on one node of ``num_devices`` devices, so that the
    cluster has exactly the devices the layout uses.
    """
    path = conf_dir / "cluster" / f"{name}.yaml"
    if not path.is_file():
        raise SpecError(
            f"unknown cluster {name!r}; available: {', '.join(cluster_names(conf_dir))}"
        )
    values = _entry(path)
    device = dict(values["device"])
    intra = dict(values["intra_node"])
    inter = dict(values["inter_node"])
    if device_memory_gib is not None:
        device["memory_gib"] = device_memory_gib
    if intra_node_gbps is not None:
        intra["bandwidth_gbps"] = intra_node_gbps
    if inter_node_gbps is not None:
        inter["bandwidth_gbps"] = inter_node_gbps
    per_node = devices_per_node or int(values["devices_per_node"])
    per_node = min(per_node, num_devices)
    try:
        return ClusterSpec(
            name=str(values["name"]),
            device=DeviceSpec(**device),
            devices_per_node=per_node,
            num_nodes=-(-num_devices // per_node),
            intra_node=LinkSpec(**intra),
            inter_node=LinkSpec(**inter),
        )
    except TypeError as exc:
        raise SpecError(f"cluster {name!r} ({path}): {exc}") from None
