"""What one job's layouts cost: :class:`JobPrices` keeps the pieces of a price that layouts
share, and :func:`simulate_layout` prices one layout from them (the scalar path; the
vectorized one, :mod:`autotune.simulators.analytical.batch`, computes the same pieces on
arrays).
"""

# size: JobPrices' caches and the scalar path that reads them are one unit

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from operator import attrgetter
from typing import NamedTuple

from autotune.simulators.analytical.chunk_states import released_rank_terms
from autotune.simulators.analytical.constants import AnalyticalConstants
from autotune.simulators.analytical.layer import dtype_bytes
from autotune.simulators.analytical.layer import gemm_pass_s
from autotune.simulators.analytical.recompute import layer_bytes_with_modules
from autotune.simulators.analytical.recompute import layer_times_with_modules
from autotune.simulators.analytical.sharding import NO_SHARD_COMM
from autotune.simulators.analytical.sharding import ShardComm
from autotune.simulators.analytical.sharding import largest_layer_params
from autotune.simulators.analytical.sharding import shard_comm
from autotune.simulators.analytical.stages import FLOATS
from autotune.simulators.analytical.stages import GIB
from autotune.simulators.analytical.stages import JobRates
from autotune.simulators.analytical.stages import LayerCost
from autotune.simulators.analytical.stages import ModelParams
from autotune.simulators.analytical.stages import RankTerms
from autotune.simulators.analytical.stages import Stage
from autotune.simulators.analytical.stages import StageShape
from autotune.simulators.analytical.stages import chunk_slowdown
from autotune.simulators.analytical.stages import exposed_dp_s
from autotune.simulators.analytical.stages import interleaved_bubble_s
from autotune.simulators.analytical.stages import memory_bytes
from autotune.simulators.analytical.stages import rank_in_flight
from autotune.simulators.analytical.stages import stage
from autotune.simulators.analytical.stages import stage_detail
from autotune.simulators.analytical.stages import stage_shape
from autotune.simulators.analytical.stages import step_breakdown
from autotune.simulators.analytical.stages import throughput
from autotune.simulators.collectives import GroupPlacement
from autotune.simulators.collectives import all_gather_time_s
from autotune.simulators.collectives import all_reduce_time_s
from autotune.simulators.collectives import p2p_time_s
from autotune.simulators.collectives import reduce_scatter_time_s
from autotune.simulators.device_memory import churning_bytes
from autotune.simulators.device_memory import churning_grad_bytes
from autotune.simulators.device_memory import fragmentation_bytes
from autotune.simulators.device_memory import reserved_bytes
from autotune.simulators.interleaving import unequal_chunks
from autotune.simulators.job import Job
from autotune.simulators.layout import LAYER_COST_FIELDS
from autotune.simulators.layout import LAYOUT_FIELDS
from autotune.simulators.layout import ZERO_GRADS
from autotune.simulators.layout import ZERO_PARAMS
from autotune.simulators.layout import Layout
from autotune.simulators.prediction import LazyDetail
from autotune.simulators.prediction import Prediction
from autotune.simulators.specs import ClusterSpec
from autotune.simulators.specs import TrainSpec
from autotune.simulators.states import StateBytes
from autotune.simulators.states import fp8_primary_params
from autotune.simulators.states import gathered_weight_bytes
from autotune.simulators.states import grad_accumulation_bytes
from autotune.simulators.states import optimizer_step_s
from autotune.simulators.states import releases_chunk_states
from autotune.simulators.states import state_bytes_of
from autotune.simulators.states import state_memory_bytes
from autotune.simulators.states import step_excess_bytes
from autotune.simulators.states import step_grad_bytes
from autotune.simulators.states import tied_embedding_grad_bytes
from autotune.simulators.states import unsharded_bytes

__all__ = ["JobPrices", "simulate_layout"]


def _fields_but(*names: str) -> tuple[str, ...]:
    return tuple(name for name in LAYOUT_FIELDS if name not in names)


class JobPrices:
    """One job (model, cluster, training step) as this simulator prices it: what all its
    layouts share, and the pieces of their prices met so far.

    Each piece of a layout's price depends on a few of its fields, named by the ``*_FIELDS``
    below: the scalar path caches the pieces by them, the vectorized path
    (:mod:`autotune.simulators.analytical.batch`) computes each piece once per distinct value of
    them. Most are every field but those known not to matter, so that a new field is in them until
    shown otherwise.
    """

    LAYER_FIELDS = LAYER_COST_FIELDS  # what one layer costs (Layout.layer_key)
    LAYER_TIMES_FIELDS = tuple(name for name in LAYER_FIELDS if name != "recompute")
    # kinds and shares (vpp: how the framework spreads recompute_layers over a rank's chunks)
    SHAPE_FIELDS = ("pp", "layer_split", "vpp", "recompute", "recompute_layers")
    # what neither a micro-batch's pipeline sends nor the output layer depend on
    _NOT_SENDS = (
        "ep",
        "etp",
        "vpp",
        "recompute",
        "recompute_layers",
        "recompute_modules",
        "layer_split",
        "distributed_optimizer",
        "zero_stage",
        "dp_replicate",
    )
    P2P_FIELDS = _fields_but(*_NOT_SENDS)
    LOGITS_FIELDS = _fields_but(*_NOT_SENDS, "dp", "pp", "sequence_parallel")
    # the tied embedding's gradient all-reduce: its group, and its dtype, which the optimizer's
    # sharding decides (states.tied_embedding_grad_bytes)
    EMBEDDING_FIELDS = ("dp", "tp", "pp", "cp", "distributed_optimizer", "zero_stage")
    # the communicators a rank uses
    RESERVED_FIELDS = ("dp", "tp", "pp", "cp", "ep", "etp", "dp_replicate")
    # a micro-batch's gradient accumulation: the optimizer's buffers, the micro-batches
    ACCUMULATE_FIELDS = ("distributed_optimizer", "zero_stage", "dp", "micro_batch")
    # what ZeRO-2 and -3 send per layer and micro-batch (:meth:`shard_comm`)
    SHARD_FIELDS = ("dp", "tp", "pp", "cp", "ep", "etp", "zero_stage", "dp_replicate")
    # the stages; the optimizer mode only through the accumulation, keyed by its value
    PIPELINE_FIELDS = _fields_but("distributed_optimizer")
    TERMS_FIELDS = _fields_but(  # what a rank's parameters cost beyond its layers
        "micro_batch",
        "recompute",
        "recompute_layers",
        "recompute_modules",
        "layer_split",
        "sequence_parallel",
        "vpp",
    )

    def __init__(self, job: Job, c: AnalyticalConstants) -> None:
        self.job, self.constants = job, c
        # the specs on their own, read on every layout
        self.model, self.cluster, self.train = job.model, job.cluster, job.train
        self.params = ModelParams.of(job.model)
        self.rates = JobRates(
            tokens_per_step=job.train.tokens_per_step,
            model_flops=job.model_flops_per_step,
            peak_flops=job.peak_flops,  # FP8: of the FP8 peak
        )
        self._layers: dict[tuple[object, ...], tuple[LayerCost, LayerCost]] = {}
        self._layer_times: dict[object, tuple[tuple[float, ...], tuple[float, ...]]] = {}
        self._shapes: dict[tuple[int, tuple[int, ...] | None], StageShape] = {}
        self._terms: dict[tuple[object, ...], RankTerms] = {}
        self._pipelines: dict[tuple[object, ...], _Pipeline] = {}
        self._p2p: dict[tuple[object, ...], tuple[float, float]] = {}
        self._accumulate: dict[tuple[object, ...], tuple[float, float]] = {}
        self._logits: dict[tuple[object, ...], tuple[float, float]] = {}
        self._data_parallel: dict[tuple[object, ...], _DataParallel] = {}
        self._embedding_sync: dict[tuple[object, ...], float] = {}
        self._shard_comm: dict[tuple[object, ...], ShardComm] = {}

    def layer_costs(self, layout: Layout) -> tuple[LayerCost, LayerCost]:
        """(dense, MoE) layer of ``layout`` (the dense one twice for a dense model)."""
        key = _LAYER_KEY(layout)
        costs = self._layers.get(key)
        if costs is None:
            times_key = _LAYER_TIMES_KEY(layout)
            times = self._layer_times.get(times_key)
            if times is None:
                times = self._layer_times[times_key] = self._dense_and_moe(
                    layer_times_with_modules, layout
                )
            nbytes = self._dense_and_moe(layer_bytes_with_modules, layout)
            dense, moe = (_layer_cost(t, b) for t, b in zip(times, nbytes, strict=True))
            costs = self._layers[key] = (dense, moe)
        return costs

    def _dense_and_moe(
        self, part: Callable[..., tuple[float, ...]], layout: Layout
    ) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """``part`` of the dense and the MoE layer (the dense one twice for a dense model)."""
        job, c = self.job, self.constants
        dense = part(job, False, layout, c)
        return dense, part(job, True, layout, c) if job.model.is_moe else dense

    def reserved_bytes(self, layout: Layout) -> float:
        """What the rank holds outside the allocator: the simulator's fixed figure where it
        sets one (a calibration), else the runtime's part and the communicators' buffers."""
        fixed = self.constants.reserved_memory_gib
        if fixed is not None:
            return fixed * GIB
        return reserved_bytes(self.model, self.cluster, layout)

    def shape(self, layout: Layout) -> StageShape:
        """The pipeline ranks of ``layout`` grouped into kinds."""
        key = (layout.pp, layout.layer_split)
        shape = self._shapes.get(key)
        if shape is None:
            split = layout.stage_layers(self.model, self.train)
            shape = self._shapes[key] = stage_shape(self.model, split)
        return shape

    def shares(self, layout: Layout, shape: StageShape) -> list[float]:
        """Per kind of rank, the share of its layers that full recompute checkpoints, over its
        chunks as the framework runs ``recompute_layers`` (``Layout.recomputed_chunks``)."""
        train = self.train
        return [layout.recomputed_layers(d + m, train) / (d + m) for d, m, _, _ in shape.kinds]

    def p2p_s(self, layout: Layout) -> tuple[float, float]:
        """A micro-batch's transfer over each of a rank's two pipeline boundaries, the slower
        first (:func:`_p2p_s`)."""
        key = _P2P_KEY(layout)
        seconds = self._p2p.get(key)
        if seconds is None:
            tokens = layout.micro_batch * self.train.seq_len / layout.cp
            seconds = _p2p_s(self.job, layout, tokens)
            self._p2p[key] = seconds
        return seconds

    def accumulate_s(self, layout: Layout) -> tuple[float, float]:
        """Seconds per (dense, routed-expert) parameter held that a micro-batch's gradient
        accumulation takes."""
        key = _ACCUMULATE_KEY(layout)
        seconds = self._accumulate.get(key)
        if seconds is None:
            bandwidth = self.cluster.device.achieved_memory_bytes_per_s
            seconds = self._accumulate[key] = (
                grad_accumulation_bytes(self.train, layout) / bandwidth,
                grad_accumulation_bytes(self.train, layout, expert=True) / bandwidth,
            )
        return seconds

    def logits(self, layout: Layout) -> tuple[float, float]:
        """(seconds, bytes) of the output layer and loss on the last stage (:func:`_logits`)."""
        key = _LOGITS_KEY(layout)
        logits = self._logits.get(key)
        if logits is None:
            tokens = layout.micro_batch * self.train.seq_len / layout.cp
            logits = _logits(self.job, layout, tokens)
            self._logits[key] = logits
        return logits

    def embedding_sync_s(self, layout: Layout) -> float:
        """The all-reduce of a tied embedding's gradient between the first and the last stage,
        once per step after the data-parallel reduction (s; 0 when there is none)."""
        key = _EMBEDDING_KEY(layout)
        seconds = self._embedding_sync.get(key)
        if seconds is None:
            nbytes = tied_embedding_grad_bytes(self.model, self.train, layout)
            group = layout.group("embedding", self.cluster.devices_per_node)
            seconds = all_reduce_time_s(nbytes, group, self.cluster) if nbytes else 0.0
            self._embedding_sync[key] = seconds
        return seconds

    def shard_comm(self, layout: Layout) -> ShardComm:
        """What ZeRO-2 and -3 send per layer and micro-batch
        (:func:`autotune.simulators.analytical.sharding.shard_comm`)."""
        if layout.zero_stage is None:
            return NO_SHARD_COMM
        key = _SHARD_KEY(layout)
        comm = self._shard_comm.get(key)
        if comm is None:
            p = self.params
            layers = (
                p.dense_layer,
                p.moe_layer_non_expert,
                p.expert_per_layer,
                p.embedding,
                p.head,
            )
            comm = self._shard_comm[key] = shard_comm(layers, self.cluster, self.train, layout)
        return comm

    def pipeline(self, layout: Layout) -> _Pipeline:
        """The stages of ``layout``, one per kind of pipeline rank, and the pace they set."""
        accumulate_s = self.accumulate_s(layout)
        key = (_PIPELINE_KEY(layout), accumulate_s)
        pipeline = self._pipelines.get(key)
        if pipeline is None:
            pipeline = self._pipelines[key] = _pipeline(self, layout, accumulate_s)
        return pipeline

    def interleaving(self, layout: Layout, shape: StageShape, stages: list[Stage]) -> float:
        """How much longer unequal chunks make the interleaved schedule than the closed form
        (:func:`autotune.simulators.analytical.stages.chunk_slowdown`)."""
        if not unequal_chunks(shape.stage_layers, layout.vpp):
            return 1.0
        return chunk_slowdown(
            layout,
            self.train,
            shape,
            layout.num_microbatches(self.train),
            stages[shape.rank_kinds[-1]].per_microbatch_s,
            self.logits(layout)[0],
        )

    def rank_terms(
        self, dense_params: float, expert_params: float, linear_params: float, layout: Layout
    ) -> RankTerms:
        """:meth:`_rank_terms`, once per parameter count and data-parallel layout."""
        layout_key = _TERMS_KEY(layout)
        key = (dense_params, expert_params, linear_params, layout_key)
        terms = self._terms.get(key)
        if terms is None:
            data_parallel = self._data_parallel.get(layout_key)
            if data_parallel is None:
                data_parallel = self._data_parallel[layout_key] = self._data_parallel_of(layout)
            terms = self._rank_terms(dense_params, expert_params, linear_params, data_parallel)
            self._terms[key] = terms
        return terms

    def _data_parallel_of(self, layout: Layout) -> _DataParallel:
        cluster, train = self.cluster, self.train
        per_node = cluster.devices_per_node
        return _DataParallel(
            layout=layout,
            sizes=state_bytes_of(train, layout),
            grad_bytes=train.grad_reduce_bytes,
            dense_group=layout.group("dp_cp", per_node),
            expert_group=layout.group("edp", per_node),
            dense_shards=(
                layout.group("dp_shard", per_node),
                layout.group("dp_replicate", per_node),
            ),
            expert_shards=(
                layout.group("edp_shard", per_node),
                layout.group("edp_replicate", per_node),
            ),
            layer_params=largest_layer_params(
                self.params.dense_layer,
                self.params.moe_layer_non_expert,
                self.params.expert_per_layer,
                layout,
            ),
        )

    def _rank_terms(
        self,
        dense_params: float,
        expert_params: float,
        linear_params: float,
        parallel: _DataParallel,
    ) -> RankTerms:
        """What the parameters of a pipeline rank cost beyond its layers: the data-parallel
        gradient reduction and parameter all-gather, the optimizer step, and their memory.

        The framework says in which dtype the reduction runs and whether a distributed
        optimizer reduce-scatters the gradients (docs/reference.md 7.2). With hybrid sharding
        the reduce-scatter and the gather run inside a replica's shard group and the shards
        are all-reduced across the replicas; ZeRO-2 and -3 reduce-scatter in every
        micro-batch instead (:func:`~autotune.simulators.analytical.sharding.sharded_dp_s`),
        leaving the replicas' all-reduce to the step, and ZeRO-3 gathers no weights after
        it (docs/decisions/0049).
        """
        cluster, train = self.cluster, self.train
        framework = train.framework
        layout, sizes = parallel.layout, parallel.sizes
        stage = layout.sharding
        fp8_primary = fp8_primary_params(train, layout, linear_params)
        reduce_s, gather_s = _reduce_and_gather(
            dense_params, expert_params, fp8_primary, parallel, cluster, train
        )
        optimizer_s = optimizer_step_s(
            dense_params,
            expert_params,
            layout,
            sizes,
            self.constants.optimizer_traffic_bytes_per_param,
            cluster.device,
        )
        states = state_memory_bytes(dense_params, expert_params, layout, sizes, fp8_primary)
        if train.fp8_kept:  # Transformer Engine's FP8 weight copies (docs/reference.md 7.6)
            states["fp8_weights"] = linear_params * cluster.device.fp8_weight_copies
        if stage >= ZERO_GRADS:  # whole layers in flight beside their shards
            states["unsharded"] = unsharded_bytes(
                parallel.layer_params,
                dense_params + expert_params,
                layout,
                sizes,
                framework.shard_prefetch_params,
                framework.pipeline_keeps_gathered,
            )
        return RankTerms(
            reduce_s=reduce_s,
            gather_s=gather_s,
            optimizer_s=optimizer_s,
            states=states,
            state_bytes=sum(states.values()),
            step_grads=step_grad_bytes(dense_params, expert_params, layout, sizes),
        )


def _reduce_and_gather(
    dense_params: float,
    expert_params: float,
    fp8_primary: float,
    parallel: _DataParallel,
    cluster: ClusterSpec,
    train: TrainSpec,
) -> tuple[float, float]:
    """(gradient reduction, weight gather) seconds of a rank's parameters at the step
    (:meth:`JobPrices._rank_terms`)."""
    framework = train.framework
    layout, sizes, grad_bytes = parallel.layout, parallel.sizes, parallel.grad_bytes
    reduce_s = gather_s = 0.0
    expert_fp8 = expert_params if fp8_primary else 0.0  # the experts are all linear
    groups = (
        (dense_params, fp8_primary - expert_fp8, parallel.dense_group, parallel.dense_shards),
        (expert_params, expert_fp8, parallel.expert_group, parallel.expert_shards),
    )
    stage = layout.sharding
    for params, fp8_params, group, (shard, replicas) in groups:
        if group.size == 1 or params == 0:
            continue
        if stage >= ZERO_GRADS:
            pass  # reduce-scattered in every micro-batch (the stage's dp_s)
        elif layout.distributed_optimizer and framework.reduce_scatter_grads:
            reduce_s += reduce_scatter_time_s(params * grad_bytes, shard, cluster)
        else:
            reduce_s += all_reduce_time_s(params * grad_bytes, group, cluster)
        if replicas.size > 1:  # the shards' gradients across the replicas
            reduce_s += all_reduce_time_s(params * grad_bytes / shard.size, replicas, cluster)
        if sizes.sharded_optimizer and stage < ZERO_PARAMS:  # gather the updated weights
            weight_bytes = gathered_weight_bytes(params, fp8_params, sizes)
            gather_s += all_gather_time_s(weight_bytes, shard, cluster)
    return reduce_s, gather_s


def _layer_cost(times: tuple[float, ...], nbytes: tuple[float, ...]) -> LayerCost:
    """A layer's cost from :func:`~autotune.simulators.analytical.recompute.
    layer_times_with_modules` and ``layer_bytes_with_modules``."""
    layer, (modules_s, modules_tp_s, modules_ep_s) = times[:-3], times[-3:]
    saved, inputs, core, freed = nbytes
    return LayerCost(
        *layer,  # type: ignore[misc]  # the eleven seconds of layer_times_s, in order
        activation_bytes=saved,
        input_bytes=inputs,
        core_bytes=core,
        modules_s=modules_s,
        modules_tp_s=modules_tp_s,
        modules_ep_s=modules_ep_s,
        modules_bytes=freed,
    )


_LAYER_KEY = attrgetter(*JobPrices.LAYER_FIELDS)
_LAYER_TIMES_KEY = attrgetter(*JobPrices.LAYER_TIMES_FIELDS)
_P2P_KEY = attrgetter(*JobPrices.P2P_FIELDS)
_LOGITS_KEY = attrgetter(*JobPrices.LOGITS_FIELDS)
_PIPELINE_KEY = attrgetter(*JobPrices.PIPELINE_FIELDS)
_ACCUMULATE_KEY = attrgetter(*JobPrices.ACCUMULATE_FIELDS)
_EMBEDDING_KEY = attrgetter(*JobPrices.EMBEDDING_FIELDS)
_TERMS_KEY = attrgetter(*JobPrices.TERMS_FIELDS)
_SHARD_KEY = attrgetter(*JobPrices.SHARD_FIELDS)


# ---- stages, pipeline, data parallelism, memory ----------------------------------------------


class _DataParallel(NamedTuple):
    """What a layout's data parallelism is, whatever the parameters a rank holds: a layout
    of it, the state bytes per parameter, gradient bytes in the reduction, the groups that
    reduce dense and expert gradients, each one's (shard group, group across replicas), and
    the parameters of the rank's largest layer."""

    layout: Layout
    sizes: StateBytes
    grad_bytes: float
    dense_group: GroupPlacement
    expert_group: GroupPlacement
    dense_shards: tuple[GroupPlacement, GroupPlacement]
    expert_shards: tuple[GroupPlacement, GroupPlacement]
    layer_params: float


class _Pipeline(NamedTuple):
    """A layout's pipeline: its ranks grouped into kinds, the stage of each kind, the slowest
    stage and the fill-and-drain bubble (s)."""

    shape: StageShape
    stages: list[Stage]
    slowest: Stage
    bubble_s: float


def _pipeline(job: JobPrices, layout: Layout, accumulate_s: tuple[float, float]) -> _Pipeline:
    dense, moe = job.layer_costs(layout)
    shape = job.shape(layout)
    sends, logits = job.p2p_s(layout), job.logits(layout)
    selective = "core_attn" in layout.recomputed_modules
    modules = layout.recompute == "selective"
    shard = job.shard_comm(layout)
    stages = [
        stage(
            job.params,
            dense,
            moe,
            kind,
            share=share,
            selective=selective,
            modules=modules,
            tp=layout.tp,
            etp=layout.expert_tp,
            ep=layout.ep,
            pp=layout.pp,
            vpp=layout.vpp,
            sends=sends,
            overlap_p2p=job.train.framework.overlap_p2p_comm,
            accumulate_s=accumulate_s,
            logits=logits,
            ops=FLOATS,
            shard=shard,
        )
        for kind, share in zip(shape.kinds, job.shares(layout, shape), strict=True)
    ]
    # The pipeline runs at the pace of its slowest rank, plus the fill and drain of the others.
    kind_s = [s.per_microbatch_s for s in stages]
    slowest = stages[kind_s.index(max(kind_s))]
    bubble_s = (sum(map(kind_s.__getitem__, shape.rank_kinds)) - slowest.per_microbatch_s) / (
        layout.vpp
    )
    return _Pipeline(shape, stages, slowest, bubble_s)


def _p2p_s(job: Job, layout: Layout, tokens: float) -> tuple[float, float]:
    """A micro-batch's transfer over each of the two pipeline boundaries of the rank whose
    links are slowest, the slower first (docs/reference.md 7.3).

    The boundary activation is ``tokens x hidden``, 1/tp of it with sequence parallelism.
    Frameworks that slice sends over TP (DeepSpeed's partitioned pipeline, Megatron-LM's old
    scatter/gather) send each rank's 1/tp slice and all-gather it over TP on the receiver,
    inside the node. A pipeline inside one node crosses no node boundary; one with a stage
    per node crosses one at every boundary; in between, the stages at a node's edge have one
    boundary on each kind of link.
    """
    model, cluster, train = job.model, job.cluster, job.train
    if layout.pp == 1:
        return 0.0, 0.0
    act = dtype_bytes(train.compute_dtype)
    sliced = train.framework.p2p_tp_sliced and not layout.sequence_parallel
    full = tokens * model.hidden_size * act
    send = full / layout.tp if (layout.sequence_parallel or sliced) else full
    gather = 0.0
    if sliced and layout.tp > 1:
        gather = all_gather_time_s(full, layout.group("tp", cluster.devices_per_node), cluster)
    near, far = (
        train.framework.boundary_s(p2p_time_s(send, same_node, cluster), gather)
        for same_node in (True, False)
    )
    pipeline = layout.group("pp", cluster.devices_per_node)
    if pipeline.nodes == 1:
        return near, near
    return far, far if pipeline.per_node == 1 else near


def _logits(
    job: Job,
    layout: Layout,
    tokens: float,
) -> tuple[float, float]:
    """(seconds, bytes) of the output layer and loss of one micro-batch on the last stage."""
    model, cluster, train = job.model, job.cluster, job.train
    vocab = model.vocab_size / layout.tp
    seconds = sum(
        gemm_pass_s(tokens, model.hidden_size, vocab, cluster.device, train.compute_dtype)
    )
    nbytes = tokens * vocab * train.framework.logits_bytes(layout.tp, train.compute_dtype)
    return seconds + 2 * nbytes / cluster.device.achieved_memory_bytes_per_s, nbytes


# size: the scalar twin of batch.simulate_batch, kept line for line beside it
def simulate_layout(job: JobPrices, layout: Layout) -> Prediction:
    shape, stages, slowest, bubble_s = job.pipeline(layout)
    m = layout.num_microbatches(job.train)
    bubble_s = interleaved_bubble_s(
        m, slowest.per_microbatch_s, bubble_s, job.interleaving(layout, shape, stages)
    )
    embedding_s = job.embedding_sync_s(layout)
    reserved = job.reserved_bytes(layout)
    fragmentation = job.constants.allocator_fragmentation
    terms, kind_dp, kind_bytes, kind_activations, kind_lost, kind_excess = [], [], [], [], [], []
    for s, first_rank, kind in zip(stages, shape.first_ranks, shape.kinds, strict=True):
        t = job.rank_terms(s.dense_params, s.expert_params, s.linear_params, layout)
        if releases_chunk_states(job.train.framework.pipeline_keeps_gathered, layout):
            sizes = state_bytes_of(job.train, layout)
            t = released_rank_terms(
                t, job.model, shape, first_rank, layout, m, s.activation_bytes, sizes
            )
        terms.append(t)
        dp_s = exposed_dp_s(
            t.reduce_s,
            t.gather_s,
            s.last_backward_s,
            job.train.overlaps_grad_reduce,
            job.train.overlaps_param_gather,
            FLOATS,
        )
        _, _, first, last = kind
        dp_s += embedding_s * (first or last)  # the two ends wait for the tied embedding
        kind_dp.append((dp_s, t.optimizer_s))
        # The first rank of a kind holds the most micro-batches in flight: its worst rank.
        activations = s.activation_bytes * rank_in_flight(
            shape.stage_layers, m, layout.vpp, first_rank
        )
        kind_activations.append(activations)
        excess = step_excess_bytes(t.step_grads, activations, s.working_bytes)
        kind_excess.append(excess)
        churning = churning_bytes(
            activations + s.working_bytes + excess, t.states["gradients"], job.train, layout
        )
        lost = fragmentation_bytes(churning, fragmentation)
        kind_lost.append(lost)
        kind_bytes.append(
            memory_bytes(t.state_bytes + excess, activations, s.working_bytes, reserved, lost)
        )
    dp_s, optimizer_s = max(kind_dp, key=sum)
    breakdown = step_breakdown(m, slowest, dp_s, bubble_s, optimizer_s)
    step_s = sum(breakdown.values())
    worst = kind_bytes.index(max(kind_bytes))
    # a device-level peak: every rank's with its copies' own blocks kept, the fullest
    device = max(
        b + t.step_grads - e for b, t, e in zip(kind_bytes, terms, kind_excess, strict=True)
    )
    memory = {
        **terms[worst].states,
        "activations": kind_activations[worst],
        "working": stages[worst].working_bytes,
        "step_grads": kind_excess[worst],
        "fragmentation": kind_lost[worst],
        "reserved": reserved,
    }
    tokens_per_s_per_device, mfu = throughput(step_s, layout.world_size, job.rates)
    return Prediction(
        step_time_s=step_s,
        memory_gib=kind_bytes[worst] / GIB,
        memory_capacity_gib=job.cluster.device.memory_gib,
        breakdown=breakdown,
        memory_breakdown_gib={k: v / GIB for k, v in memory.items()},
        tokens_per_s_per_device=tokens_per_s_per_device,
        mfu=mfu,
        detail=LazyDetail(
            partial(_detail, job, layout, shape, stages, terms, (reserved, fragmentation), m)
        ),
        cached_gib=(device - kind_bytes[worst]) / GIB,
    )


def _detail(
    job: JobPrices,
    layout: Layout,
    shape: StageShape,
    stages: list[Stage],
    terms: list[RankTerms],
    outside: tuple[float, float],
    microbatches: int,
) -> dict[str, object]:
    return stage_detail(
        shape,
        [s.per_microbatch_s for s in stages],
        [t.state_bytes for t in terms],
        [s.activation_bytes for s in stages],
        [s.working_bytes for s in stages],
        kind_churning_grads=[
            churning_grad_bytes(t.states["gradients"], job.train, layout) for t in terms
        ],
        kind_step_grads=[t.step_grads for t in terms],
        outside=outside,
        microbatches=microbatches,
        vpp=layout.vpp,
    )
