"""Interleaved chunks in the analytical simulator: what a rank's whole weights and gradients
add at its peak when its chunks free them one after the other (torchtitan's ZeRO-3 under
PyTorch's interleaved pipelining, docs/decisions/0060: the scalar path's :class:`RankTerms`
and the batch path's arrays), and what unequal chunks change in a batch of layouts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from autotune.simulators.analytical.stages import ARRAYS
from autotune.simulators.analytical.stages import ModelParams
from autotune.simulators.analytical.stages import RankTerms
from autotune.simulators.analytical.stages import StageShape
from autotune.simulators.analytical.stages import chunk_slowdown
from autotune.simulators.analytical.stages import in_flight
from autotune.simulators.analytical.stages import rank_in_flight
from autotune.simulators.interleaving import unequal_chunks
from autotune.simulators.layout import Layout
from autotune.simulators.layout import deal_chunks
from autotune.simulators.specs import ModelSpec
from autotune.simulators.specs import TrainSpec
from autotune.simulators.states import StateBytes
from autotune.simulators.states import released_unsharded_bytes
from autotune.simulators.states import releases_chunk_states
from autotune.simulators.states import state_bytes_of

__all__ = [
    "UnequalChunks",
    "chunk_params",
    "release_chunk_states",
    "released_rank_terms",
    "unequal_chunk_effects",
]


def released_rank_terms(
    terms: RankTerms,
    model: ModelSpec,
    shape: StageShape,
    rank: int,
    layout: Layout,
    microbatches: int,
    activation_bytes: float,
    sizes: StateBytes,
) -> RankTerms:
    """``terms`` with the rank's whole weights and gradients counted as its interleaved chunks
    free them (:func:`_released`)."""
    unsharded = _released(
        terms.states["unsharded"],
        model,
        shape,
        rank,
        layout,
        microbatches,
        activation_bytes,
        sizes,
    )
    states = {**terms.states, "unsharded": unsharded}
    return terms._replace(states=states, state_bytes=sum(states.values()))


def chunk_params(
    model: ModelSpec, layout: Layout, stage_layers: tuple[int, ...], rank: int
) -> list[float]:
    """Parameters of each chunk of pipeline ``rank``, counted as
    :func:`autotune.simulators.analytical.stages.stage` counts a rank's: its dense and MoE
    layers (virtual stage ``chunk * pp + rank`` holds the consecutive layers
    :func:`deal_chunks` gives it, an MoE model's ``first_dense_layers`` first), the embedding
    on the first virtual stage, the final norm and the output layer (its own, or a tied one
    copied there under pipelining) on the last."""
    params = ModelParams.of(model)
    counts = deal_chunks(stage_layers, layout.vpp)
    head = (params.has_output or layout.pp > 1) * params.head / layout.tp
    experts = params.expert_per_layer / (layout.ep * layout.expert_tp)
    chunks = []
    for virtual in range(rank, len(counts), layout.pp):
        first, count = sum(counts[:virtual]), counts[virtual]
        n_dense = count
        if model.is_moe:
            n_dense = min(max(model.first_dense_layers - first, 0), count)
        n_moe = count - n_dense
        linear = (n_dense * params.dense_layer + n_moe * params.moe_layer_non_expert) / layout.tp
        ends = (virtual == 0) * params.embedding / layout.tp
        ends += (virtual == len(counts) - 1) * (params.hidden + head)
        chunks.append(linear + n_moe * experts + ends)
    return chunks


def _released(
    unsharded: float,
    model: ModelSpec,
    shape: StageShape,
    rank: int,
    layout: Layout,
    microbatches: int,
    activation_bytes: float,
    sizes: StateBytes,
) -> float:
    """:func:`autotune.simulators.states.released_unsharded_bytes` of a rank whose chunks each
    hold the share of its layers of the rank's ``activation_bytes`` per micro-batch, and the
    share of its parameters (:func:`chunk_params`: the embedding and the output layer in their
    chunks) of the rank's whole weights and gradients."""
    chunks = deal_chunks(shape.stage_layers, layout.vpp)[rank :: layout.pp]
    params = chunk_params(model, layout, shape.stage_layers, rank)
    total = sum(params)
    return released_unsharded_bytes(
        unsharded,
        sizes,
        rank,
        layout,
        microbatches,
        [activation_bytes * layers / shape.stage_layers[rank] for layers in chunks],
        [0.0] * len(chunks),  # the working set is added beside the peak (memory_bytes)
        [chunk / total for chunk in params],
    )


def release_chunk_states(
    model: ModelSpec,
    train: TrainSpec,
    layouts: Sequence[Layout],
    shapes: list[StageShape],
    shape_of: np.ndarray,
    first_rank: np.ndarray,
    activation_bytes: np.ndarray,
    microbatches: np.ndarray,
    states: dict[str, np.ndarray],
    state_bytes: np.ndarray,
) -> None:
    """:func:`released_rank_terms` of every layout of a batch whose chunks free their states
    (few), written into ``states`` and ``state_bytes`` (layouts x stage kinds) in place.
    ``first_rank`` is each kind's first rank, ``activation_bytes`` (broadcast to the same
    shape) its activations per micro-batch, ``microbatches`` one per layout."""
    keep = train.framework.pipeline_keeps_gathered
    activations = np.broadcast_to(activation_bytes, first_rank.shape)
    unsharded = states.get("unsharded")
    for i, layout in enumerate(layouts):
        if unsharded is None or not releases_chunk_states(keep, layout):
            continue
        sizes = state_bytes_of(train, layout)
        for k in range(first_rank.shape[1]):
            released = _released(
                float(unsharded[i, k]),
                model,
                shapes[shape_of[i]],
                int(first_rank[i, k]),
                layout,
                int(microbatches[i]),
                float(activations[i, k]),
                sizes,
            )
            state_bytes[i, k] += released - unsharded[i, k]
            unsharded[i, k] = released


class UnequalChunks(NamedTuple):
    """What unequal chunks change per layout: the slowdown of the schedule (1 where the
    chunks are equal) and the micro-batches each kind's first rank holds."""

    slowdown: np.ndarray
    in_flight: np.ndarray


def unequal_chunk_effects(
    layouts: Sequence[Layout],
    train: TrainSpec,
    shapes: list[StageShape],
    shape_of: np.ndarray,
    pp: np.ndarray,
    vpp: np.ndarray,
    first_rank: np.ndarray,
    microbatches: np.ndarray,
    kind_s: np.ndarray,
    logits_s: np.ndarray,
) -> UnequalChunks:
    """:func:`autotune.simulators.analytical.stages.chunk_slowdown` and
    :func:`autotune.simulators.analytical.stages.rank_in_flight` of every layout whose chunks are
    unequal (few: told apart per shape and vpp before any is priced); :func:`in_flight` and 1
    elsewhere. ``pp``, ``vpp`` and ``microbatches`` are columns (layouts x 1)."""
    flight = in_flight(microbatches, pp, vpp, first_rank, ARRAYS)
    slowdowns = np.ones(len(layouts))
    pairs, pair_of = np.unique(
        np.stack([shape_of, vpp[:, 0].astype(np.int64)], axis=1), axis=0, return_inverse=True
    )
    unequal = np.array([unequal_chunks(shapes[g].stage_layers, int(v)) for g, v in pairs])
    for i in np.flatnonzero(unequal[pair_of.reshape(-1)]).tolist():
        layout, shape, m = layouts[i], shapes[shape_of[i]], int(microbatches[i, 0])
        last_s = float(kind_s[i, shape.rank_kinds[-1]])
        slowdowns[i] = chunk_slowdown(layout, train, shape, m, last_s, float(logits_s[i]))
        flight[i] = [
            rank_in_flight(shape.stage_layers, m, layout.vpp, int(rank)) for rank in first_rank[i]
        ]
    return UnequalChunks(slowdowns, flight)
