"""Calibrated simulators: a few interpretable factors applied to a simulator's constants.

A :class:`Calibration` holds factors fitted on measured runs (``python -m autotune.calibrate``).
Each factor rewrites one of the constants the simulators already read, or, where no constant
exists, the terms of the prediction:

==========================  ===================================================================
factor                      what it changes
==========================  ===================================================================
``matmul_efficiency``       x ``cluster.device.matmul_efficiency`` (and ``fp8_matmul_efficiency``
                            when set) and the simulator's attention efficiency (analytical
                            ``attention_efficiency``, hierarchical ``efficiency.attention`` and
                            ``efficiency.matmul`` when set)
``memory_efficiency``       x ``cluster.device.memory_efficiency`` (hierarchical
                            ``efficiency.memory`` when set)
``intra_node_efficiency``   x ``cluster.intra_node.efficiency``
``inter_node_efficiency``   x ``cluster.inter_node.efficiency``
``host_overhead``           x ``simulator.host_op_overhead_us``
``tp_overlap``              share of the exposed TP communication that hides behind compute
                            (``tp_comm`` and the bubble's part of it shrink by it)
``dp_overlap``              share of the exposed DP communication that hides (``dp_comm``)
``memory_factor``           x every memory term but the reserved one
``memory_constant_gib``     the reserved memory, a fixed figure in GiB (uncalibrated: the
                            device's runtime and the communicators' buffers of each layout)
==========================  ===================================================================

Scale factors are multipliers of the uncalibrated constant (1: unchanged), so one calibration
applies to any cluster; efficiencies are capped at 1. Overlaps are fractions (0: unchanged).
A :class:`CalibratedSimulator` wraps a simulator with a calibration and a memory margin (a
layout fits when its predicted peak memory times ``1 + margin`` is within the device memory).
"""

from __future__ import annotations

import dataclasses
import math
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from autotune.simulators.base import Simulator
from autotune.simulators.errors import UserError
from autotune.simulators.layout import Layout
from autotune.simulators.limits import MAX_CALIBRATION_SCALE
from autotune.simulators.limits import MAX_MEMORY_GIB
from autotune.simulators.limits import MIN_EFFICIENCY
from autotune.simulators.prediction import Prediction
from autotune.simulators.specs import ClusterSpec
from autotune.simulators.specs import ModelSpec
from autotune.simulators.specs import TrainSpec

__all__ = [
    "FACTORS",
    "MEMORY_FACTORS",
    "SCALE_FACTORS",
    "SIMULATED_FACTORS",
    "TIME_FACTORS",
    "Calibration",
    "CalibratedSimulator",
    "calibrate_cluster",
    "calibrated",
    "constant_overrides",
]

# Factors that change what the simulator computes (a new simulation each), then those applied
# to its prediction, then the memory model's.
SIMULATED_FACTORS = (
    "matmul_efficiency",
    "memory_efficiency",
    "intra_node_efficiency",
    "inter_node_efficiency",
    "host_overhead",
)
TIME_FACTORS = (*SIMULATED_FACTORS, "tp_overlap", "dp_overlap")
MEMORY_FACTORS = ("memory_factor", "memory_constant_gib")
FACTORS = (*TIME_FACTORS, *MEMORY_FACTORS)
SCALE_FACTORS = (*SIMULATED_FACTORS, "memory_factor")  # multipliers, fitted in log space
_PIPELINED = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm")


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """Fitted factors of one simulator, for one cluster and framework.

    ``factors`` maps names of :data:`FACTORS` to values; a missing factor is uncalibrated
    (scale 1, overlap 0, the simulator's own reserved memory). ``cluster`` and ``framework``
    name what the factors were fitted on (None: rows of several). ``memory_margin`` is the
    95th percentile of the calibrated memory model's under-prediction on the rows with
    measured peak memory (None: none had it).

    Example:
        >>> Calibration(simulator="analytical", factors={"host_overhead": 1.5}).factor(
        ...     "host_overhead")
        1.5
    """

    simulator: str
    factors: Mapping[str, float] = field(default_factory=dict)
    cluster: str | None = None
    framework: str | None = None
    memory_margin: float | None = None
    name: str = ""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.factors) - set(FACTORS))
        if unknown:
            raise UserError(
                f"calibration {self.name or self.simulator!r}: unknown factor(s) "
                f"{', '.join(unknown)}; allowed: {', '.join(FACTORS)}"
            )
        bad = [f"{k}={v!r}" for k, v in self.factors.items() if not _in_range(k, v)]
        margin = self.memory_margin
        if margin is not None and not (_is_number(margin) and 0 <= margin <= 1):
            bad.append(f"memory_margin={margin!r}")
        if bad:
            raise UserError(
                f"calibration {self.name or self.simulator!r}: {', '.join(bad)} out of range "
                f"(scale factors from 1/{MAX_CALIBRATION_SCALE:g} to {MAX_CALIBRATION_SCALE:g}, "
                f"overlaps in [0, 1), memory_constant_gib from 0 to {MAX_MEMORY_GIB:g}, "
                "memory_margin in [0, 1]; autotune/simulators/limits.py)"
            )

    def factor(self, name: str, default: float | None = None) -> float:
        """The value of ``name``; uncalibrated: 1 for a scale, 0 for an overlap, ``default``."""
        if name in self.factors:
            return float(self.factors[name])
        if name in SCALE_FACTORS:
            return 1.0
        if name in ("tp_overlap", "dp_overlap"):
            return 0.0
        if default is None:
            raise KeyError(name)
        return default

    def with_factors(self, values: Mapping[str, float]) -> Calibration:
        """The same calibration with ``values`` replacing (or adding) factors."""
        return dataclasses.replace(self, factors={**self.factors, **values})


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _in_range(name: str, value: object) -> bool:
    """Whether ``value`` is a finite number the factor ``name`` can take."""
    if not _is_number(value):
        return False
    assert isinstance(value, int | float)
    if name in SCALE_FACTORS:
        return 1 / MAX_CALIBRATION_SCALE <= value <= MAX_CALIBRATION_SCALE
    if name in ("tp_overlap", "dp_overlap"):
        return 0 <= value < 1
    return 0 <= value <= MAX_MEMORY_GIB  # memory_constant_gib


def _capped(value: float) -> float:
    """An achievable fraction of peak: at most 1, at least MIN_EFFICIENCY (a factor of a
    hundredth on an efficiency of 0.5 reaches no further than the specs allow)."""
    return min(1.0, max(MIN_EFFICIENCY, value))


def calibrate_cluster(cluster: ClusterSpec, calibration: Calibration) -> ClusterSpec:
    """The cluster with the calibrated device and link efficiencies."""
    matmul = calibration.factor("matmul_efficiency")
    fp8 = cluster.device.fp8_matmul_efficiency
    device = dataclasses.replace(
        cluster.device,
        matmul_efficiency=_capped(cluster.device.matmul_efficiency * matmul),
        fp8_matmul_efficiency=None if fp8 is None else _capped(fp8 * matmul),
        memory_efficiency=_capped(
            cluster.device.memory_efficiency * calibration.factor("memory_efficiency")
        ),
    )
    intra = dataclasses.replace(
        cluster.intra_node,
        efficiency=_capped(
            cluster.intra_node.efficiency * calibration.factor("intra_node_efficiency")
        ),
    )
    inter = dataclasses.replace(
        cluster.inter_node,
        efficiency=_capped(
            cluster.inter_node.efficiency * calibration.factor("inter_node_efficiency")
        ),
    )
    return dataclasses.replace(cluster, device=device, intra_node=intra, inter_node=inter)


def _calibrated_constants(simulator: Simulator, calibration: Calibration) -> Any:
    """The simulator's constants object with the calibrated values (same type)."""
    constants = getattr(simulator, "constants", None)
    if constants is None or not hasattr(constants, "host_op_overhead_us"):
        raise UserError(f"a calibration cannot be applied to the {simulator.name} simulator")
    matmul = calibration.factor("matmul_efficiency")
    changes: dict[str, Any] = {
        "host_op_overhead_us": constants.host_op_overhead_us * calibration.factor("host_overhead"),
        "reserved_memory_gib": calibration.factors.get(
            "memory_constant_gib", constants.reserved_memory_gib
        ),
    }
    if hasattr(constants, "attention_efficiency"):  # analytical
        changes["attention_efficiency"] = _capped(constants.attention_efficiency * matmul)
    efficiency = getattr(constants, "efficiency", None)
    if efficiency is not None:  # hierarchical: per-class overrides, None takes the cluster's
        memory = calibration.factor("memory_efficiency")
        changes["efficiency"] = dataclasses.replace(
            efficiency,
            matmul=None if efficiency.matmul is None else _capped(efficiency.matmul * matmul),
            attention=None
            if efficiency.attention is None
            else _capped(efficiency.attention * matmul),
            memory=None if efficiency.memory is None else _capped(efficiency.memory * memory),
            comm=None,  # moved onto both link levels (_one_comm_efficiency)
        )
    return dataclasses.replace(constants, **changes)


def constant_overrides(
    simulator: Simulator, cluster: ClusterSpec, calibration: Calibration
) -> dict[str, float]:
    """What the calibration sets, as the config keys it rewrites and their new values."""
    calibrated_cluster = calibrate_cluster(_one_comm_efficiency(simulator, cluster), calibration)
    constants = _calibrated_constants(simulator, calibration)
    values: dict[str, float] = {
        "cluster.device.matmul_efficiency": calibrated_cluster.device.matmul_efficiency,
        "cluster.device.memory_efficiency": calibrated_cluster.device.memory_efficiency,
        "cluster.intra_node.efficiency": calibrated_cluster.intra_node.efficiency,
        "cluster.inter_node.efficiency": calibrated_cluster.inter_node.efficiency,
        "simulator.host_op_overhead_us": constants.host_op_overhead_us,
    }
    if constants.reserved_memory_gib is not None:  # None: derived per layout
        values["simulator.reserved_memory_gib"] = constants.reserved_memory_gib
    if calibrated_cluster.device.fp8_matmul_efficiency is not None:
        values["cluster.device.fp8_matmul_efficiency"] = (
            calibrated_cluster.device.fp8_matmul_efficiency
        )
    if hasattr(constants, "attention_efficiency"):
        values["simulator.attention_efficiency"] = constants.attention_efficiency
    efficiency = getattr(constants, "efficiency", None)
    if efficiency is not None:
        for key in ("matmul", "attention", "memory"):
            if getattr(efficiency, key) is not None:
                values[f"simulator.efficiency.{key}"] = getattr(efficiency, key)
    return {k: round(float(v), 6) for k, v in values.items()}


def _one_comm_efficiency(simulator: Simulator, cluster: ClusterSpec) -> ClusterSpec:
    """Hierarchical ``efficiency.comm`` (one figure for both link levels) moved onto the links,
    so that each level can be calibrated on its own."""
    efficiency = getattr(getattr(simulator, "constants", None), "efficiency", None)
    comm = getattr(efficiency, "comm", None)
    if comm is None:
        return cluster
    return dataclasses.replace(
        cluster,
        intra_node=dataclasses.replace(cluster.intra_node, efficiency=comm),
        inter_node=dataclasses.replace(cluster.inter_node, efficiency=comm),
    )


def _adjusted(
    prediction: Prediction, calibration: Calibration, memory_margin: float
) -> Prediction:
    """The prediction with the overlap and memory factors applied and the margin set."""
    breakdown = dict(prediction.breakdown)
    tp_hidden = calibration.factor("tp_overlap") * breakdown.get("tp_comm", 0.0)
    pipelined = sum(breakdown.get(k, 0.0) for k in _PIPELINED)
    if tp_hidden and pipelined > 0:
        # The bubble is made of the other stages' per-micro-batch time: it shrinks alike.
        breakdown["bubble"] = breakdown.get("bubble", 0.0) * (1 - tp_hidden / pipelined)
        breakdown["tp_comm"] -= tp_hidden
    if "dp_comm" in breakdown:
        breakdown["dp_comm"] *= 1 - calibration.factor("dp_overlap")
    step_s = sum(breakdown.values())
    scale = calibration.factor("memory_factor")
    memory = {
        key: value if key == "reserved" else value * scale
        for key, value in prediction.memory_breakdown_gib.items()
    }
    speedup = prediction.step_time_s / step_s if step_s > 0 else 1.0
    return dataclasses.replace(
        prediction,
        step_time_s=step_s,
        breakdown=breakdown,
        memory_gib=sum(memory.values()),
        memory_breakdown_gib=memory,
        memory_capacity_gib=prediction.memory_capacity_gib / (1 + memory_margin),
        tokens_per_s_per_device=prediction.tokens_per_s_per_device * speedup,
        mfu=prediction.mfu * speedup,
        # A view, not a copy: the wrapped simulator's detail may be computed when first read
        # (a ChainMap writes only into its first map, so a read-only one is fine after it).
        detail=ChainMap({"memory_margin": memory_margin}, prediction.detail),  # type: ignore[arg-type]
    )


@dataclass(frozen=True, slots=True)
class _CalibratedBatch:
    """A batch of the wrapped simulator's predictions, each calibrated when taken."""

    batch: Any
    calibration: Calibration
    memory_margin: float

    def prediction(self, index: int) -> Prediction:
        return _adjusted(self.batch.prediction(index), self.calibration, self.memory_margin)

    def predictions(self) -> list[Prediction]:
        """Every prediction, in order (the wrapped batch builds them in one pass)."""
        return [
            _adjusted(p, self.calibration, self.memory_margin) for p in self.batch.predictions()
        ]


class CalibratedSimulator:
    """A simulator with a :class:`Calibration` and a memory margin applied.

    ``simulate`` runs the wrapped simulator on the calibrated cluster with the calibrated
    constants, then applies the overlap and memory factors to its prediction. The memory
    margin lowers ``memory_capacity_gib`` to ``capacity / (1 + margin)``, so ``fits`` means
    "fits with the margin to spare"; ``detail["memory_margin"]`` records it. ``name`` is the
    wrapped simulator's.

    Example:
        >>> from autotune import catalog
        >>> base = catalog.load_simulator("analytical")
        >>> sim = calibrated(base, Calibration(simulator="analytical"), memory_margin=0.05)
        >>> sim.name, sim.memory_margin
        ('analytical', 0.05)
    """

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
        self.name = base.name
        self.base = base
        self.calibration = calibration
        self.memory_margin = float(memory_margin)
        self._inner: Simulator = type(base)(_calibrated_constants(base, calibration))  # type: ignore[call-arg]
        self._clusters: dict[ClusterSpec, ClusterSpec] = {}

    def _cluster(self, cluster: ClusterSpec) -> ClusterSpec:
        calibrated_cluster = self._clusters.get(cluster)
        if calibrated_cluster is None:
            calibrated_cluster = calibrate_cluster(
                _one_comm_efficiency(self.base, cluster), self.calibration
            )
            self._clusters[cluster] = calibrated_cluster
        return calibrated_cluster

    def simulate(
        self, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, layout: Layout
    ) -> Prediction:
        prediction = self._inner.simulate(model, self._cluster(cluster), train, layout)
        return _adjusted(prediction, self.calibration, self.memory_margin)

    @property
    def simulate_many(self) -> Any:
        """The wrapped simulator's batch pricing (``simulate_many(model, cluster, train,
        layouts)`` returning a batch with ``prediction(i)``), calibrated; None without one."""
        many = getattr(self._inner, "simulate_many", None)
        if many is None:
            return None

        def calibrated_many(
            model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, layouts: Any
        ) -> _CalibratedBatch:
            batch = many(model, self._cluster(cluster), train, layouts)
            return _CalibratedBatch(batch, self.calibration, self.memory_margin)

        return calibrated_many

    @property
    def write_trace(self) -> Any:
        """The wrapped simulator's Chrome-trace writer (``write_trace(model, cluster, train,
        layout, path)``) on the calibrated cluster and constants; None without one. The
        overlap factors scale step totals only, so the timeline does not show them."""
        write = getattr(self._inner, "write_trace", None)
        if write is None:
            return None

        def calibrated_write(
            model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, layout: Layout, path: Any
        ) -> Any:
            return write(model, self._cluster(cluster), train, layout, path)

        return calibrated_write

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("base", "calibration", "memory_margin")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["base"], state["calibration"], state["memory_margin"])  # type: ignore[misc]


def calibrated(
    base: Simulator, calibration: Calibration | None, memory_margin: float = 0.0
) -> CalibratedSimulator:
    """``base`` with ``calibration`` (None: uncalibrated) and ``memory_margin`` applied."""
    return CalibratedSimulator(
        base, calibration or Calibration(simulator=base.name), memory_margin
    )
