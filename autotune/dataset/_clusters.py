"""The cluster of a measurement row: a catalog cluster sized to the job, with its overrides."""

from __future__ import annotations

import dataclasses
import functools

from autotune import catalog
from autotune.simulators.specs import ClusterSpec

__all__ = ["cluster_names", "sized_cluster"]


def cluster_names() -> tuple[str, ...]:
    """Names of the catalog clusters (``conf/cluster/<name>.yaml``), sorted."""
    return catalog.options("cluster")


@functools.cache
def _catalog_cluster(name: str) -> ClusterSpec:
    """``conf/cluster/<name>.yaml``, composed once per process (specs are values)."""
    return catalog.load_cluster(name)


@functools.lru_cache(maxsize=4096)
def sized_cluster(
    name: str,
    num_devices: int,
    *,
    devices_per_node: int | None = None,
    device_memory_gib: float | None = None,
    intra_node_gbps: float | None = None,
    inter_node_gbps: float | None = None,
) -> ClusterSpec:
    """The catalog cluster ``name`` sized to ``num_devices``, with a measurement's overrides.

    A job smaller than one node runs on one node of ``num_devices`` devices, so that the
    cluster has exactly the devices the layout uses. Results are cached: a table has few
    distinct clusters, and composing one takes milliseconds.

    Raises:
        UserError: an unknown cluster name (the message lists the catalog's clusters).
        SpecError: an override the specs refuse.
    """
    base = _catalog_cluster(name)
    device, intra, inter = base.device, base.intra_node, base.inter_node
    if device_memory_gib is not None:
        device = dataclasses.replace(device, memory_gib=device_memory_gib)
    if intra_node_gbps is not None:
        intra = dataclasses.replace(intra, bandwidth_gbps=intra_node_gbps)
    if inter_node_gbps is not None:
        inter = dataclasses.replace(inter, bandwidth_gbps=inter_node_gbps)
    per_node = min(devices_per_node or base.devices_per_node, num_devices)
    return dataclasses.replace(
        base,
        device=device,
        intra_node=intra,
        inter_node=inter,
        devices_per_node=per_node,
        num_nodes=-(-num_devices // per_node),
    )
