"""The analytical simulator's pipeline-stage formulas, written once for one layout and for many.

Every function here takes floats, or numpy arrays that broadcast together (one entry per
layout, or per layout and stage kind), and does the same arithmetic on both: the scalar path
(:mod:`autotune.simulators.analytical`) and the vectorized one
(:mod:`autotune.simulators.analytical.batch`) call the same formulas. Branches that depend on the
layout are written as 0/1 factors (``first * x`` adds ``x`` on the first stage, ``0.0``
elsewhere), which leaves every float exactly as an ``if`` would.

A pipeline rank's cost depends on how many dense and MoE layers it holds and on whether it is
the first or the last stage: its *kind*. :func:`stage_shape` groups the ranks of a layer split
into kinds, so most formulas run once per kind instead of once per rank.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import NamedTuple
from typing import TypeAlias

import numpy as np

from autotune.simulators.analytical.sharding import NO_SHARD_COMM
from autotune.simulators.analytical.sharding import ShardComm
from autotune.simulators.analytical.sharding import sharded_dp_s
from autotune.simulators.device_memory import device_bytes
from autotune.simulators.device_memory import fragmentation_bytes
from autotune.simulators.interleaving import held_chunks
from autotune.simulators.interleaving import slowdown
from autotune.simulators.interleaving import unequal_chunks
from autotune.simulators.layout import Layout
from autotune.simulators.prediction import FIRST_RANK_MEMORY
from autotune.simulators.prediction import RankMemory
from autotune.simulators.specs import ModelSpec
from autotune.simulators.specs import TrainSpec
from autotune.simulators.states import step_excess_bytes

__all__ = [
    "ARRAYS",
    "FLOATS",
    "JobRates",
    "LayerCost",
    "ModelParams",
    "Ops",
    "RankTerms",
    "Real",
    "Stage",
    "StageShape",
    "chunk_slowdown",
    "exposed_dp_s",
    "in_flight",
    "interleaved_bubble_s",
    "memory_bytes",
    "rank_in_flight",
    "stage",
    "stage_detail",
    "stage_shape",
    "step_breakdown",
    "throughput",
]

GIB = 1024**3

# A float, or a numpy array of them (one per layout, or per layout and stage kind): the
# formulas below do the same arithmetic on both. Any, because mypy cannot check one body
# against both.
Real: TypeAlias = Any


class Ops(NamedTuple):
    """The few elementwise operations the formulas need beyond arithmetic: builtins for
    floats (:data:`FLOATS`), numpy's for arrays (:data:`ARRAYS`)."""

    maximum: Callable[[Any, Any], Any]
    minimum: Callable[[Any, Any], Any]
    where: Callable[[Any, Any, Any], Any]


FLOATS = Ops(maximum=max, minimum=min, where=lambda cond, a, b: a if cond else b)
ARRAYS = Ops(maximum=np.maximum, minimum=np.minimum, where=np.where)


@dataclass(frozen=True, slots=True)
class LayerCost:
    """One layer, one micro-batch, one device: seconds and saved-activation bytes."""

    forward_s: Real  # compute of the forward pass
    backward_s: Real  # compute of the backward pass
    core_attention_s: Real  # forward flash attention (what selective recompute repeats)
    tp_forward_s: Real  # exposed TP collectives of one forward
    tp_backward_s: Real
    ep_forward_s: Real  # expert all-to-alls of one forward
    ep_backward_s: Real
    cp_forward_s: Real  # exposed context-parallel exchange of one forward
    cp_backward_s: Real
    checkpoint_s: Real  # host calls of an activation checkpoint beyond the passes' own time
    # what full recompute saves: its recomputed forward and the backward are one host-device
    # phase (host and device time add up before the larger sets the length), not two passes
    recompute_saving_s: Real
    activation_bytes: Real  # saved for backward without recompute (less what modules free)
    input_bytes: Real  # the layer input, all that full recompute keeps
    # what selective recompute drops from core attention and rebuilds in the layer's backward
    core_bytes: Real = 0.0
    # What selective recompute of the layout's other modules adds (analytical.recompute):
    # their forward again with their checkpoints' host calls, the TP and EP collectives in
    # them, and what their checkpoints free and the layer's backward rebuilds.
    modules_s: Real = 0.0
    modules_tp_s: Real = 0.0
    modules_ep_s: Real = 0.0
    modules_bytes: Real = 0.0


@dataclass(frozen=True, slots=True)
class ModelParams:
    """The parameter counts a stage is made of (Megatron's accounting, :class:`ModelSpec`)."""

    dense_layer: int
    moe_layer_non_expert: int  # attention, norms, router and shared experts
    expert_per_layer: int  # routed experts of one MoE layer
    embedding: int
    head: int  # the output layer, vocab x hidden (a tied head is copied to the last stage)
    has_output: bool  # the head is its own weight (not tied to the embedding)
    hidden: int  # the final norm

    @classmethod
    def of(cls, model: ModelSpec) -> ModelParams:
        return cls(
            dense_layer=model.dense_layer_params,
            moe_layer_non_expert=model.moe_layer_non_expert_params,
            expert_per_layer=model.expert_params_per_layer,
            embedding=model.embedding_params,
            head=model.vocab_size * model.hidden_size,
            has_output=bool(model.output_params),
            hidden=model.hidden_size,
        )


@dataclass(frozen=True, slots=True)
class StageShape:
    """The pipeline ranks of one layer split, grouped into kinds.

    ``kinds`` holds ``(dense layers, MoE layers, first, last)`` of each kind, in the order of
    the first rank of that kind; ``rank_kinds`` the kind of every rank, first to last.
    """

    stage_layers: tuple[int, ...]
    kinds: tuple[tuple[int, int, bool, bool], ...]
    rank_kinds: tuple[int, ...]
    first_ranks: tuple[int, ...]  # of each kind: it holds the most micro-batches in flight


def stage_shape(model: ModelSpec, stage_layers: tuple[int, ...]) -> StageShape:
    """Group the ranks of ``stage_layers`` (layers per stage) into kinds; an MoE model's first
    ``first_dense_layers`` layers are dense."""
    kinds: dict[tuple[int, int, bool, bool], int] = {}
    rank_kinds = []
    first_layer = 0
    last = len(stage_layers) - 1
    for rank, count in enumerate(stage_layers):
        n_dense = count
        if model.is_moe:
            n_dense = min(max(model.first_dense_layers - first_layer, 0), count)
        first_layer += count
        key = (n_dense, count - n_dense, rank == 0, rank == last)
        rank_kinds.append(kinds.setdefault(key, len(kinds)))
    first_ranks = tuple(rank_kinds.index(kind) for kind in range(len(kinds)))
    return StageShape(stage_layers, tuple(kinds), tuple(rank_kinds), first_ranks)


class Stage(NamedTuple):
    """One pipeline rank: per-micro-batch times (s), parameters and activation bytes.

    A named tuple rather than a frozen dataclass: the scalar path builds a few per layout, and
    a frozen dataclass takes three times as long to build.
    """

    compute_s: Real
    recompute_s: Real
    tp_s: Real
    cp_s: Real
    ep_s: Real
    pp_s: Real
    last_backward_s: Real  # backward of the last micro-batch (what DP reduction hides behind)
    dense_params: Real  # parameters sharded by TP (reduced over DP x CP)
    expert_params: Real  # routed-expert parameters (reduced over expert-DP)
    linear_params: Real  # weights of the layers' linear GEMMs (FP8 caches copies of them)
    activation_bytes: Real  # saved per micro-batch on this rank, after recompute
    working_bytes: Real  # transient: one layer's activations in its backward, or the logits
    dp_s: Real = 0.0  # exposed ZeRO-2/-3 gathers and reduce-scatters of one micro-batch

    @property
    def per_microbatch_s(self) -> Real:
        return (
            self.compute_s + self.recompute_s + self.tp_s + self.cp_s + self.ep_s + self.pp_s
        ) + self.dp_s


# size: one formula per line on floats or arrays alike; it must stay branch-free
def stage(
    params: ModelParams,
    dense: LayerCost,
    moe: LayerCost,
    kind: tuple[Real, Real, Real, Real],
    *,
    share: Real,
    selective: Real,
    modules: Real,
    tp: Real,
    etp: Real,
    ep: Real,
    pp: Real,
    vpp: Real,
    sends: tuple[Real, Real],
    overlap_p2p: bool,
    accumulate_s: tuple[Real, Real],
    logits: tuple[Real, Real],
    ops: Ops,
    shard: ShardComm = NO_SHARD_COMM,
) -> Stage:
    """One pipeline rank holding ``n_dense`` dense and ``n_moe`` MoE layers.

    ``kind`` is ``(n_dense, n_moe, first, last)``; ``share`` the fraction of the stage's
    layers that full recompute checkpoints (0 without full recompute), ``selective`` 1 where
    selective recompute checkpoints core attention, ``modules`` 1 with selective recompute
    (the layers' other recomputed modules, ``LayerCost.modules_*``); ``sends`` a
    micro-batch's transfer over each of the rank's two pipeline boundaries, the slower first
    (:func:`pipeline_sends_s`); ``overlap_p2p`` whether the framework runs interleaved sends
    beside the next chunk; ``accumulate_s`` the seconds
    per dense and per routed-expert parameter held that a micro-batch's gradient accumulation
    takes (:func:`autotune.simulators.states.grad_accumulation_bytes`); ``logits`` the (seconds,
    bytes) of the output layer and loss; ``shard`` what ZeRO-2 and -3 send per layer
    (:func:`sharded_dp_s`).
    """
    n_dense, n_moe, first, last = kind
    forward = n_dense * dense.forward_s + n_moe * moe.forward_s
    backward = n_dense * dense.backward_s + n_moe * moe.backward_s
    tp_forward = n_dense * dense.tp_forward_s + n_moe * moe.tp_forward_s
    tp_backward = n_dense * dense.tp_backward_s + n_moe * moe.tp_backward_s
    ep_forward = n_dense * dense.ep_forward_s + n_moe * moe.ep_forward_s
    ep_backward = n_dense * dense.ep_backward_s + n_moe * moe.ep_backward_s
    cp_forward = n_dense * dense.cp_forward_s + n_moe * moe.cp_forward_s
    cp_backward = n_dense * dense.cp_backward_s + n_moe * moe.cp_backward_s
    core = n_dense * dense.core_attention_s + n_moe * moe.core_attention_s
    saved = n_dense * dense.activation_bytes + n_moe * moe.activation_bytes
    inputs = n_dense * dense.input_bytes + n_moe * moe.input_bytes
    # Full recompute repeats a layer's forward: its compute here, its collectives (they
    # repeat too) with the other communication below.
    saving = n_dense * dense.recompute_saving_s + n_moe * moe.recompute_saving_s
    recompute_s = share * (forward - saving)
    recompute_s += selective * core
    # Full recompute checkpoints each recomputed layer, selective each core attention.
    recompute_s += (share + selective) * (n_dense * dense.checkpoint_s + n_moe * moe.checkpoint_s)
    # Selective recompute of other modules reruns their forward, their collectives among it.
    recompute_s += modules * (n_dense * dense.modules_s + n_moe * moe.modules_s)
    tp_modules = modules * (n_dense * dense.modules_tp_s + n_moe * moe.modules_tp_s)
    ep_modules = modules * (n_dense * dense.modules_ep_s + n_moe * moe.modules_ep_s)
    linear_params = (n_dense * params.dense_layer + n_moe * params.moe_layer_non_expert) / tp
    dense_params = linear_params + first * (params.embedding / tp) + last * params.hidden
    # The output layer: its own weight, or a tied one copied to the last of several stages.
    dense_params += last * ops.maximum(params.has_output, pp > 1) * (params.head / tp)
    logits_s, logits_bytes = logits
    # The logits live until the loss backward is done, before any layer's backward starts; a
    # layer's backward holds what it saved and, with selective recompute, the core attention
    # it rebuilds (the unfused path's scores), and what the other recomputed modules rebuild.
    working = ops.maximum(
        ops.maximum(
            dense.activation_bytes + selective * dense.core_bytes + dense.modules_bytes,
            moe.activation_bytes + selective * moe.core_bytes + moe.modules_bytes,
        ),
        last * logits_bytes,
    )
    expert_params = n_moe * params.expert_per_layer / (ep * etp)
    # Each backward adds its weight gradients to the buffer the step reduces.
    backward += accumulate_s[0] * dense_params + accumulate_s[1] * expert_params
    head = last * ops.maximum(params.has_output, pp > 1)
    tp_s = tp_forward + tp_backward + share * tp_forward + tp_modules
    # Selective recompute reruns core attention, the CP exchange inside it included.
    cp_s = cp_forward + cp_backward + (share + selective) * cp_forward
    ep_s = ep_forward + ep_backward + share * ep_forward + ep_modules
    # ZeRO-2/-3 traffic runs beside each pass as the device runs it: its kernels, the
    # collectives it waits for, and in the backward the recomputed forward with its own.
    forward_pass = forward + tp_forward + cp_forward + ep_forward
    backward_pass = backward + recompute_s + tp_s + cp_s + ep_s - forward_pass + forward
    dp_s = sharded_dp_s(shard, (n_dense, n_moe, first, head), forward_pass, backward_pass, ops)
    return Stage(
        compute_s=forward + backward + last * logits_s,
        recompute_s=recompute_s,
        tp_s=tp_s,
        cp_s=cp_s,
        ep_s=ep_s,
        pp_s=pipeline_sends_s(
            sends, vpp, forward / vpp, (backward + recompute_s) / vpp, overlap_p2p, ops
        ),
        last_backward_s=backward / vpp,
        dense_params=dense_params,
        expert_params=expert_params,
        linear_params=linear_params + expert_params,
        activation_bytes=(1 - share) * saved + share * inputs,
        working_bytes=working,
        dp_s=dp_s,
    )


def pipeline_sends_s(
    sends: tuple[Real, Real],
    vpp: Real,
    forward_chunk_s: Real,
    backward_chunk_s: Real,
    overlap: bool,
    ops: Ops,
) -> Real:
    """Seconds per micro-batch that a rank spends in pipeline transfers (docs/reference.md 7.3).

    ``sends`` holds a micro-batch's transfer over the rank's slower and faster boundary.
    1F1B exchanges with the next stage (send the activation, receive its gradient), then with
    the previous one, blocking: both. The interleaved schedule makes one exchange per chunk
    with both neighbours at once (``batch_isend_irecv``), paced by the slower link; Megatron-
    Core runs it beside the compute (``overlap_p2p_comm``): the forward's exchange during
    the backward chunk, the backward's during the next forward, exposed only beyond them.
    """
    slower, faster = sends
    blocking = ops.where(vpp > 1, vpp * slower, slower + faster)
    if not overlap:
        return blocking
    hidden = vpp * (
        ops.maximum(0.0, slower - backward_chunk_s) + ops.maximum(0.0, slower - forward_chunk_s)
    )
    return ops.where(vpp > 1, hidden, blocking)


def exposed_dp_s(
    reduce_s: Real,
    gather_s: Real,
    last_backward_s: Real,
    overlap_grad: bool,
    overlap_param: bool,
    ops: Ops,
) -> Real:
    """Data-parallel communication left on the critical path: the gradient reduction beyond
    the last backward (all of it without overlap) and the parameter all-gather unless it
    hides in the next forward (docs/reference.md 7.2)."""
    exposed = ops.maximum(0.0, reduce_s - last_backward_s) if overlap_grad else reduce_s
    return exposed + (0.0 if overlap_param else gather_s)


class RankTerms(NamedTuple):
    """What a pipeline rank's parameters cost beyond its layers (seconds, bytes)."""

    reduce_s: float  # data-parallel gradient reduction
    gather_s: float  # parameter all-gather after a sharded optimizer step
    optimizer_s: float
    states: dict[str, float]  # weights, gradients, optimizer states (and FP8 weight copies)
    state_bytes: float  # their sum
    step_grads: float  # the optimizer step's own gradient copies (states.step_grad_bytes)


def in_flight(microbatches: Real, pp: Real, vpp: Real, rank: Real, ops: Ops) -> Real:
    """Micro-batches whose activations pipeline rank ``rank`` holds at its peak, in units of
    its whole stage (all its chunks).

    1F1B: p - rank (at most m). Interleaved (Megatron ``schedules.py``): the rank warms up with
    ``(p - rank - 1) * 2 + (v - 1) * p`` chunk forwards and holds one more, at most all m * v
    of its chunk passes; over v per stage. The first rank thus holds p + (p-1)/v, Korthikanti's
    p (1 + (p-1)/(p v)) (docs/reference.md 3.3), and the last (v-1) p / v + 1/v, nearly as many.
    """
    chunks = ops.minimum(microbatches * vpp, (pp - rank - 1) * 2 + (vpp - 1) * pp + 1)
    return ops.where(vpp > 1, chunks / vpp, ops.minimum(microbatches, pp - rank))


def rank_in_flight(stage_layers: tuple[int, ...], microbatches: int, vpp: int, rank: int) -> float:
    """:func:`in_flight` of one rank, from a run of the schedule where its chunks are unequal
    (:func:`autotune.simulators.interleaving.held_chunks`)."""
    if unequal_chunks(stage_layers, vpp):
        return held_chunks(stage_layers, vpp, microbatches)[rank]
    return float(in_flight(microbatches, len(stage_layers), vpp, rank, FLOATS))


def memory_bytes(
    states: Real, activations: Real, working: Real, reserved: Real, lost: Real
) -> Real:
    """Peak bytes of a rank: its states, the activations in flight and the working set, what
    the allocator loses to fragmentation (``lost``), and what the runtime and the
    communicators hold (:func:`autotune.simulators.device_memory.device_bytes`)."""
    return device_bytes(states + activations + working, lost, reserved)


def chunk_slowdown(
    layout: Layout,
    train: TrainSpec,
    shape: StageShape,
    microbatches: int,
    last_stage_s: float,
    output_s: float,
) -> float:
    """:func:`autotune.simulators.interleaving.slowdown` of a layout whose chunks are unequal: a
    backward is twice a forward plus the recomputed share of one; the output layer and loss
    (``output_s`` of the last stage's ``last_stage_s`` per micro-batch) weigh what they take over
    one layer of the last stage."""
    split = shape.stage_layers
    slowest = max(split)
    per_layer_s = (last_stage_s - output_s) / split[-1]
    ratio = 2.0 + layout.recomputed_layers(slowest, train) / slowest
    return slowdown(split, layout.vpp, microbatches, ratio, output_s / per_layer_s)


def interleaved_bubble_s(
    microbatches: Real, slowest_s: Real, bubble_s: Real, slowdown: Real
) -> Real:
    """The bubble once unequal chunks are counted: the closed form's pipeline time (``m``
    micro-batches at the slowest rank's pace plus its bubble) takes ``slowdown`` times as long
    (:func:`autotune.simulators.interleaving.slowdown`), the ranks waiting on each other."""
    return bubble_s + (slowdown - 1) * (microbatches * slowest_s + bubble_s)


def step_breakdown(
    microbatches: Real, slowest: Stage, dp_s: Real, bubble_s: Real, optimizer_s: Real
) -> dict[str, Real]:
    """The step's seconds by category (:data:`simulators.BREAKDOWN_KEYS`): ``m`` micro-batches
    at the pace of the slowest rank, then the bubble, data parallelism and the optimizer."""
    m = microbatches
    return {
        "compute": m * slowest.compute_s,
        "recompute": m * slowest.recompute_s,
        "tp_comm": m * slowest.tp_s,
        "cp_comm": m * slowest.cp_s,
        "ep_comm": m * slowest.ep_s,
        "pp_comm": m * slowest.pp_s,
        "dp_comm": dp_s + m * slowest.dp_s,
        "bubble": bubble_s,
        "optimizer": optimizer_s,
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRates:
    """What turns a step time into throughput: tokens and model FLOPs per step, peak FLOP/s."""

    tokens_per_step: int
    model_flops: float  # per step, as Megatron counts them (the MFU numerator)
    peak_flops: float  # per device, in the step's compute dtype


def throughput(step_s: Real, world: Real, rates: JobRates) -> tuple[Real, Real]:
    """(tokens per second per device, MFU) of a step of ``step_s`` on ``world`` devices."""
    tokens_per_s = rates.tokens_per_step / step_s
    return tokens_per_s / world, rates.model_flops / (step_s * world * rates.peak_flops)


def stage_detail(
    shape: StageShape,
    kind_s: Sequence[float],
    kind_states: Sequence[float],
    kind_activations: Sequence[float],
    kind_working: Sequence[float],
    *,
    kind_churning_grads: Sequence[float],
    kind_step_grads: Sequence[float],
    outside: tuple[float, float],
    microbatches: int,
    vpp: int,
) -> dict[str, object]:
    """A prediction's per-rank views: ``stage_layers``, ``stage_time_s`` (seconds per
    micro-batch) and ``stage_memory_gib`` of every pipeline rank, first to last, and the first
    rank's terms (:data:`FIRST_RANK_MEMORY`), from each kind's seconds per micro-batch and
    bytes (states, activations per micro-batch, working set, autograd's gradients, the step's
    copies); ``outside``: (reserved bytes, fragmentation)."""
    reserved, fragmentation = outside
    rank_terms = []
    for rank, kind in enumerate(shape.rank_kinds):
        held = kind_activations[kind] * rank_in_flight(shape.stage_layers, microbatches, vpp, rank)
        excess = step_excess_bytes(kind_step_grads[kind], held, kind_working[kind])
        churning = held + kind_working[kind] + excess + kind_churning_grads[kind]
        terms = {
            "states": kind_states[kind],
            "activations": held,
            "working": kind_working[kind],
            "step_grads": excess,
            "fragmentation": fragmentation_bytes(churning, fragmentation),
            "reserved": reserved,
        }
        rank_terms.append({key: value / GIB for key, value in terms.items()})
    # what the first rank's allocator keeps cached: its step's copies' own blocks
    cached = kind_step_grads[shape.rank_kinds[0]] / GIB - rank_terms[0]["step_grads"]
    return {
        "stage_layers": list(shape.stage_layers),
        "stage_time_s": [kind_s[kind] for kind in shape.rank_kinds],
        "stage_memory_gib": [sum(terms.values()) for terms in rank_terms],
        FIRST_RANK_MEMORY: RankMemory(rank_terms[0], cached),
    }
