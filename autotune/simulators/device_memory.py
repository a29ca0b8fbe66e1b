"""What a rank's device memory holds beyond the framework's tensors (docs/reference.md 3.8).

The simulators price the tensors a rank allocates at its peak: weights, gradients, optimizer
states, activations and the working set of one backward. A device runs out of memory on more:

- the caching allocator cannot reuse all it has reserved: the free space inside segments that
  still hold a live block is lost (fragmentation). Only what the step allocates and frees
  again fragments: the activations, the working set, and the gradients where autograd
  creates them anew each step (:func:`churning_bytes`); the weights, optimizer states and a
  contiguous gradient buffer are allocated once and never freed;
- the driver does not expose all of the HBM, and the CUDA/CANN context takes some before the
  first tensor (``DeviceSpec.runtime_memory_gib``);
- the collective library keeps buffers per communicator a rank uses
  (``ClusterSpec.communicator_buffer_gib`` each).

Both simulators add these the same way: the peak is ``allocated + churning * f / (1 - f) +
reserved``, where ``f`` is the share of what the allocator reserves for the churning tensors
that it loses, and ``reserved`` the runtime's part and the communicators' buffers.
"""

from __future__ import annotations

from typing import Any
from typing import TypeAlias

from autotune.simulators.layout import Layout
from autotune.simulators.specs import ClusterSpec
from autotune.simulators.specs import ModelSpec
from autotune.simulators.specs import TrainSpec
from autotune.simulators.states import state_bytes_of

__all__ = [
    "churning_bytes",
    "churning_grad_bytes",
    "churning_grad_share",
    "communicators",
    "device_bytes",
    "fragmentation_bytes",
    "reserved_bytes",
]

GIB = 1024**3
Real: TypeAlias = Any  # a float for one layout, a numpy column for many


def communicators(model: ModelSpec, layout: Layout) -> int:
    """The NCCL/HCCL communicators the busiest rank of ``layout`` runs collectives or sends on.

    The default (world) group; the TP, CP, data-parallel (DP x CP) and expert groups (EP,
    expert-DP, and expert TP where it is not TP) that have more than one member; with
    pipelining, one per neighbour stage (PyTorch keys point-to-point communicators by the
    pair of ranks: two for a middle stage), the embedding group of a tied embedding, and the
    model-parallel group (TP x PP) that all-reduces the gradient norm.
    """
    count = 1
    count += (layout.tp > 1) + (layout.cp > 1) + (layout.dp * layout.cp > 1)
    own_grid = layout.ep > 1 or layout.etp is not None  # the experts' groups are not TP's/DP's
    count += (layout.ep > 1) + (own_grid and layout.expert_dp > 1)
    count += layout.etp is not None and layout.etp > 1  # an expert TP group apart from TP
    if layout.pp > 1:
        count += 2 + model.tied_embeddings
    count += layout.tp * layout.pp > 1
    # hybrid sharding: a replica's shard group and the group across replicas, each for the
    # dense and (with a grid of their own) the expert states
    count += 2 * (1 + own_grid) * (layout.dp_replicate > 1)
    return int(count)


def reserved_bytes(model: ModelSpec, cluster: ClusterSpec, layout: Layout) -> float:
    """Bytes outside the allocator: the runtime's part and the communicators' buffers."""
    buffers = communicators(model, layout) * cluster.communicator_buffer_gib
    return (cluster.device.runtime_memory_gib + buffers) * GIB


def churning_grad_share(train: TrainSpec, layout: Layout) -> float:
    """The share of a rank's gradient bytes that autograd allocates anew each step: the
    model-dtype gradients where the framework accumulates through autograd (DeepSpeed's
    ``param.grad``, set to None by the optimizer), none where they live in a contiguous
    buffer (Megatron's ``main_grad``)."""
    if train.framework.grad_accumulation != "autograd":
        return 0.0
    sizes = state_bytes_of(train, layout)
    if not sizes.grad:  # ZeRO-2 and -3: reduced as they come (states.unsharded_bytes)
        return 0.0
    return sizes.weight / sizes.grad


def churning_grad_bytes(gradients: Real, train: TrainSpec, layout: Layout) -> Real:
    """:func:`churning_grad_share` of ``gradients`` bytes."""
    return gradients * churning_grad_share(train, layout)


def churning_bytes(transient: Real, gradients: Real, train: TrainSpec, layout: Layout) -> Real:
    """What the step allocates and frees again: ``transient`` (activations and the working
    set) and the gradients autograd creates (:func:`churning_grad_bytes`)."""
    return transient + churning_grad_bytes(gradients, train, layout)


def fragmentation_bytes(churning: Real, fragmentation: float) -> Real:
    """What the allocator reserves beyond ``churning`` bytes and cannot reuse: a
    ``fragmentation`` share of what it reserves for them, ``churning / (1 - fragmentation)``."""
    return churning * fragmentation / (1.0 - fragmentation)


def device_bytes(allocated: Real, lost: Real, reserved: Real) -> Real:
    """A rank's device memory at its peak: its tensors, what fragmentation loses, the rest."""
    return allocated + lost + reserved
