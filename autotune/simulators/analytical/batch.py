"""The analytical simulator over many layouts at once: the scalar path's formulas on arrays.

:meth:`autotune.simulators.analytical.AnalyticalSimulator.simulate_many` turns the layouts into
columns, one per field. Each piece of a price that depends on a few fields (a layer, the
stage shape, a pipeline send, the output layer, what a rank's parameters cost beyond its
layers) is computed by the scalar path's own function, once per distinct value of those
fields; the pipeline-stage formulas of :mod:`autotune.simulators.analytical.stages` then run on
arrays of layouts x stage kinds. The numbers are those of ``simulate``, but for the order in which
the bubble adds up a pipeline's ranks (a few units in the last place).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain
from operator import attrgetter
from typing import Any
from typing import NamedTuple
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from autotune.simulators.analytical.chunk_states import release_chunk_states
from autotune.simulators.analytical.chunk_states import unequal_chunk_effects
from autotune.simulators.analytical.prices import JobPrices
from autotune.simulators.analytical.sharding import ShardComm
from autotune.simulators.analytical.stages import ARRAYS
from autotune.simulators.analytical.stages import GIB
from autotune.simulators.analytical.stages import LayerCost
from autotune.simulators.analytical.stages import Stage
from autotune.simulators.analytical.stages import StageShape
from autotune.simulators.analytical.stages import exposed_dp_s
from autotune.simulators.analytical.stages import interleaved_bubble_s
from autotune.simulators.analytical.stages import memory_bytes
from autotune.simulators.analytical.stages import stage
from autotune.simulators.analytical.stages import stage_detail
from autotune.simulators.analytical.stages import step_breakdown
from autotune.simulators.analytical.stages import throughput
from autotune.simulators.device_memory import churning_grad_share
from autotune.simulators.device_memory import fragmentation_bytes
from autotune.simulators.layout import LAYOUT_FIELDS
from autotune.simulators.layout import Layout
from autotune.simulators.prediction import LazyDetail
from autotune.simulators.prediction import Prediction
from autotune.simulators.states import step_excess_bytes

__all__ = ["BatchPrediction", "simulate_batch"]

Array = NDArray[Any]
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchPrediction:
    """The predictions of many layouts, as numpy arrays with one entry per layout.

    The fields mean what :class:`simulators.Prediction`'s do; :meth:`prediction` gives one
    layout's as a :class:`simulators.Prediction`, ``detail`` included.
    """

    step_time_s: Array
    memory_gib: Array
    cached_gib: Array
    memory_capacity_gib: float
    breakdown: dict[str, Array]
    memory_breakdown_gib: dict[str, Array]
    tokens_per_s_per_device: Array
    mfu: Array
    _detail: _Detail
    _lists: dict[str, list[Any]] = dataclasses.field(default_factory=dict)  # filled on first use

    @property
    def fits(self) -> Array:
        return self.memory_gib <= self.memory_capacity_gib

    def __len__(self) -> int:
        return len(self.step_time_s)

    def prediction(self, index: int) -> Prediction:
        """The prediction of layout ``index`` (negative counts from the end)."""
        row = range(len(self))[index]
        if not self._lists:  # Python floats once, so that taking every prediction is cheap
            self._lists.update(self._columns())
        lists = self._lists
        return Prediction(
            step_time_s=lists["step_time_s"][row],
            memory_gib=lists["memory_gib"][row],
            memory_capacity_gib=self.memory_capacity_gib,
            breakdown={key: lists[key][row] for key in self.breakdown},
            memory_breakdown_gib={
                key: lists[f"memory:{key}"][row] for key in self.memory_breakdown_gib
            },
            tokens_per_s_per_device=lists["tokens_per_s_per_device"][row],
            mfu=lists["mfu"][row],
            detail=LazyDetail(partial(self._detail.of, row)),
            cached_gib=lists["cached_gib"][row],
        )

    def _columns(self) -> dict[str, list[Any]]:
        arrays = {
            "step_time_s": self.step_time_s,
            "memory_gib": self.memory_gib,
            "cached_gib": self.cached_gib,
            "tokens_per_s_per_device": self.tokens_per_s_per_device,
            "mfu": self.mfu,
            **self.breakdown,
            **{f"memory:{key}": v for key, v in self.memory_breakdown_gib.items()},
        }
        return {name: array.tolist() for name, array in arrays.items()}


@dataclass(frozen=True, slots=True)
class _Detail:
    """What :func:`stage_detail` needs of each layout: its stage shape and, per kind, seconds
    per micro-batch, state, activation and working bytes, and the step's gradient copies."""

    shapes: list[StageShape]
    shape_of: Array  # index into shapes, per layout
    kind_s: Array  # (layouts, kinds), like the three below
    states: Array
    activations: Array
    working: Array
    churning_grads: Array
    step_grads: Array
    microbatches: Array
    vpp: Array
    reserved: Array
    fragmentation: float

    def of(self, row: int) -> dict[str, object]:
        shape = self.shapes[self.shape_of[row]]
        kinds = len(shape.kinds)
        return stage_detail(
            shape,
            self.kind_s[row, :kinds].tolist(),
            self.states[row, :kinds].tolist(),
            self.activations[row, :kinds].tolist(),
            self.working[row, :kinds].tolist(),
            kind_churning_grads=self.churning_grads[row, :kinds].tolist(),
            kind_step_grads=self.step_grads[row, :kinds].tolist(),
            outside=(float(self.reserved[row]), self.fragmentation),
            microbatches=int(self.microbatches[row]),
            vpp=int(self.vpp[row]),
        )


# Layout fields held as numbers; the others (text, tuples, None) are held as codes.
_NUMBERS = tuple(f.name for f in dataclasses.fields(Layout) if f.type in ("int", "bool"))
_CODED = tuple(name for name in LAYOUT_FIELDS if name not in _NUMBERS)


class _Columns:
    """The layouts as one integer column per field (text, tuples and None as codes), and
    the groups of layouts that agree on some fields."""

    def __init__(self, layouts: Sequence[Layout]) -> None:
        self.layouts = layouts
        flat = chain.from_iterable(map(attrgetter(*_NUMBERS), layouts))
        numbers = np.fromiter(flat, np.int64, len(layouts) * len(_NUMBERS))
        numbers = numbers.reshape(len(layouts), len(_NUMBERS)).T.copy()
        self.codes: dict[str, Array] = dict(zip(_NUMBERS, numbers, strict=True))
        self.values: dict[str, dict[object, int]] = {}  # of the coded fields: value -> code
        for name in _CODED:
            column = list(map(attrgetter(name), layouts))
            ids = {value: code for code, value in enumerate(dict.fromkeys(column))}
            self.codes[name] = np.fromiter(map(ids.__getitem__, column), np.int64, len(column))
            self.values[name] = ids
        self.codes["expert_tp"] = np.fromiter(map(attrgetter("expert_tp"), layouts), np.int64)

    def number(self, name: str) -> Array:
        """A numeric field as a column vector (layouts x 1) of floats, which mix with the
        other arrays at full speed (and hold these small integers exactly)."""
        return self.codes[name][:, None].astype(np.float64)

    def equals(self, name: str, value: object) -> Array:
        """Whether a coded field is ``value``, as a column vector of 0.0 and 1.0."""
        return (self.codes[name][:, None] == self.values[name].get(value, -1)).astype(np.float64)

    def groups(self, names: Sequence[str]) -> tuple[Array, Array]:
        """(first layout of each group, group of each layout) of the layouts that agree on
        ``names``."""
        key = np.zeros(len(self.layouts), dtype=np.int64)
        for name in names:
            key = _combine(key, self.codes[name])
        _, first, group = np.unique(key, return_index=True, return_inverse=True)
        return first, group.reshape(-1)

    def each(self, names: Sequence[str], compute: Callable[[Layout], T]) -> tuple[list[T], Array]:
        """``compute`` of one layout of each group agreeing on ``names``, and the group of
        each layout."""
        first, group = self.groups(names)
        return [compute(self.layouts[i]) for i in first], group


def _combine(key: Array, codes: Array) -> Array:
    """One integer per distinct (key, code) pair, in the order of the pairs."""
    if not len(key):
        return key
    radix = int(codes.max()) + 1
    if int(key.max()) >= np.iinfo(np.int64).max // max(radix, 1) // 2:
        key = np.unique(key, return_inverse=True)[1].reshape(-1)
    return key * radix + codes


def _column(values: Sequence[float], group: Array) -> Array:
    """Per-group values spread over the layouts, as a column vector."""
    return np.asarray(values, dtype=np.float64)[group][:, None]


_RECOMPUTE_FIELDS = ("recompute", "recompute_modules")


def _core_recomputed(layout: Layout) -> float:
    """1.0 where selective recompute checkpoints core attention."""
    return float("core_attn" in layout.recomputed_modules)


def _layer_costs(job: JobPrices, columns: _Columns) -> tuple[LayerCost, LayerCost]:
    """The dense and MoE layer of every layout, as column vectors."""
    costs, group = columns.each(job.LAYER_FIELDS, job.layer_costs)
    fields = [f.name for f in dataclasses.fields(LayerCost)]
    return (
        LayerCost(**{f: _column([getattr(d, f) for d, _ in costs], group) for f in fields}),
        LayerCost(**{f: _column([getattr(m, f) for _, m in costs], group) for f in fields}),
    )


# The arrays of _kinds, first the four of a kind's key (StageShape.kinds); all floats, which
# mix with the other arrays at full speed and hold these small integers exactly.
_KIND_ARRAYS = ("n_dense", "n_moe", "first", "last", "first_rank", "ranks", "share")


def _kinds(job: JobPrices, columns: _Columns) -> tuple[list[StageShape], Array, dict[str, Array]]:
    """Every layout's stage shape (the shapes met, and which one each layout has) and its
    kinds as (layouts x kinds) arrays: ``n_dense``, ``n_moe``, ``first``, ``last``,
    ``first_rank``, ``ranks`` (how many ranks are of that kind) and ``share`` (of the layers
    that full recompute checkpoints). Layouts with fewer kinds than the most repeat their
    first kind with no ranks, which changes no maximum and no sum."""

    def shape_and_shares(layout: Layout) -> tuple[StageShape, list[float]]:
        shape = job.shape(layout)
        return shape, job.shares(layout, shape)

    found, group = columns.each(job.SHAPE_FIELDS, shape_and_shares)
    width = max((len(shape.kinds) for shape, _ in found), default=1)
    rows: dict[str, list[list[Any]]] = {name: [] for name in _KIND_ARRAYS}
    for shape, shares in found:
        count = len(shape.kinds)
        padded = list(range(count)) + [0] * (width - count)
        for name, values in zip(_KIND_ARRAYS, zip(*shape.kinds, strict=True), strict=False):
            rows[name].append([values[k] for k in padded])
        rows["first_rank"].append([shape.first_ranks[k] for k in padded])
        rows["ranks"].append(
            [shape.rank_kinds.count(k) for k in range(count)] + [0] * (width - count)
        )
        rows["share"].append([shares[k] for k in padded])
    per_kind = {
        name: np.array(table, dtype=np.float64).reshape(-1, width)[group]
        for name, table in rows.items()
    }
    return [shape for shape, _ in found], group, per_kind


def _pick(array: Array, index: Array) -> Array:
    """``array[layout, index[layout]]`` of a (layouts x kinds) array, or the value of a
    column vector (the same for every kind)."""
    if array.shape[1] == 1:
        return array[:, 0]
    return np.take_along_axis(array, index[:, None], axis=1)[:, 0]


# size: the vectorized twin of prices.simulate_layout, kept line for line beside it
def simulate_batch(job: JobPrices, layouts: Sequence[Layout]) -> BatchPrediction:
    """Price ``layouts`` with the formulas of
    :func:`~autotune.simulators.analytical.prices.simulate_layout`."""
    columns = _Columns(layouts)
    tp, pp, ep, vpp = (columns.number(name) for name in ("tp", "pp", "ep", "vpp"))
    dense, moe = _layer_costs(job, columns)
    shapes, shape_of, kinds = _kinds(job, columns)
    sends, sends_group = columns.each(job.P2P_FIELDS, job.p2p_s)
    accumulate, accumulate_group = columns.each(job.ACCUMULATE_FIELDS, job.accumulate_s)
    logits, logits_group = columns.each(job.LOGITS_FIELDS, job.logits)
    logits_s = _column([seconds for seconds, _ in logits], logits_group)
    shard_comm, shard_group = columns.each(job.SHARD_FIELDS, job.shard_comm)
    shard = ShardComm(
        *(
            _column([comm[k] for comm in shard_comm], shard_group)
            for k in range(len(ShardComm._fields))
        )
    )
    stages = stage(
        job.params,
        dense,
        moe,
        (kinds["n_dense"], kinds["n_moe"], kinds["first"], kinds["last"]),
        share=kinds["share"],
        selective=_column(*columns.each(_RECOMPUTE_FIELDS, _core_recomputed)),
        modules=columns.equals("recompute", "selective"),
        tp=tp,
        etp=columns.number("expert_tp"),
        ep=ep,
        pp=pp,
        vpp=vpp,
        sends=(
            _column([slower for slower, _ in sends], sends_group),
            _column([faster for _, faster in sends], sends_group),
        ),
        overlap_p2p=job.train.framework.overlap_p2p_comm,
        accumulate_s=(
            _column([dense for dense, _ in accumulate], accumulate_group),
            _column([expert for _, expert in accumulate], accumulate_group),
        ),
        logits=(logits_s, _column([b for _, b in logits], logits_group)),
        ops=ARRAYS,
        shard=shard,
    )
    # The pipeline runs at the pace of its slowest rank, plus the fill and drain of the others.
    kind_s = np.broadcast_to(stages.per_microbatch_s, kinds["share"].shape)
    slowest = Stage(*(_pick(field, kind_s.argmax(axis=1)) for field in stages))
    bubble_s = ((kinds["ranks"] * kind_s).sum(axis=1) - slowest.per_microbatch_s) / vpp[:, 0]
    microbatches, m_group = columns.each(
        ("micro_batch", "dp"), lambda lay: lay.num_microbatches(job.train)
    )
    m = np.asarray(microbatches, dtype=np.float64)[m_group][:, None]
    first_rank = kinds["first_rank"]
    unequal = unequal_chunk_effects(
        layouts, job.train, shapes, shape_of, pp, vpp, first_rank, m, kind_s, logits_s[:, 0]
    )
    bubble_s = interleaved_bubble_s(m[:, 0], slowest.per_microbatch_s, bubble_s, unequal.slowdown)
    terms = _rank_terms(job, columns, kinds, stages)
    release = (layouts, shapes, shape_of, first_rank, stages.activation_bytes, m[:, 0])
    release_chunk_states(job.model, job.train, *release, terms.states, terms.state_bytes)
    dp_s = exposed_dp_s(
        terms.reduce_s,
        terms.gather_s,
        stages.last_backward_s,
        job.train.overlaps_grad_reduce,
        job.train.overlaps_param_gather,
        ARRAYS,
    )
    embedding, embedding_group = columns.each(job.EMBEDDING_FIELDS, job.embedding_sync_s)
    ends = np.maximum(kinds["first"], kinds["last"])  # the two ends wait for a tied embedding
    dp_s = dp_s + ends * _column(embedding, embedding_group)
    dp_kind = (dp_s + terms.optimizer_s).argmax(axis=1)
    breakdown = step_breakdown(
        m[:, 0],
        slowest,
        _pick(dp_s, dp_kind),
        bubble_s,
        _pick(terms.optimizer_s, dp_kind),
    )
    step_s: np.ndarray = functools.reduce(operator.add, breakdown.values())  # as sum()
    # The first rank of a kind holds the most micro-batches in flight: its worst rank.
    activations = stages.activation_bytes * unequal.in_flight
    reserved_values, reserved_group = columns.each(job.RESERVED_FIELDS, job.reserved_bytes)
    reserved = _column(reserved_values, reserved_group)
    fragmentation = job.constants.allocator_fragmentation
    shares, share_group = columns.each(
        ("distributed_optimizer", "zero_stage"), lambda lay: churning_grad_share(job.train, lay)
    )
    gradients = terms.states.get("gradients", np.zeros_like(terms.state_bytes))  # no layouts
    churning_grads = gradients * _column(shares, share_group)
    working = np.broadcast_to(stages.working_bytes, activations.shape)
    excess = step_excess_bytes(terms.step_grads, activations, working)
    lost = fragmentation_bytes(activations + working + excess + churning_grads, fragmentation)
    kind_bytes = memory_bytes(terms.state_bytes + excess, activations, working, reserved, lost)
    worst = kind_bytes.argmax(axis=1)
    # a device-level peak: every rank's with its copies' own blocks kept, the fullest
    device_bytes = kind_bytes + terms.step_grads - excess
    memory = {name: _pick(values, worst) for name, values in terms.states.items()}
    memory["activations"] = _pick(activations, worst)
    memory["working"] = _pick(working, worst)
    memory["step_grads"] = _pick(excess, worst)
    memory["fragmentation"] = _pick(lost, worst)
    memory["reserved"] = reserved[:, 0]
    world, world_group = columns.each(("dp", "tp", "pp", "cp"), lambda lay: lay.world_size)
    tokens_per_s_per_device, mfu = throughput(
        step_s, np.asarray(world, dtype=np.float64)[world_group], job.rates
    )
    return BatchPrediction(
        step_time_s=step_s,
        memory_gib=_pick(kind_bytes, worst) / GIB,
        cached_gib=(device_bytes.max(axis=1) - _pick(kind_bytes, worst)) / GIB,
        memory_capacity_gib=job.cluster.device.memory_gib,
        breakdown={key: np.asarray(value) for key, value in breakdown.items()},
        memory_breakdown_gib={key: v / GIB for key, v in memory.items()},
        tokens_per_s_per_device=tokens_per_s_per_device,
        mfu=mfu,
        _detail=_Detail(
            shapes=shapes,
            shape_of=shape_of,
            kind_s=kind_s,
            states=terms.state_bytes,
            activations=np.broadcast_to(stages.activation_bytes, kind_s.shape),
            working=np.broadcast_to(stages.working_bytes, kind_s.shape),
            churning_grads=np.broadcast_to(churning_grads, kind_s.shape),
            step_grads=np.broadcast_to(terms.step_grads, kind_s.shape),
            microbatches=m[:, 0],
            vpp=np.broadcast_to(vpp, m.shape)[:, 0],
            reserved=reserved[:, 0],
            fragmentation=fragmentation,
        ),
    )


class _Terms(NamedTuple):
    """:class:`autotune.simulators.analytical.stages.RankTerms` as (layouts x kinds) arrays."""

    reduce_s: Array
    gather_s: Array
    optimizer_s: Array
    states: dict[str, Array]
    state_bytes: Array
    step_grads: Array


def _rank_terms(
    job: JobPrices, columns: _Columns, kinds: dict[str, Array], stages: Stage
) -> _Terms:
    """What each kind of rank's parameters cost beyond its layers, computed once per kind and
    data-parallel layout (which fix the parameters)."""
    _, group = columns.groups(job.TERMS_FIELDS)
    shape = kinds["n_dense"].shape
    key = np.broadcast_to(group[:, None], shape).reshape(-1)
    for name in ("n_dense", "n_moe", "first", "last"):
        key = _combine(key, kinds[name].reshape(-1).astype(np.int64))  # exact: small integers
    _, rows, row_group = np.unique(key, return_index=True, return_inverse=True)
    params = [
        np.broadcast_to(field, shape).reshape(-1)[rows].tolist()
        for field in (stages.dense_params, stages.expert_params, stages.linear_params)
    ]
    layouts = columns.layouts
    width = shape[1]
    found = [
        job.rank_terms(dense, expert, linear, layouts[row // width])
        for dense, expert, linear, row in zip(*params, rows.tolist(), strict=True)
    ]
    spread_index = row_group.reshape(shape)

    def spread(values: list[float]) -> Array:
        return np.asarray(values, dtype=np.float64)[spread_index]

    # every state any layout keeps (ZeRO-2/-3 add the layers in flight), 0 where one has none
    names = list(dict.fromkeys(name for t in found for name in t.states))
    return _Terms(
        reduce_s=spread([t.reduce_s for t in found]),
        gather_s=spread([t.gather_s for t in found]),
        optimizer_s=spread([t.optimizer_s for t in found]),
        states={name: spread([t.states.get(name, 0.0) for t in found]) for name in names},
        state_bytes=spread([t.state_bytes for t in found]),
        step_grads=spread([t.step_grads for t in found]),
    )
