"""HierarchicalSimulator: compile -> cost -> intra-stage -> inter-stage -> prediction."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.simulators.base import Simulator
from autotune.simulators.calibration import Calibration
from autotune.simulators.calibration import calibrate_constants
from autotune.simulators.calibration import constant_values
from autotune.simulators.device_memory import churning_grad_bytes
from autotune.simulators.device_memory import fragmentation_bytes
from autotune.simulators.device_memory import reserved_bytes
from autotune.simulators.hierarchical.constants import HierarchicalConstants
from autotune.simulators.hierarchical.cost import CommCost
from autotune.simulators.hierarchical.cost import ProfiledCost
from autotune.simulators.hierarchical.cost import RooflineCost
from autotune.simulators.hierarchical.cost import load_cost_table
from autotune.simulators.hierarchical.graph import COMPUTE_CATEGORIES
from autotune.simulators.hierarchical.graph import LayerGraph
from autotune.simulators.hierarchical.graph import layer_shapes
from autotune.simulators.hierarchical.intra_stage import PARTS
from autotune.simulators.hierarchical.intra_stage import Block
from autotune.simulators.hierarchical.intra_stage import ChunkPlan
from autotune.simulators.hierarchical.intra_stage import StageCoster
from autotune.simulators.hierarchical.sharding import grad_buckets
from autotune.simulators.hierarchical.sharding import shard_comm_s
from autotune.simulators.hierarchical.sharding import with_sharding
from autotune.simulators.hierarchical.trace import write_chrome_trace
from autotune.simulators.hierarchical.views import Rank
from autotune.simulators.hierarchical.views import rank_detail
from autotune.simulators.hierarchical.views import table_coverage
from autotune.simulators.job import Job
from autotune.simulators.layout import ZERO_GRADS
from autotune.simulators.layout import ZERO_PARAMS
from autotune.simulators.layout import Layout
from autotune.simulators.prediction import BREAKDOWN_KEYS
from autotune.simulators.prediction import Prediction
from autotune.simulators.schedule import PipelineRun
from autotune.simulators.schedule import Timeline
from autotune.simulators.schedule import grad_sync
from autotune.simulators.schedule import run_pipeline
from autotune.simulators.specs import ClusterSpec
from autotune.simulators.specs import ModelSpec
from autotune.simulators.specs import TrainSpec
from autotune.simulators.states import fp8_primary_params
from autotune.simulators.states import gathered_weight_bytes
from autotune.simulators.states import grad_accumulation_bytes
from autotune.simulators.states import optimizer_step_s
from autotune.simulators.states import released_unsharded_bytes
from autotune.simulators.states import releases_chunk_states
from autotune.simulators.states import state_bytes_of
from autotune.simulators.states import state_memory_bytes
from autotune.simulators.states import step_excess_bytes
from autotune.simulators.states import step_grad_bytes
from autotune.simulators.states import tied_embedding_grad_bytes
from autotune.simulators.states import unsharded_bytes

__all__ = ["HierarchicalSimulator"]

_GIB = 2**30


@dataclass(frozen=True, slots=True)
class HierarchicalSimulator(Simulator):
    """The ParallelSim / LM-SimBench pipeline as a :class:`~simulators.Simulator`.

    Layers are compiled on the meta device into operator graphs (torch is imported on the
    first ``simulate``), priced per operator (roofline or a profiled table), timed per chunk
    with compute and communication streams, and run through the pipeline schedule for every
    pipeline rank. Step time is the slowest rank's (``slowest_rank``); ``detail`` holds, per
    pipeline rank, the layers (``stage_layers``), step time and its breakdown (``rank_time_s``,
    ``rank_breakdown_s``), memory and its breakdown (``rank_memory_gib``,
    ``rank_memory_breakdown_gib``) and compute time by operator class
    (``rank_op_category_time_s``; the slowest rank's as ``op_category_time_s``), in seconds and
    GiB; with a profiled table, what it covers (``op_costs``, see :func:`_coverage`).
    :meth:`simulate_timeline` adds the event timeline (``timeline``, see
    :func:`autotune.simulators.hierarchical.trace.write_chrome_trace`).
    """

    constants: HierarchicalConstants
    name = "hierarchical"
    calibrated_constants = {
        "matmul_efficiency": ("efficiency.matmul", "efficiency.attention"),
        "memory_efficiency": ("efficiency.memory",),
        "host_overhead": ("host_op_overhead_us",),
        "memory_constant_gib": ("reserved_memory_gib",),
    }

    @classmethod
    def from_config(cls, constants: Mapping[str, Any]) -> HierarchicalSimulator:
        """Build from ``conf/simulator/hierarchical.yaml`` (without its ``name`` key)."""
        return cls(HierarchicalConstants.from_mapping(constants))

    def calibrated(self, calibration: Calibration) -> HierarchicalSimulator:
        """The calibrated constants, without ``efficiency.comm``: the calibrated cluster's
        links carry it (:meth:`effective_cluster`)."""
        constants = calibrate_constants(self.constants, calibration, self.calibrated_constants)
        efficiency = dataclasses.replace(constants.efficiency, comm=None)
        return HierarchicalSimulator(dataclasses.replace(constants, efficiency=efficiency))

    def calibrated_values(self) -> dict[str, float]:
        return constant_values(self.constants, self.calibrated_constants)

    def effective_cluster(self, cluster: ClusterSpec) -> ClusterSpec:
        """The cluster with both link levels at ``efficiency.comm`` where that is set."""
        comm = self.constants.efficiency.comm
        if comm is None:
            return cluster
        return dataclasses.replace(
            cluster,
            intra_node=dataclasses.replace(cluster.intra_node, efficiency=comm),
            inter_node=dataclasses.replace(cluster.inter_node, efficiency=comm),
        )

    def simulate(self, job: Job, layout: Layout) -> Prediction:
        """Predict one layout; ``detail`` holds every view but the event timeline.

        A prediction is a function of the constants, the job and the layout alone, and the
        latest few thousand are remembered: the commands price the same rows more than once
        (a benchmark's zero-shot pass, then the probe loop's priors, step shares and margins
        over the same shipped rows). :meth:`forget_predictions` empties the memory.
        """
        return _remembered(self.constants, job, layout)

    @staticmethod
    def forget_predictions() -> None:
        """Forget the predictions :meth:`simulate` remembers (for timing the pricing itself:
        the layer graphs stay compiled)."""
        _remembered.cache_clear()

    def simulate_timeline(self, job: Job, layout: Layout) -> Prediction:
        """:meth:`simulate`, plus the event timeline in ``detail["timeline"]``.

        The timeline holds seven numbers per block and transfer of every pipeline rank (about
        half a MiB for 256 micro-batches on 4 x 2 virtual stages), so the plain prediction,
        which a search keeps for every layout it prices, leaves it out.
        """
        return self._predict(job, layout, record=True)

    # size: the step assembled from the ranks' timelines, the schedule and memory in one pass
    def _predict(self, job: Job, layout: Layout, record: bool) -> Prediction:
        from autotune.simulators.hierarchical.compile import compile_layer  # torch loads here

        consts = self.constants
        job = dataclasses.replace(job, cluster=self.effective_cluster(job.cluster))
        model, cluster, train = job.model, job.cluster, job.train
        shapes = layer_shapes(job, layout)
        graphs = {kind: compile_layer(s) for kind, s in shapes.items()}
        roofline = RooflineCost(
            device=cluster.device, precision=train.compute_dtype, efficiency=consts.efficiency
        )
        cost: RooflineCost | ProfiledCost = roofline
        if consts.op_costs:
            cost = ProfiledCost(table=load_cost_table(consts.op_costs), fallback=roofline)
        comm = CommCost(
            cluster=cluster,
            layout=layout,
            deepep_copies=model.moe_top_k if train.token_dispatcher == "deepep" else 0,
        )
        coster = StageCoster(
            cost=cost,
            comm=comm,
            tp_overlap=layout.hides_tp_comm(train),
            ep_overlap=train.moe_a2a_overlap,
            host_op_s=consts.host_op_overhead_us * 1e-6,
            checkpoint_ops=(
                consts.host_ops_per_checkpoint_forward,
                consts.host_ops_per_checkpoint_backward,
            ),
        )
        head = shapes["head"]
        per_logit = train.framework.logits_bytes(layout.tp, train.compute_dtype)
        logits = head.micro_batch * head.seq_q * head.vocab * per_logit
        plans = _plans(model, train, layout, graphs, logits)
        tied = model.tied_embeddings
        # Each backward adds its chunk's weight gradients to the buffer the step reduces.
        bandwidth = cluster.device.achieved_memory_bytes_per_s
        dense_s = grad_accumulation_bytes(train, layout) / bandwidth
        expert_s = grad_accumulation_bytes(train, layout, expert=True) / bandwidth
        blocks = [
            _with_accumulation(
                *coster.chunk_blocks(plan),
                dense_s * _params(plan, expert=False, tied=tied)
                + expert_s * _params(plan, expert=True, tied=tied),
            )
            for plan in plans
        ]
        if layout.zero_stage is not None:  # ZeRO-2 and -3: per-layer gathers, reduce-scatters
            blocks = [
                with_sharding(*block, shard_comm_s(plan, train, layout, comm, tied))
                for plan, block in zip(plans, blocks, strict=True)
            ]
        p, v, m = layout.pp, layout.vpp, layout.num_microbatches(train)
        p2p_s = _p2p_s(graphs["head"].input_bytes, train, layout, comm)
        run = run_pipeline(
            "interleaved" if v > 1 else consts.schedule,
            p,
            m,
            v,
            forward_s=[f.duration_s for f, _ in blocks],
            backward_s=[b.duration_s for _, b in blocks],
            p2p_s=[p2p_s(k % p, (k + 1) % p) for k in range(p * v - 1)],
            activation_bytes=[plan.activation_bytes() for plan in plans],
            transient_bytes=[plan.transient_bytes() for plan in plans],
            record=record,
            blocking=not (v > 1 and train.framework.overlap_p2p_comm),
        )
        # The first and last stages all-reduce a tied embedding's gradient after the DP sync.
        tied_s = comm.time_s(
            "all_reduce", tied_embedding_grad_bytes(model, train, layout), "embedding"
        )
        ranks = [
            self._rank(
                r,
                plans[r::p],
                blocks[r::p],
                run,
                m,
                cluster,
                train,
                layout,
                comm,
                tied,
                tied_s if r in (0, p - 1) else 0.0,
            )
            for r in range(p)
        ]
        reserved = (
            reserved_bytes(model, cluster, layout)
            if consts.reserved_memory_gib is None
            else consts.reserved_memory_gib * _GIB
        )
        for rank in ranks:  # what each rank holds outside its tensors
            memory = rank[3]
            churning = (
                memory["activations"]
                + memory["step_grads"]
                + churning_grad_bytes(memory["gradients"], train, layout)
            )
            memory["fragmentation"] = fragmentation_bytes(churning, consts.allocator_fragmentation)
            memory["reserved"] = reserved / _GIB
        slowest = max(range(p), key=lambda r: ranks[r][0])
        step_s, breakdown, *_ = ranks[slowest]
        worst = max(ranks, key=lambda rank: sum(rank[3].values()))
        # a device-level peak: every rank's with its copies' own blocks kept, the fullest
        device = max(sum(rank[3].values()) + rank[4] for rank in ranks)
        world = layout.world_size
        tokens = train.tokens_per_step
        detail = rank_detail(ranks, slowest, layout.stage_layers(model, train))
        detail["schedule"] = "interleaved" if v > 1 else consts.schedule
        if record:
            detail["timeline"] = Timeline(tuple(run.timeline), chunked=v > 1)
        if isinstance(cost, ProfiledCost):
            coverage = table_coverage(cost, graphs.values(), cluster)
            detail["op_costs"] = coverage
            detail["profiled_op_fraction"] = coverage["profiled"] / max(1, coverage["operators"])
        return Prediction(
            step_time_s=step_s,
            memory_gib=sum(worst[3].values()),
            memory_capacity_gib=cluster.device.memory_gib,
            breakdown=breakdown,
            memory_breakdown_gib=worst[3],
            tokens_per_s_per_device=tokens / step_s / world,
            mfu=job.model_flops_per_step / (step_s * world * job.peak_flops),
            detail=detail,
            cached_gib=device - sum(worst[3].values()),
        )

    def write_trace(self, job: Job, layout: Layout, path: str | Path) -> Path:
        """Simulate the layout and write its timeline as a Chrome trace (Perfetto)."""
        return write_chrome_trace(self.simulate_timeline(job, layout), path)

    # size: one pipeline rank's timeline: every layer kind and its chunks in one loop
    def _rank(
        self,
        rank: int,
        plans: list[ChunkPlan],
        blocks: list[tuple[Block, Block]],
        run: PipelineRun,
        m: int,
        cluster: ClusterSpec,
        train: TrainSpec,
        layout: Layout,
        comm: CommCost,
        tied: bool,
        tied_sync_s: float,
    ) -> Rank:
        """Step time, breakdown, op classes and memory (GiB) of one rank; DP spans to the run."""
        consts, framework = self.constants, train.framework
        states = state_bytes_of(train, layout)
        dense = [_params(plan, expert=False, tied=tied) for plan in plans]
        experts = [_params(plan, expert=True, tied=tied) for plan in plans]
        buckets = grad_buckets(dense, experts, train, layout, comm)
        overlapped = train.overlaps_grad_reduce
        finish = run.finish_s[rank]
        synced = grad_sync(
            rank,
            run.last_backward[rank],
            buckets,
            finish,
            overlapped,
            run.timeline,
            tied_sync_s,
        )
        optimizer_s = optimizer_step_s(
            sum(dense),
            sum(experts),
            layout,
            states,
            consts.optimizer_traffic_bytes_per_param,
            cluster.device,
        )
        linear = sum(g.params for plan in plans for g in plan.layers) + sum(experts)
        fp8_primary = fp8_primary_params(train, layout, linear)
        expert_fp8 = sum(experts) if fp8_primary else 0.0  # the experts are all linear
        gather_s = 0.0
        gathers = layout.sharding < ZERO_PARAMS  # ZeRO-3 updates the shards it holds
        if states.sharded_optimizer and not train.overlaps_param_gather and gathers:
            dense_bytes = gathered_weight_bytes(sum(dense), fp8_primary - expert_fp8, states)
            expert_bytes = gathered_weight_bytes(sum(experts), expert_fp8, states)
            gather_s = comm.time_s("all_gather", dense_bytes, "dp_shard") + comm.time_s(
                "all_gather", expert_bytes, "edp_shard"
            )
        breakdown = dict.fromkeys(BREAKDOWN_KEYS, 0.0)
        categories = dict.fromkeys(COMPUTE_CATEGORIES, 0.0)
        for forward, backward in blocks:
            for block in (forward, backward):
                for key in (*PARTS, "dp_comm"):
                    breakdown[key] += m * block.parts.get(key, 0.0)
                for key in COMPUTE_CATEGORIES:
                    categories[key] += m * block.categories[key]
        breakdown["bubble"] = run.bubble_s[rank]
        breakdown["pp_comm"] = run.pp_comm_s[rank]
        breakdown["dp_comm"] += synced - finish + gather_s
        breakdown["optimizer"] = optimizer_s
        step_s = synced + optimizer_s + gather_s
        state_bytes = state_memory_bytes(sum(dense), sum(experts), layout, states, fp8_primary)
        if train.fp8_kept:  # Transformer Engine's FP8 weight copies (docs/reference.md 7.6)
            state_bytes["fp8_weights"] = linear * cluster.device.fp8_weight_copies
        if layout.sharding >= ZERO_GRADS:  # whole layers in flight beside their shards
            largest = max((g.params + g.expert_params for p in plans for g in p.layers), default=0)
            state_bytes["unsharded"] = unsharded_bytes(
                largest,
                sum(dense) + sum(experts),
                layout,
                states,
                framework.shard_prefetch_params,
                framework.pipeline_keeps_gathered,
            )
        if releases_chunk_states(framework.pipeline_keeps_gathered, layout):
            params = [d + e for d, e in zip(dense, experts, strict=True)]
            total = sum(params)
            state_bytes["unsharded"] = released_unsharded_bytes(
                state_bytes["unsharded"],
                states,
                rank,
                layout,
                m,
                [plan.activation_bytes() for plan in plans],
                [plan.transient_bytes() for plan in plans],
                [chunk / total for chunk in params],
            )
        activations = run.peak_activation_bytes[rank]  # the working set included
        step_grads = step_grad_bytes(sum(dense), sum(experts), layout, states)
        excess = step_excess_bytes(step_grads, activations, 0.0)
        memory = {
            **{key: value / _GIB for key, value in state_bytes.items()},
            "activations": activations / _GIB,
            "step_grads": excess / _GIB,
        }

        return step_s, breakdown, categories, memory, (step_grads - excess) / _GIB


# 4,096 hold every row of the shipped table, at a few KiB each.
@functools.lru_cache(maxsize=4096)
def _remembered(constants: HierarchicalConstants, job: Job, layout: Layout) -> Prediction:
    return HierarchicalSimulator(constants)._predict(job, layout, record=False)


def _plans(
    model: ModelSpec,
    train: TrainSpec,
    layout: Layout,
    graphs: Mapping[str, LayerGraph],
    logits_bytes: float,
) -> list[ChunkPlan]:
    """The chunk of every virtual stage (index ``chunk * pp + rank``), Megatron's assignment.

    Virtual stages hold consecutive layers in index order (``Layout.chunk_layers``: the
    framework's split of the layers over stages, each stage's dealt over its chunks); full
    recompute takes the first layers of each chunk, as many as the framework recomputes there
    (``Layout.recomputed_chunks``).
    ``logits_bytes``: the head's logits working set (last virtual stage).
    """
    counts = layout.chunk_layers(model, train)
    full = [layout.recomputed_chunks(n, train) for n in layout.stage_layers(model, train)]
    plans = []
    first = 0
    for vs, count in enumerate(counts):
        chunk, rank = divmod(vs, layout.pp)
        recomputed = full[rank][chunk]
        layers = tuple(
            graphs["dense" if i < model.num_dense_layers else "moe"]
            for i in range(first, first + count)
        )
        first += count
        modes = tuple(
            "full"
            if i < recomputed
            else "selective"
            if layout.recompute == "selective"
            else "none"
            for i in range(count)
        )
        last = vs == len(counts) - 1
        plans.append(
            ChunkPlan(
                layers=layers,
                recompute=modes,
                embedding=graphs["embedding"] if vs == 0 else None,
                head=graphs["head"] if last else None,
                logits_bytes=logits_bytes if last else 0.0,
            )
        )
    return plans


def _p2p_s(
    boundary_bytes: float, train: TrainSpec, layout: Layout, comm: CommCost
) -> Callable[[int, int], float]:
    """Seconds of one pipeline send between two pipeline ranks (src, dst).

    ``boundary_bytes`` is what one rank holds at a layer boundary (1/tp of it with SP). A
    framework that slices sends over TP sends 1/tp and all-gathers over TP on arrival; a
    framework that sends the activation and its gradient one after the other pays each
    boundary twice (:meth:`simulators.FrameworkSpec.boundary_s`, docs/reference.md 7.3).
    """
    sliced = train.framework.p2p_tp_sliced and not layout.sequence_parallel and layout.tp > 1
    send = boundary_bytes / layout.tp if sliced else boundary_bytes
    gather_s = comm.time_s("all_gather", boundary_bytes, "tp") if sliced else 0.0
    exchange = train.framework.boundary_s
    return lambda src, dst: exchange(comm.p2p_s(send, src, dst, "pp"), gather_s)


def _with_accumulation(forward: Block, backward: Block, seconds: float) -> tuple[Block, Block]:
    """The chunk's blocks, its backward followed by ``seconds`` of gradient accumulation (a
    memory-bound pass on the compute stream)."""
    if not seconds:
        return forward, backward
    parts = {**backward.parts, "compute": backward.parts["compute"] + seconds}
    categories = {**backward.categories, "memory": backward.categories["memory"] + seconds}
    return forward, Block(
        duration_s=backward.duration_s + seconds, parts=parts, categories=categories
    )


def _params(plan: ChunkPlan, expert: bool, tied: bool) -> int:
    """Weights of a chunk; a tied output layer in the embedding's chunk shares its weight."""
    if expert:
        return sum(g.expert_params for g in plan.layers)
    ends = sum(g.params for g in (plan.embedding, plan.head) if g is not None)
    if tied and plan.embedding is not None and plan.head is not None:
        ends -= plan.embedding.params  # the vocab x hidden/tp matrix, counted once
    return sum(g.params for g in plan.layers) + ends
