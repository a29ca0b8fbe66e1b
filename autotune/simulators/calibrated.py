"""A simulator with a calibration and a memory margin applied (:class:`CalibratedSimulator`)."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections import ChainMap
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from typing import NoReturn

from autotune.simulators.base import PredictionBatch
from autotune.simulators.base import Simulator
from autotune.simulators.calibration import Calibration
from autotune.simulators.calibration import calibrate_cluster
from autotune.simulators.errors import UserError
from autotune.simulators.job import Job
from autotune.simulators.layout import Layout
from autotune.simulators.model_spec import CARD_FIELDS
from autotune.simulators.prediction import FIRST_RANK_MEMORY
from autotune.simulators.prediction import LazyDetail
from autotune.simulators.prediction import Prediction
from autotune.simulators.prediction import RankMemory
from autotune.simulators.specs import ClusterSpec

__all__ = ["CalibratedSimulator", "calibrated", "constant_overrides", "job_key"]

_PIPELINED = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm")


def constant_overrides(
    simulator: Simulator, cluster: ClusterSpec, calibration: Calibration
) -> dict[str, float]:
    """What the calibration sets, as the config keys it rewrites and their new values."""
    calibrated_cluster = calibrate_cluster(simulator.effective_cluster(cluster), calibration)
    device = calibrated_cluster.device
    values: dict[str, float] = {
        "cluster.device.matmul_efficiency": device.matmul_efficiency,
        "cluster.device.memory_efficiency": device.memory_efficiency,
        "cluster.intra_node.efficiency": calibrated_cluster.intra_node.efficiency,
        "cluster.inter_node.efficiency": calibrated_cluster.inter_node.efficiency,
    }
    if device.fp8_matmul_efficiency is not None:
        values["cluster.device.fp8_matmul_efficiency"] = device.fp8_matmul_efficiency
    constants = simulator.calibrated(calibration).calibrated_values()
    values |= {f"simulator.{key}": value for key, value in constants.items()}
    return {k: round(float(v), 6) for k, v in values.items()}


def job_key(job: Job) -> str:
    """What a calibration remembers a job's measured layouts by (:attr:`Calibration.layouts`):
    the cluster, framework and precision, the model's layer (the model but its depth and name,
    the whole of it and of the job in the digest), the devices, global batch and sequence
    length. Two jobs share their key when they differ only in the model's depth and name: the
    layouts of one then run alike beyond the simulator (docs/decisions/0065). The model card's
    facts are not part of it: no simulator prices them, and a measurement file, which the
    history is fitted on, does not hold them."""
    model, train = job.model, job.train
    layer = {
        f.name: getattr(model, f.name)
        for f in dataclasses.fields(model)
        if f.name not in ("name", "num_layers") and f.name not in CARD_FIELDS
    }
    digest = hashlib.sha1(repr((layer, train, job.cluster)).encode()).hexdigest()[:10]
    return (
        f"{job.cluster.name}, {train.framework.name} {train.precision}, h{model.hidden_size} "
        f"a{model.num_attention_heads} ffn{model.ffn_hidden_size}, "
        f"{job.cluster.num_devices} devices, batch {train.global_batch_size} x "
        f"{train.seq_len} [{digest}]"
    )


def _adjusted(
    prediction: Prediction, calibration: Calibration, memory_margin: float, measured: float = 0.0
) -> Prediction:
    """The prediction with the overlap and memory factors applied, the margin set, and every
    step-time term scaled by ``exp(measured)``, what the layout ran beyond the calibrated
    prediction in the cluster's history (0: nothing remembered)."""
    breakdown = dict(prediction.breakdown)
    tp_hidden = calibration.factor("tp_overlap") * breakdown.get("tp_comm", 0.0)
    pipelined = sum(breakdown.get(k, 0.0) for k in _PIPELINED)
    if tp_hidden and pipelined > 0:
        # The bubble is made of the other stages' per-micro-batch time: it shrinks alike.
        breakdown["bubble"] = breakdown.get("bubble", 0.0) * (1 - tp_hidden / pipelined)
        breakdown["tp_comm"] -= tp_hidden
    if "dp_comm" in breakdown:
        breakdown["dp_comm"] *= 1 - calibration.factor("dp_overlap")
    history = math.exp(measured)
    if measured:
        breakdown = {key: value * history for key, value in breakdown.items()}
    step_s = sum(breakdown.values())
    scale = calibration.factor("memory_factor")
    memory = _scaled(prediction.memory_breakdown_gib, scale)
    speedup = prediction.step_time_s / step_s if step_s > 0 else 1.0
    added: dict[str, object] = {"memory_margin": memory_margin}
    if measured:
        added["measured_in_history"] = history
    return dataclasses.replace(
        prediction,
        step_time_s=step_s,
        breakdown=breakdown,
        memory_gib=sum(memory.values()),
        memory_breakdown_gib=memory,
        cached_gib=prediction.cached_gib * scale,
        memory_capacity_gib=prediction.memory_capacity_gib / (1 + memory_margin),
        tokens_per_s_per_device=prediction.tokens_per_s_per_device * speedup,
        mfu=prediction.mfu * speedup,
        # A view, not a copy: the wrapped simulator's detail may be computed when first read
        # (a ChainMap writes only into its first map, so a read-only one is fine after it).
        detail=ChainMap(
            added,
            LazyDetail(partial(_first_rank_scaled, prediction, scale)),  # type: ignore[arg-type]
            prediction.detail,  # type: ignore[arg-type]
        ),
    )


def _scaled(memory: Mapping[str, float], scale: float) -> dict[str, float]:
    """A rank's memory terms with the memory factor applied (the runtime's part kept)."""
    return {key: value if key == "reserved" else value * scale for key, value in memory.items()}


def _first_rank_scaled(prediction: Prediction, scale: float) -> dict[str, object]:
    """The wrapped prediction's first pipeline rank's memory, scaled as its fullest rank's."""
    first = prediction.detail.get(FIRST_RANK_MEMORY)
    if not isinstance(first, RankMemory):
        return {}
    return {
        FIRST_RANK_MEMORY: RankMemory(
            _scaled(first.breakdown_gib, scale), first.cached_gib * scale
        )
    }


@dataclass(frozen=True, slots=True)
class _CalibratedBatch:
    """A batch of the wrapped simulator's predictions, each calibrated when taken."""

    batch: PredictionBatch
    calibration: Calibration
    memory_margin: float
    measured: Sequence[float]  # per layout, what the history says (_adjusted)

    def __len__(self) -> int:
        return len(self.batch)

    def prediction(self, index: int) -> Prediction:
        return _adjusted(
            self.batch.prediction(index),
            self.calibration,
            self.memory_margin,
            self.measured[index],
        )


class CalibratedSimulator(Simulator):
    """A simulator with a :class:`Calibration` and a memory margin applied.

    ``simulate`` runs the wrapped simulator calibrated on its own constants
    (:meth:`Simulator.calibrated`) on the calibrated cluster, then applies the overlap and memory
    factors to its prediction. The memory margin lowers ``memory_capacity_gib`` to
    ``capacity / (1 + margin)``, so ``fits`` means "fits with the margin to spare";
    ``detail["memory_margin"]`` records it. ``name`` and ``batch_size`` are the wrapped
    simulator's. A calibrated simulator given as ``base`` stands for the simulator it wraps:
    a calibration replaces another, as :meth:`calibrated` does, never stacks on it.

    Example:
        >>> from autotune import catalog
        >>> base = catalog.load_simulator("analytical")
        >>> sim = calibrated(base, Calibration(simulator="analytical"), memory_margin=0.05)
        >>> sim.name, sim.memory_margin
        ('analytical', 0.05)
    """

    base: Simulator
    calibration: Calibration

    def __init__(
        self, base: Simulator, calibration: Calibration, memory_margin: float = 0.0
    ) -> None:
        if calibration.simulator != base.name:
            raise UserError(
                f"calibration {calibration.name or '(unnamed)'!r} is for the "
                f"{calibration.simulator} simulator, not {base.name}"
            )
        if not memory_margin >= 0:
            raise UserError(f"memory margin {memory_margin!r} must be >= 0")
        if isinstance(base, CalibratedSimulator):
            base = base.base
        self.name = base.name
        self.batch_size = base.batch_size
        self.base = base
        self.calibration = calibration
        self.memory_margin = float(memory_margin)
        self._inner = base.calibrated(calibration)
        self._clusters: dict[ClusterSpec, ClusterSpec] = {}
        self._last_job: tuple[Job, Job] | None = None
        self._job_key: tuple[Job, str] | None = None

    @classmethod
    def from_config(cls, constants: Mapping[str, Any]) -> NoReturn:
        """Not built from constants: :func:`calibrated` wraps a simulator that is."""
        raise TypeError("a CalibratedSimulator wraps a simulator: build it with calibrated()")

    def effective_cluster(self, cluster: ClusterSpec) -> ClusterSpec:
        """The wrapped simulator's view of ``cluster``, calibrated."""
        calibrated_cluster = self._clusters.get(cluster)
        if calibrated_cluster is None:
            calibrated_cluster = calibrate_cluster(
                self.base.effective_cluster(cluster), self.calibration
            )
            self._clusters[cluster] = calibrated_cluster
        return calibrated_cluster

    def _calibrated_job(self, job: Job) -> Job:
        """``job`` on its cluster as :meth:`effective_cluster` gives it (the last one kept: a
        search prices one job's layouts in a row)."""
        last = self._last_job
        if last is None or last[0] is not job:
            cluster = self.effective_cluster(job.cluster)
            last = self._last_job = (job, dataclasses.replace(job, cluster=cluster))
        return last[1]

    def _measured(self, job: Job, layouts: Sequence[Layout]) -> list[float]:
        """What the calibration remembers of each layout of ``job`` (0: nothing)."""
        measured: Mapping[str, float] = {}
        if self.calibration.layouts:
            if self._job_key is None or self._job_key[0] is not job:
                self._job_key = (job, job_key(job))
            measured = self.calibration.layouts.get(self._job_key[1], {})
        if not measured:  # the search's hot path: no layout described
            return [0.0] * len(layouts)
        return [measured.get(layout.describe(), 0.0) for layout in layouts]

    def simulate(self, job: Job, layout: Layout) -> Prediction:
        prediction = self._inner.simulate(self._calibrated_job(job), layout)
        (measured,) = self._measured(job, [layout])
        return _adjusted(prediction, self.calibration, self.memory_margin, measured)

    def simulate_many(self, job: Job, layouts: Sequence[Layout]) -> PredictionBatch:
        """The wrapped simulator's batch, each prediction calibrated."""
        batch = self._inner.simulate_many(self._calibrated_job(job), layouts)
        measured = self._measured(job, layouts)
        return _CalibratedBatch(batch, self.calibration, self.memory_margin, measured)

    def write_trace(self, job: Job, layout: Layout, path: str | Path) -> Path:
        """The wrapped simulator's trace on the calibrated cluster and constants. The overlap
        factors scale step totals only, so the timeline does not show them."""
        return self._inner.write_trace(self._calibrated_job(job), layout, path)

    def calibrated(self, calibration: Calibration) -> CalibratedSimulator:
        """The wrapped simulator with ``calibration`` instead, and the same margin."""
        return CalibratedSimulator(self.base, calibration, self.memory_margin)

    def __getstate__(self) -> dict[str, Any]:
        return {"base": self.base, "calibration": self.calibration, "margin": self.memory_margin}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["base"], state["calibration"], state["margin"])  # type: ignore[misc]


def calibrated(
    base: Simulator, calibration: Calibration | None, memory_margin: float = 0.0
) -> CalibratedSimulator:
    """``base`` with ``calibration`` (None: uncalibrated) and ``memory_margin`` applied."""
    return CalibratedSimulator(
        base, calibration or Calibration(simulator=base.name), memory_margin
    )
