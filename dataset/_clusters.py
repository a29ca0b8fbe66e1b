"""The cluster of a measurement row: a catalog cluster sized to the job, with its overrides."""

from __future__ import annotations

import dataclasses

import catalog
from simulators.specs import ClusterSpec

__all__ = ["cluster_names", "sized_cluster"]


def cluster_names() -> tuple[str, ...]:
    """Names of the catalog clusters (``conf/cluster/<name>.yaml``), sorted."""
    return catalog.options("cluster")


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
    cluster has exactly the devices the layout uses.

    Raises:
        UserError: an unknown cluster name (the message lists the catalog's clusters).
    """
    overrides = [
        f"cluster.{key}={value}"
        for key, value in (
            ("device.memory_gib", device_memory_gib),
            ("intra_node.bandwidth_gbps", intra_node_gbps),
            ("inter_node.bandwidth_gbps", inter_node_gbps),
        )
        if value is not None
    ]
    base = catalog.load_cluster(name, overrides)
    per_node = min(devices_per_node or base.devices_per_node, num_devices)
    return dataclasses.replace(
        base, devices_per_node=per_node, num_nodes=-(-num_devices // per_node)
    )
