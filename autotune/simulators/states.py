"""Weights, gradients and optimizer states: their memory per device and the optimizer step.

One formula for every simulator and baseline (docs/reference.md 3.2 and 7.2): every parameter
a rank holds keeps its weight and gradient buffer and the framework's replicated optimizer
bytes; the sharded optimizer bytes are split over data parallelism, dense parameters over
DP x CP, routed experts over expert-DP. What the bytes are is the framework's
(:meth:`simulators.FrameworkSpec.state_bytes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from typing import TypeAlias

import numpy as np

from autotune.simulators.frameworks import StateBytes
from autotune.simulators.layout import Layout
from autotune.simulators.schedule import chunk_states_peak
from autotune.simulators.specs import DeviceSpec
from autotune.simulators.specs import ModelSpec
from autotune.simulators.specs import TrainSpec

__all__ = [
    "FP8_BYTES",
    "StateBytes",
    "fp8_primary",
    "fp8_primary_params",
    "gathered_weight_bytes",
    "grad_accumulation_bytes",
    "optimizer_step_s",
    "releases_chunk_states",
    "released_unsharded_bytes",
    "state_bytes_of",
    "state_memory_bytes",
    "step_excess_bytes",
    "step_grad_bytes",
    "tied_embedding_grad_bytes",
    "unsharded_bytes",
]

FP8_BYTES = 1  # an FP8 element (E4M3 or E5M2)
_FP32_BYTES = 4.0
Real: TypeAlias = Any  # a float for one layout, a numpy array for many


def state_bytes_of(train: TrainSpec, layout: Layout) -> StateBytes:
    """What a rank keeps per parameter for this step's framework, precision and optimizer.

    The framework's table holds its default gradient buffer; a step that reduces gradients in
    another dtype (``TrainSpec.grad_reduce_in_fp32``) keeps that buffer in that dtype. On the
    stacks with Megatron's ``main_grad`` buffer the optimizer's step then copies it to fp32
    where it is 16-bit and reads it in place where it is fp32 (``main_grad.float()``, the
    distributed optimizer's ``shard_model_grad.float()``; docs/decisions/0053): the step's
    copy (whole, or the shard's with the distributed optimizer) follows the buffer.
    """
    sizes = train.framework.state_bytes(train.compute_dtype, layout.sharding)
    buffer_change = train.grad_reduce_bytes - train.framework.grad_reduce_bytes(train.precision)
    if not buffer_change:
        return sizes
    if sizes.sharded_grad:  # ZeRO-2 and -3 keep the buffer sharded
        return replace(sizes, sharded_grad=sizes.sharded_grad + buffer_change)
    buffer = sizes.grad + buffer_change
    if train.framework.grad_accumulation == "autograd" or layout.sharding > 1:
        return replace(sizes, grad=buffer)
    copy = 0.0 if buffer >= _FP32_BYTES else _FP32_BYTES
    return replace(
        sizes,
        grad=buffer,
        step_grad=0.0 if layout.sharding else copy,
        sharded_step_grad=copy if layout.sharding else 0.0,
    )


def grad_accumulation_bytes(train: TrainSpec, layout: Layout, expert: bool = False) -> float:
    """Memory traffic per parameter a rank holds (a routed expert's with ``expert``), each
    micro-batch, to add that micro-batch's weight gradient to the gradients the step reduces,
    beyond the weight-gradient GEMM's own output (docs/reference.md 7.2). With ``w`` bytes
    per model-dtype element and a ``g``-byte gradient buffer:

    - ``fused``: none, the GEMM accumulates in its epilogue;
    - ``main_grad``: read the gradient and the buffer, write the buffer, ``w + 2g``;
    - ``autograd``: ``param.grad += grad`` in the model dtype, ``3w``, except in the step's
      first micro-batch, whose gradient becomes ``param.grad`` (the optimizer set it to None);
      an optimizer with a wider buffer of ``b = g - w`` bytes (DeepSpeed's BF16_Optimizer)
      sets ``param.grad`` to None before every backward instead, then casts the gradient
      (``w + b``) and adds it into its buffer (``3b``).

    The mean over the step's micro-batches.
    """
    framework = train.framework
    mode = framework.expert_grad_accumulation if expert else framework.grad_accumulation
    if mode == "fused":
        return 0.0
    sizes = state_bytes_of(train, layout)
    w, g = sizes.weight, sizes.grad
    if mode == "main_grad":
        return w + 2 * g
    wider = max(0.0, g - w)
    if wider:
        return w + 4 * wider
    m = max(1, layout.num_microbatches(train))
    return 3 * w * (m - 1) / m


def _shards(layout: Layout) -> tuple[int, int]:
    """Data-parallel shards of (dense, expert) parameters' sharded bytes: DP x CP and
    expert-DP, or a replica's share of them with hybrid sharding (``dp_replicate``)."""
    return layout.dp_shard, layout.edp_shard


def state_memory_bytes(
    dense_params: float,
    expert_params: float,
    layout: Layout,
    sizes: StateBytes,
    fp8_primary: float = 0.0,
) -> dict[str, float]:
    """``weights``, ``gradients`` and ``optimizer`` bytes of one rank's parameters.

    ``dense_params`` are the rank's parameters reduced over DP x CP (already split by TP
    and PP), ``expert_params`` its routed-expert parameters (reduced over expert-DP).
    ``fp8_primary`` of them keep no weight in the model dtype: their weight is Transformer
    Engine's FP8 copy, counted with the FP8 copies (docs/reference.md 7.6).
    """
    dense_shards, expert_shards = _shards(layout)
    params = dense_params + expert_params
    sharded = dense_params / dense_shards + expert_params / expert_shards
    return {
        "weights": (params - fp8_primary) * sizes.weight + sharded * sizes.sharded_weight,
        "gradients": params * sizes.grad + sharded * sizes.sharded_grad,
        "optimizer": params * sizes.optimizer + sharded * sizes.sharded_optimizer,
    }


def step_grad_bytes(
    dense_params: float, expert_params: float, layout: Layout, sizes: StateBytes
) -> float:
    """Bytes of the gradient copies the optimizer allocates for its step alone
    (``StateBytes.step_grad`` whole, ``sharded_step_grad`` over the data-parallel shards)."""
    dense_shards, expert_shards = _shards(layout)
    sharded = dense_params / dense_shards + expert_params / expert_shards
    return (dense_params + expert_params) * sizes.step_grad + sharded * sizes.sharded_step_grad


def step_excess_bytes(step_grads: Real, activations: Real, working: Real) -> Real:
    """What the optimizer step needs beyond the peak of the forward and backward passes.

    A mixed-precision optimizer copies the 16-bit gradients to fp32 in its step and frees the
    copies before the next forward (Megatron's ``_copy_model_grads_to_main_grads``, then
    ``zero_grad(set_to_none=True)``; DeepSpeed ZeRO's ``single_partition_of_fp32_groups``
    grads, set to None after the step; docs/reference.md 3.2). By then the activations and
    the working set are freed, so a rank's peak holds either them or the copies:
    ``states + max(activations + working, step_grads)``, which is ``states + activations +
    working + step_excess_bytes``.
    """
    excess = step_grads - activations - working
    return np.maximum(excess, 0.0) if isinstance(excess, np.ndarray) else max(excess, 0.0)


def unsharded_bytes(
    layer_params: float,
    rank_params: float,
    layout: Layout,
    sizes: StateBytes,
    prefetch: float,
    keep_gathered: bool = False,
) -> float:
    """Bytes of the whole (gathered) weights and gradients a rank holds at its peak beyond its
    shards, under ZeRO-2 and -3 (0 below them; docs/decisions/0049).

    ``layer_params`` are the parameters of the rank's largest layer, ``rank_params`` all it
    holds. ZeRO-2 and -3 produce each layer's gradients whole and reduce-scatter them while
    the next layer's backward runs: two layers' gradients in the reduction's dtype (the
    buffer's, ``sharded_grad``). ZeRO-3 also gathers the layer in use and ``prefetch``
    parameters ahead of it (Megatron-FSDP's ``suggested_AG_prefetch_size``, DeepSpeed's
    ``stage3_prefetch_bucket_size``), at least the next layer, in the gathered weight's dtype
    (``StateBytes.gather_bytes``). Neither exceeds what the rank holds. With pipeline
    parallelism and ``keep_gathered`` (``FrameworkSpec.pipeline_keeps_gathered``, torchtitan)
    ZeRO-3 keeps every weight of the stage gathered and every gradient whole in the reduction's
    dtype until the stage's last backward (docs/torchtitan.md 4); with interleaved chunks, what
    that adds at the rank's peak is :func:`released_unsharded_bytes`.
    """
    stage = layout.sharding
    if stage < 2:
        return 0.0
    if stage == 3 and keep_gathered and layout.pp > 1:
        return rank_params * (sizes.sharded_grad + sizes.gather_bytes)
    grads = min(rank_params, 2 * layer_params) * sizes.sharded_grad
    if stage < 3:
        return grads
    gathered = min(rank_params, layer_params + max(layer_params, prefetch))
    return grads + gathered * sizes.gather_bytes


def releases_chunk_states(keep_gathered: bool, layout: Layout) -> bool:
    """Whether the whole weights and gradients :func:`unsharded_bytes` keeps for the step are
    freed chunk by chunk instead: ZeRO-3 that keeps them under pipeline parallelism
    (torchtitan's FSDP2 in PyTorch's pipeline stages), with interleaved chunks."""
    return keep_gathered and layout.sharding == 3 and layout.pp > 1 and layout.vpp > 1


def released_unsharded_bytes(
    unsharded: float,
    sizes: StateBytes,
    rank: int,
    layout: Layout,
    microbatches: int,
    chunk_activation_bytes: Sequence[float],
    chunk_transient_bytes: Sequence[float],
    chunk_param_shares: Sequence[float],
) -> float:
    """What a rank's whole weights and gradients (``unsharded``, :func:`unsharded_bytes` with
    ``keep_gathered``) add to the peak of its activations when each interleaved chunk holds
    its share of them only from its first forward (the weights) or first backward (the
    gradients) to its last backward (:func:`autotune.simulators.schedule.chunk_states_peak`).

    With few micro-batches (about pp or fewer), every forward runs before the first backward
    and the rank's last chunk runs all its backwards, and frees its part, before the first
    chunk's begin: the peak holds every chunk's weights but only the last chunk's gradients.
    On Llama 3.1 405B over tp 8 pp 8 (8 micro-batches) that is half the fp32 gradients of a
    rank, 11.9 GiB, the 10 GiB by which torchtitan's interleaved run measured below its 1F1B
    one. With many micro-batches the chunks' backwards alternate in groups of pp, every
    chunk's gradients are whole early, and nothing is saved.

    Args:
        unsharded: the rank's whole weights (``sizes.gather_bytes`` per parameter) and
            gradients (``sizes.sharded_grad``, the reduction's dtype).
        sizes: the bytes per parameter of the step.
        rank: the pipeline rank.
        layout: the layout (its ``pp`` and ``vpp``).
        microbatches: micro-batches per step.
        chunk_activation_bytes: per chunk of the rank, its activations per micro-batch.
        chunk_transient_bytes: per chunk, what its backward holds beyond them.
        chunk_param_shares: per chunk, its share of the rank's parameters.
    """
    per_param = sizes.gather_bytes + sizes.sharded_grad
    accumulated = unsharded * sizes.sharded_grad / per_param
    kept = unsharded - accumulated
    args = ("interleaved", rank, layout.pp, microbatches)
    joint = chunk_states_peak(
        *args,
        chunk_activation_bytes,
        chunk_transient_bytes,
        [kept * share for share in chunk_param_shares],
        [accumulated * share for share in chunk_param_shares],
    )
    zeros = [0.0] * len(chunk_param_shares)
    alone = chunk_states_peak(*args, chunk_activation_bytes, chunk_transient_bytes, zeros, zeros)
    return joint - alone


def gathered_weight_bytes(params: float, fp8_primary: float, sizes: StateBytes) -> float:
    """Bytes of the distributed optimizer's parameter all-gather of ``params`` parameters:
    the model dtype, or one byte for the ``fp8_primary`` of them (``--fp8-param-gather``)."""
    return (params - fp8_primary) * sizes.weight + fp8_primary * FP8_BYTES


def fp8_primary(train: TrainSpec, layout: Layout) -> bool:
    """Whether the linear layers' only weight is FP8: an FP8 step on a framework that keeps
    FP8 primary weights (``--fp8-param-gather``, which needs the distributed optimizer)."""
    return train.fp8 and train.framework.fp8_param_gather and layout.distributed_optimizer


def fp8_primary_params(train: TrainSpec, layout: Layout, linear_params: float) -> float:
    """The parameters whose only weight is FP8: the linear layers' (``linear_params``) when
    :func:`fp8_primary`, else none."""
    return linear_params if fp8_primary(train, layout) else 0.0


def optimizer_step_s(
    dense_params: float,
    expert_params: float,
    layout: Layout,
    sizes: StateBytes,
    traffic_bytes_per_param: float,
    device: DeviceSpec,
) -> float:
    """Seconds of one optimizer step: memory-bound traffic over the parameters it updates
    (the rank's shard when the optimizer states are sharded)."""
    dense_shards, expert_shards = _shards(layout) if sizes.sharded_optimizer else (1, 1)
    local = dense_params / dense_shards + expert_params / expert_shards
    return local * traffic_bytes_per_param / device.achieved_memory_bytes_per_s


def tied_embedding_grad_bytes(model: ModelSpec, train: TrainSpec, layout: Layout) -> float:
    """Bytes of the tied embedding's gradient that the first and the last pipeline stage
    all-reduce once per step, after the data-parallel reduction (0 without a tied embedding or
    without pipelining).

    With pipelining the last stage holds a copy of the word embedding as its output layer;
    Megatron all-reduces the two copies' gradients over the embedding group
    (``finalize_model_grads._allreduce_word_embedding_grads``), DeepSpeed's pipeline engine
    does the same in ``ReduceTiedGrads`` before ``ReduceGrads`` (docs/reference.md 7.2). The
    gradient is the TP rank's vocab / tp rows, in the dtype it is accumulated in: the
    reduction's, or, where autograd's model-dtype gradients feed a wider buffer of their own
    (DeepSpeed's BF16_Optimizer reduces the tied weight's fp32 ``_hp_grad``), that buffer's.
    """
    if not model.tied_embeddings or layout.pp == 1:
        return 0.0
    sizes = state_bytes_of(train, layout)
    wider = sizes.grad - sizes.weight
    autograd = train.framework.grad_accumulation == "autograd"
    element = wider if autograd and wider > sizes.weight else train.grad_reduce_bytes
    return model.vocab_size / layout.tp * model.hidden_size * element
