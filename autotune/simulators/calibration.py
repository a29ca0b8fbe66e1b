"""Calibrations: a few interpretable factors fitted on measured runs, and what they scale.

A :class:`Calibration` holds factors fitted on measured runs (``python -m autotune.calibrate``).
Each factor rewrites one of the figures the simulators already read, or, where none exists, the
terms of the prediction:

==========================  ===================================================================
factor                      what it changes
==========================  ===================================================================
``matmul_efficiency``       x ``cluster.device.matmul_efficiency`` (and ``fp8_matmul_efficiency``
                            when set) and the simulator's constants it names (analytical
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

Scale factors are multipliers of the uncalibrated figure (1: unchanged), so one calibration
applies to any cluster; efficiencies are capped at 1. Overlaps are fractions (0: unchanged).
Each simulator names the constants of its own that a factor scales
(:attr:`autotune.simulators.Simulator.calibrated_constants`, applied by
:func:`calibrate_constants`); :class:`autotune.simulators.calibrated.CalibratedSimulator` applies
the rest around it.

``layouts`` are not factors: what the measured layouts of a cluster's history ran beyond the
calibrated prediction, against the other layouts of their job, by the job's
:func:`autotune.simulators.calibrated.job_key`; a layout of a new job with the same key (the
same layer, job shape, cluster and framework: a model that differs only in depth) takes it
(docs/decisions/0065).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from autotune.simulators.errors import UserError
from autotune.simulators.limits import MAX_CALIBRATION_SCALE
from autotune.simulators.limits import MAX_MEMORY_GIB
from autotune.simulators.limits import MIN_EFFICIENCY
from autotune.simulators.specs import ClusterSpec

__all__ = [
    "FACTORS",
    "MEMORY_FACTORS",
    "SCALE_FACTORS",
    "SIMULATED_FACTORS",
    "TIME_FACTORS",
    "Calibration",
    "calibrate_cluster",
    "calibrate_constants",
    "constant_values",
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
_SHOWN = 5  # values out of range named in a message before "and N more"


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """Fitted factors of one simulator, for one cluster and framework.

    ``factors`` maps names of :data:`FACTORS` to values; a missing factor is uncalibrated
    (scale 1, overlap 0, the simulator's own reserved memory). ``cluster`` and ``framework``
    name what the factors were fitted on (None: rows of several). ``memory_margin`` keeps
    a layout at the device's limit clear of the calibrated memory model's misses on the rows
    with measured peak memory, 19 times in 20 (docs/calibration.md 3; None: too few had it).
    ``layouts`` maps a job's key (:func:`autotune.simulators.calibrated.job_key`), then a
    layout's description, to the log of what its step ran beyond the calibrated prediction,
    relative to the other layouts of its job (empty: none remembered).

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
    layouts: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

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
        bound = math.log(MAX_CALIBRATION_SCALE)
        for job, layouts in self.layouts.items():
            if not isinstance(layouts, Mapping):
                bad.append(f"layouts[{job!r}]={layouts!r}")
                continue
            bad += [
                f"layouts[{job!r}][{k!r}]={v!r}"
                for k, v in layouts.items()
                if not (_is_number(v) and abs(v) <= bound)
            ]
        if bad:
            shown = ", ".join(bad[:_SHOWN]) + (
                f", and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
            )
            raise UserError(
                f"calibration {self.name or self.simulator!r}: {shown} out of range "
                f"(scale factors from 1/{MAX_CALIBRATION_SCALE:g} to {MAX_CALIBRATION_SCALE:g}, "
                f"overlaps in [0, 1), memory_constant_gib from 0 to {MAX_MEMORY_GIB:g}, "
                f"memory_margin in [0, 1], a layout's log factor within +-{bound:.2f}; "
                "autotune/simulators/limits.py)"
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

    def with_layouts(self, layouts: Mapping[str, Mapping[str, float]]) -> Calibration:
        """The same calibration remembering ``layouts`` instead (empty: none)."""
        return dataclasses.replace(self, layouts=layouts)


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


def calibrate_constants(
    constants: Any, calibration: Calibration, keys: Mapping[str, tuple[str, ...]]
) -> Any:
    """``constants`` (a frozen dataclass) with each constant ``keys[factor]`` names (dotted for a
    nested one) scaled by the factor, an efficiency kept within [MIN_EFFICIENCY, 1] and a None
    (the cluster's figure, or derived per layout) left None; ``memory_constant_gib`` sets the
    constant it names instead, where the calibration has it."""
    for factor, names in keys.items():
        for key in names:
            value = _constant(constants, key)
            if factor == "memory_constant_gib":
                value = calibration.factors.get(factor, value)
            elif value is not None:
                value *= calibration.factor(factor)
                value = _capped(value) if factor.endswith("_efficiency") else value
            constants = _with_constant(constants, key, value)
    return constants


def constant_values(constants: Any, keys: Mapping[str, tuple[str, ...]]) -> dict[str, float]:
    """The constants ``keys`` names (dotted keys), each once, those that are None left out."""
    named = dict.fromkeys(key for names in keys.values() for key in names)
    values = {key: _constant(constants, key) for key in named}
    return {key: float(value) for key, value in values.items() if value is not None}


def _constant(constants: Any, key: str) -> Any:
    """The constant at dotted ``key`` (``efficiency.matmul``)."""
    for part in key.split("."):
        constants = getattr(constants, part)
    return constants


def _with_constant(constants: Any, key: str, value: Any) -> Any:
    """``constants`` with the constant at dotted ``key`` replaced by ``value``."""
    head, _, rest = key.partition(".")
    if rest:
        value = _with_constant(getattr(constants, head), rest, value)
    return dataclasses.replace(constants, **{head: value})
