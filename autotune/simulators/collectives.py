"""Alpha-beta cost of collectives on a two-level (intra-node, inter-node) topology.

Groups are placed as Megatron-LM places them: ranks are numbered node by node, and a group of
``size`` ranks takes every ``stride``-th rank (TP stride 1, CP stride tp, DP stride tp*cp, PP
stride world/pp; the expert grid puts EP at stride tp). Multi-node collectives are
hierarchical, as NCCL and HCCL run them (docs/reference.md 3.6): reduce-scatter inside the
node, the node-level collective on 1/g of the data across nodes (all g NICs busy, unless a
communicator over whole nodes was measured slower: ``LinkSpec.whole_node_gbps``), all-gather
inside the node. Each level used adds its ``latency_us`` once, a fixed cost per collective
call (launch and synchronisation, msmodeling's ``comm_op_cost_s``), and ``step_latency_us``
for each member beyond the first of that level (the slope of a measured latency curve, where
the cluster has one).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from autotune.simulators.specs import ClusterSpec
from autotune.simulators.specs import LinkSpec

__all__ = [
    "GroupPlacement",
    "all_gather_time_s",
    "all_reduce_time_s",
    "all_to_all_time_s",
    "deepep_time_s",
    "p2p_time_s",
    "place_group",
    "reduce_scatter_time_s",
    "ring_exchange_time_s",
]


@dataclass(frozen=True, slots=True)
class GroupPlacement:
    """How a communication group of ``size`` ranks, ``stride`` ranks apart, spreads over nodes."""

    size: int
    stride: int  # rank distance between neighbouring members
    per_node: int  # members that share one node
    nodes: int  # nodes the group spans

    def same_node(self, member_a: int, member_b: int, devices_per_node: int) -> bool:
        """Whether two members (0-based positions in the group) share a node in every group
        of this kind (in one that straddles a node boundary they may not)."""
        return all(
            (first + member_a * self.stride) // devices_per_node
            == (first + member_b * self.stride) // devices_per_node
            for first in _first_positions(self.size, self.stride, devices_per_node)
        )


@functools.lru_cache(maxsize=4096)
def place_group(size: int, stride: int, devices_per_node: int) -> GroupPlacement:
    """Members per node of a group of ``size`` ranks taken every ``stride`` ranks.

    All groups of one kind run their collectives at once and the step waits for the slowest,
    so the placement is that of the worst group: the fewest members any of its nodes holds
    (that node's NICs carry the largest share of the data), over as many nodes as the group
    needs at that density. A group may straddle a node boundary: tp 3 on nodes of 8 puts
    ranks 6, 7 | 8 in one group, which crosses nodes like three single-member nodes. 6 members
    2 apart (0, 2, 4, 6 | 8, 10) hold 2 on their emptier node, so they count as 3 nodes of 2.
    """
    if size <= 1:
        return GroupPlacement(1, stride, 1, 1)
    if stride >= devices_per_node:  # every member on a node of its own
        return GroupPlacement(size, stride, 1, size)
    fewest = size
    for first in _first_positions(size, stride, devices_per_node):
        members = np.bincount((first + np.arange(size) * stride) // devices_per_node)
        fewest = min(fewest, int(members[members > 0].min()))
    return GroupPlacement(size, stride, fewest, -(-size // fewest))


@functools.lru_cache(maxsize=4096)
def _first_positions(size: int, stride: int, devices_per_node: int) -> tuple[int, ...]:
    """Where in its node the first member of each group of this kind sits (a group's spread
    over nodes depends on nothing else). Groups start at block * size * stride + offset, with
    offset < stride, so the positions repeat after devices_per_node / gcd(size * stride,
    devices_per_node) blocks."""
    blocks = devices_per_node // math.gcd(size * stride, devices_per_node)
    return tuple(
        sorted(
            {
                (block * size * stride + offset) % devices_per_node
                for block in range(blocks)
                for offset in range(min(stride, devices_per_node))
            }
        )
    )


def _gbps(value: float) -> float:
    return value * 1e9


def _level_times_s(
    nbytes: float, group: GroupPlacement, cluster: ClusterSpec, factor: float
) -> float:
    """Bandwidth + latency time of a reduce-scatter/all-gather-like pass (factor 1) or an
    all-reduce (factor 2) of ``nbytes`` over the group, hierarchically."""
    time = 0.0
    if group.per_node > 1:
        n = group.per_node
        bw = _gbps(cluster.intra_node.group_bandwidth_gbps(n))
        time += factor * (n - 1) / n * nbytes / bw + _latency_s(cluster.intra_node, n)
    if group.nodes > 1:
        k = group.nodes
        link = cluster.inter_node
        node_bw = group.per_node * link.bandwidth_gbps * link.efficiency
        if link.whole_node_gbps and group.per_node == cluster.devices_per_node:
            node_bw = min(node_bw, link.whole_node_gbps)  # as measured over whole nodes
        # each node's members move 1/per_node of the data each: the whole buffer per node
        time += factor * (k - 1) / k * nbytes / _gbps(node_bw) + _latency_s(link, k)
    return time


def _latency_s(link: LinkSpec, members: int) -> float:
    """Latency of one collective call over ``members`` ranks of one level."""
    return (link.latency_us + (members - 1) * link.step_latency_us) * 1e-6


def all_reduce_time_s(nbytes: float, group: GroupPlacement, cluster: ClusterSpec) -> float:
    """Ring/mesh all-reduce of a buffer of ``nbytes``: 2(n-1)/n * S / B per level."""
    return _level_times_s(nbytes, group, cluster, 2.0) if group.size > 1 else 0.0


def reduce_scatter_time_s(nbytes: float, group: GroupPlacement, cluster: ClusterSpec) -> float:
    """Reduce-scatter of a full buffer of ``nbytes``: (n-1)/n * S / B per level."""
    return _level_times_s(nbytes, group, cluster, 1.0) if group.size > 1 else 0.0


def all_gather_time_s(nbytes: float, group: GroupPlacement, cluster: ClusterSpec) -> float:
    """All-gather into a full buffer of ``nbytes``: (n-1)/n * S / B per level."""
    return reduce_scatter_time_s(nbytes, group, cluster)


def all_to_all_time_s(send_bytes: float, group: GroupPlacement, cluster: ClusterSpec) -> float:
    """All-to-all where each rank sends ``send_bytes`` spread evenly over the group.

    The share for peers in the node goes over the intra-node links, the share for other nodes
    over this device's NIC; the two run at once, so the slower one sets the time.
    """
    if group.size <= 1:
        return 0.0
    n = group.size
    intra_peers = group.per_node - 1
    inter_peers = n - group.per_node
    time = 0.0
    latency = 0.0
    if intra_peers:
        bw = _gbps(cluster.intra_node.group_bandwidth_gbps(group.per_node))
        time = send_bytes * intra_peers / n / bw
        latency = cluster.intra_node.latency_us
    if inter_peers:
        link = cluster.inter_node
        time = max(
            time, send_bytes * inter_peers / n / _gbps(link.bandwidth_gbps * link.efficiency)
        )
        latency = max(latency, link.latency_us)
    return time + latency * 1e-6


def deepep_time_s(
    token_bytes: float, copies: int, group: GroupPlacement, cluster: ClusterSpec
) -> float:
    """DeepEP's dispatch (or combine): each rank sends ``token_bytes`` of tokens, each token to
    ``copies`` experts spread evenly over the group (even routing, as benchmarks force it).

    Within a node it is the all-to-all of the copies. Across nodes a token crosses once to each
    other node it is routed to, reaching the rank of the same local index there, which forwards
    it over the node's links to the ranks that hold its experts (DeepEP's internode kernels).
    Of N nodes a token reaches (N - 1)(1 - (1 - 1/N)^copies) others, against the all-to-all's
    copies (N - 1) / N. The node's links (the copies for local peers and the forwarded ones) and
    the NIC work at once; the slower sets the time.
    """
    if group.nodes <= 1:
        return all_to_all_time_s(token_bytes * copies, group, cluster)
    n, local, nodes = group.size, group.per_node, group.nodes
    inter_bytes = token_bytes * (nodes - 1) * (1 - (1 - 1 / nodes) ** copies)
    remote_copies = copies * (nodes - 1) / nodes
    intra_bytes = token_bytes * (copies * (local - 1) / n + remote_copies * (local - 1) / local)
    inter = cluster.inter_node
    time = inter_bytes / _gbps(inter.bandwidth_gbps * inter.efficiency)
    latency = inter.latency_us
    if local > 1:
        bw = _gbps(cluster.intra_node.group_bandwidth_gbps(local))
        time = max(time, intra_bytes / bw)
        latency = max(latency, cluster.intra_node.latency_us)
    return time + latency * 1e-6


def ring_exchange_time_s(nbytes: float, group: GroupPlacement, cluster: ClusterSpec) -> float:
    """Each rank passes ``nbytes`` to its ring neighbour in ``size - 1`` equal steps (the CP
    ring): every step crosses one link between two ranks (on a full mesh one peer link, not
    the node's aggregate), and the slowest hop, between nodes when the group spans them,
    paces each step."""
    if group.size <= 1:
        return 0.0
    steps = group.size - 1
    return steps * p2p_time_s(nbytes / steps, group.nodes == 1, cluster)


def p2p_time_s(nbytes: float, same_node: bool, cluster: ClusterSpec) -> float:
    """One point-to-point transfer between two ranks (pipeline send/receive)."""
    if same_node:
        link = cluster.intra_node
        bw = _gbps(link.group_bandwidth_gbps(2))
    else:
        link = cluster.inter_node
        bw = _gbps(link.bandwidth_gbps * link.efficiency)
    return nbytes / bw + link.latency_us * 1e-6
