"""The robust fit of a calibration: step-time factors, then the memory model, then intervals.

Step time: scipy ``least_squares`` with ``loss="soft_l1"`` on the log step-time residuals of the
rows that ran, ``(log predicted - log measured) / time_noise``, beside one prior residual per
factor, ``(x - x0) / prior width``, that pulls each factor toward its uncalibrated value (``x``:
the log of a scale factor, an overlap as it is). The prior residuals are written so that the
soft-L1 loss charges them exactly their square (a Gaussian prior), while a row's charge grows
only linearly beyond ``time_noise``: one far-off row moves the factors a little, fifty rows a
lot. The five factors that change what the simulator computes are differentiated by finite
differences of new simulations; the overlaps act on the prediction's breakdown, in closed form.

Memory: ``c + f x`` (the predicted memory ``x`` without its reserved part) against measured
peak memory in log space, with hinge residuals for rows that ran out of memory (predicted under
the device memory) and rows that ran (predicted over it), and priors on ``f`` and ``c``.

Intervals: a bootstrap over the rows; each resample refits the step-time factors on the
residuals linearised at the fit (no new simulation) and the memory model exactly.
"""

# size: the fit, its priors and its bootstrap read the same factor tables

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import numpy as np

from autotune.calibrate._layouts import measured_layouts
from autotune.simulators import Simulator
from autotune.simulators import UserError
from autotune.simulators.calibrated import calibrated
from autotune.simulators.calibration import FACTORS
from autotune.simulators.calibration import MEMORY_FACTORS
from autotune.simulators.calibration import SCALE_FACTORS
from autotune.simulators.calibration import SIMULATED_FACTORS
from autotune.simulators.calibration import TIME_FACTORS
from autotune.simulators.calibration import Calibration
from autotune.simulators.job import Job
from autotune.simulators.layout import Layout
from autotune.simulators.limits import MAX_MEASURED_OVER_PREDICTED
from autotune.simulators.prediction import Prediction

__all__ = [
    "MIN_EVIDENCE",
    "FitResult",
    "FitSettings",
    "Run",
    "device_share",
    "fit",
    "memory_margin",
]

_STEP = 1e-3  # finite-difference step of a log scale factor (0.1 %)
_OVERLAP_MAX = 0.95  # an overlap hides at most this share of the exposed communication
_SCALE_RANGE = 10.0  # a scale factor stays within [1/10, 10] x its uncalibrated value
_MEMORY_SCALE_RANGE = 2.0  # the memory factor within [1/2, 2]
_MARGIN_QUANTILE = 95.0  # the memory margin: this percentile of the memory missed
# The largest share of a device a margin keeps free (a margin of 1 / (1 - share) - 1 = 99x);
# a larger one would leave no layout a byte.
_MAX_SHARE = 0.99
# Runs with memory evidence (a measured peak, or out of memory) a margin needs: a 95th
# percentile needs at least 20 of them (one in twenty above it); of fewer, it is their largest.
MIN_EVIDENCE = 20
_SHOWN = 5  # rows named in a message before "and N more"


@dataclass(frozen=True, slots=True)
class Run:
    """One measured layout: its specs, status (``ok`` or ``oom``) and measurements.

    ``step_time_s`` is NaN unless the layout ran; ``peak_memory_gib`` is NaN when not
    measured, ``peak_memory_measure`` says what it counts
    (:data:`autotune.simulators.prediction.MEMORY_MEASURES`) and ``peak_memory_rank`` whose peak
    it is (:data:`autotune.simulators.prediction.PEAK_RANKS`). ``group`` names its scenario (rows
    are subsampled evenly over groups); ``label`` identifies the row in messages and in the
    calibration file.
    """

    specs: tuple[Job, Layout]
    status: str
    step_time_s: float = math.nan
    peak_memory_gib: float = math.nan
    peak_memory_measure: str = "allocated"
    peak_memory_rank: str = "fullest"
    group: str = ""
    label: str = ""

    @property
    def ran(self) -> bool:
        return self.status == "ok" and math.isfinite(self.step_time_s) and self.step_time_s > 0


@dataclass(frozen=True, slots=True, kw_only=True)
class FitSettings:
    """How hard the priors pull, how noisy a row is taken to be, and how much to compute.

    ``prior`` holds each factor's prior width: log units for scale factors, a fraction for
    overlaps, GiB for ``memory_constant_gib``. ``time_noise`` and ``memory_noise`` are the log
    errors one row is expected to keep after calibration (soft-L1 turns linear beyond them).
    ``max_rows``: at most this many rows that ran are fitted (spread evenly over scenarios);
    ``max_evaluations``: step-time residual evaluations of the solver; ``bootstrap_samples``
    resamples give ``interval`` (a probability) intervals, drawn with ``seed``.
    ``relinearize``: 0 fits exactly (the solver simulates at every step); N > 0 takes N
    Gauss-Newton steps instead, each a robust fit of the residuals linearised where it starts
    (six simulations per row and step: what the benchmark's protocols use, fitting hundreds
    of times).
    """

    prior: Mapping[str, float]
    time_noise: float
    memory_noise: float
    max_rows: int
    max_evaluations: int
    bootstrap_samples: int
    interval: float
    seed: int
    relinearize: int = 0


@dataclass(frozen=True, slots=True)
class FitResult:
    """A fitted calibration with its intervals, the rows it used and what was said of it.

    ``used`` are the positions (in the runs given) of the rows that ran and were fitted;
    ``rms_before`` and ``rms_after`` are the root-mean-square log step-time errors on them
    before and after; ``memory_rows`` counts rows with measured peak memory.
    """

    calibration: Calibration
    intervals: dict[str, tuple[float, float]]
    used: list[int]
    n_ran: int
    n_oom: int
    memory_rows: int
    rms_before: float
    rms_after: float
    seconds: float
    notes: list[str] = field(default_factory=list)


def _x_of(center: Calibration, names: Sequence[str], reserved: float = 0.0) -> np.ndarray:
    values = []
    for name in names:
        value = center.factor(name, reserved)
        values.append(math.log(value) if name in SCALE_FACTORS else value)
    return np.array(values, dtype=float)


def _factors_of(x: np.ndarray, names: Sequence[str]) -> dict[str, float]:
    return {
        name: float(math.exp(v) if name in SCALE_FACTORS else v)
        for name, v in zip(names, x, strict=True)
    }


def _gaussian(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Prior residuals that soft-L1 charges ``p**2`` exactly, and their derivative in ``p``.

    soft_l1 charges ``2 (sqrt(1 + q**2) - 1)``; ``q = p sqrt(1 + p**2 / 4)`` makes it ``p**2``.
    """
    root = np.sqrt(1 + p**2 / 4)
    return p * root, root + p**2 / (4 * root)


def _key(simulated: np.ndarray) -> tuple[float, ...]:
    return tuple(np.round(simulated, 12))


def _row_terms(prediction: Prediction) -> tuple[float, float, float]:
    """Step time, TP time scaled by the bubble's share, DP time (no overlap)."""
    b = prediction.breakdown
    pipelined = sum(
        b.get(k, 0.0) for k in ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm")
    )
    bubble_share = b.get("bubble", 0.0) / pipelined if pipelined > 0 else 0.0
    return (
        prediction.step_time_s,
        b.get("tp_comm", 0.0) * (1 + bubble_share),
        b.get("dp_comm", 0.0),
    )


class _TimeModel:
    """Step times of the fitted rows as a function of the step-time factors ``x``."""

    def __init__(self, simulator: Simulator, center: Calibration, runs: Sequence[Run]) -> None:
        self.simulator = simulator
        self.center = center
        self.runs = runs
        self._cache: dict[tuple[float, ...], np.ndarray] = {}

    def _terms(self, simulated: np.ndarray) -> np.ndarray:
        """Per row: step time, TP time scaled by the bubble's share, DP time (no overlap)."""
        self._evaluate([simulated])
        return self._cache[_key(simulated)]

    def _evaluate(self, points: Sequence[np.ndarray]) -> None:
        """The terms at each point not cached yet, simulated row by row: the points of one
        row share its layout, so the simulator's per-layout caches serve them all (the
        hierarchical simulator's pipeline plans keep the two latest layouts)."""
        todo = {_key(point): point for point in points if _key(point) not in self._cache}
        if not todo:
            return
        sims = []
        for point in todo.values():
            factors = _factors_of(point, SIMULATED_FACTORS)
            factors.update(tp_overlap=0.0, dp_overlap=0.0)
            sims.append(calibrated(self.simulator, self.center.with_factors(factors)))
        terms = np.empty((len(todo), len(self.runs), 3))
        for i, run in enumerate(self.runs):
            for j, sim in enumerate(sims):
                terms[j, i] = _row_terms(sim.simulate(*run.specs))
        if len(self._cache) + len(todo) > 64:
            self._cache.clear()
        self._cache.update(zip(todo, terms, strict=True))

    def step_s(self, x: np.ndarray) -> np.ndarray:
        terms = self._terms(x[: len(SIMULATED_FACTORS)])
        o_tp, o_dp = x[len(SIMULATED_FACTORS) :]
        return terms[:, 0] - o_tp * terms[:, 1] - o_dp * terms[:, 2]

    def log_jacobian(self, x: np.ndarray, upper: np.ndarray) -> np.ndarray:
        """d log(step) / dx per row (finite differences for the simulated factors)."""
        n_sim = len(SIMULATED_FACTORS)
        steps = [_STEP if x[j] + _STEP <= upper[j] else -_STEP for j in range(n_sim)]
        moved = [x.copy() for _ in range(n_sim)]
        for j, step in enumerate(steps):
            moved[j][j] += step
        self._evaluate([point[:n_sim] for point in [x, *moved]])
        base = self.step_s(x)
        jac = np.empty((len(self.runs), len(TIME_FACTORS)))
        for j, step in enumerate(steps):
            jac[:, j] = (np.log(self.step_s(moved[j])) - np.log(base)) / step
        terms = self._terms(x[:n_sim])
        jac[:, n_sim] = -terms[:, 1] / base
        jac[:, n_sim + 1] = -terms[:, 2] / base
        return jac


def _time_bounds(simulator: Simulator, runs: Sequence[Run]) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of the step-time factors: efficiencies at most 1 on every cluster fitted."""
    clusters = {simulator.effective_cluster(run.specs[0].cluster) for run in runs}
    highest = {
        "matmul_efficiency": max(
            max(c.device.matmul_efficiency, c.device.fp8_matmul_efficiency or 0.0)
            for c in clusters
        ),
        "memory_efficiency": max(c.device.memory_efficiency for c in clusters),
        "intra_node_efficiency": max(c.intra_node.efficiency for c in clusters),
        "inter_node_efficiency": max(c.inter_node.efficiency for c in clusters),
    }
    lower, upper = [], []
    for name in TIME_FACTORS:
        if name in SCALE_FACTORS:
            top = math.log(_SCALE_RANGE)
            if name in highest:
                top = min(top, -math.log(highest[name]))
            lower.append(-math.log(_SCALE_RANGE))
            upper.append(max(top, 1e-6))
        else:
            lower.append(0.0)
            upper.append(_OVERLAP_MAX)
    return np.array(lower), np.array(upper)


def _even_subsample(runs: Sequence[Run], limit: int, seed: int) -> list[int]:
    """At most ``limit`` positions, taken in turn from each group, the groups and their
    members shuffled with ``seed``: with more groups than ``limit``, one row from each of
    ``limit`` groups drawn from all of them (not the first groups of the table)."""
    if len(runs) <= limit:
        return list(range(len(runs)))
    rng = np.random.default_rng(seed)
    groups: dict[str, list[int]] = {}
    for i, run in enumerate(runs):
        groups.setdefault(run.group, []).append(i)
    members = list(groups.values())
    queues = [list(rng.permutation(members[g])) for g in rng.permutation(len(members))]
    chosen: list[int] = []
    while len(chosen) < limit:
        for queue in queues:
            if queue and len(chosen) < limit:
                chosen.append(int(queue.pop()))
    return sorted(chosen)


@dataclass(frozen=True, slots=True)
class _TimeFit:
    x: np.ndarray
    x0: np.ndarray
    residuals: np.ndarray  # data residuals at x (scaled)
    jacobian: np.ndarray | None  # their jacobian at x (for the bootstrap)
    lower: np.ndarray
    upper: np.ndarray
    rms_before: float
    rms_after: float


def _linear_solve(
    r: np.ndarray,
    jac_rows: np.ndarray,
    at: np.ndarray,
    x0: np.ndarray,
    widths: np.ndarray,
    bounds: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """The robust fit of residuals ``r + J (x - at)`` (linearised at ``at``) with the priors."""

    def fun(x: np.ndarray) -> np.ndarray:
        prior, _ = _gaussian((x - x0) / widths)
        return np.concatenate([r + jac_rows @ (x - at), prior])

    def jac(x: np.ndarray) -> np.ndarray:
        _, slope = _gaussian((x - x0) / widths)
        return np.vstack([jac_rows, np.diag(slope / widths)])

    solution = _least_squares(
        fun, at, jac=jac, bounds=bounds, loss="soft_l1", f_scale=1.0, x_scale=widths
    )
    return np.asarray(solution.x)


def _solve_time(
    model: _TimeModel,
    measured: np.ndarray,
    x0: np.ndarray,
    widths: np.ndarray,
    bounds: tuple[np.ndarray, np.ndarray],
    settings: FitSettings,
) -> _TimeFit:
    """Exact (``relinearize`` 0: every solver step simulates) or by ``relinearize``
    Gauss-Newton steps, each a robust fit of the residuals linearised where it starts."""
    noise = settings.time_noise
    lower, upper = bounds
    start = np.clip(x0, lower, upper)
    log_measured = np.log(measured)

    def data(x: np.ndarray) -> np.ndarray:
        return (np.log(model.step_s(x)) - log_measured) / noise

    if settings.relinearize > 0:
        x = start
        for _ in range(settings.relinearize):
            at = x
            x = _linear_solve(
                data(at), model.log_jacobian(at, upper) / noise, at, x0, widths, bounds
            )
    else:

        def fun(x: np.ndarray) -> np.ndarray:
            prior, _ = _gaussian((x - x0) / widths)
            return np.concatenate([data(x), prior])

        def jac(x: np.ndarray) -> np.ndarray:
            _, slope = _gaussian((x - x0) / widths)
            return np.vstack([model.log_jacobian(x, upper) / noise, np.diag(slope / widths)])

        solution = _least_squares(
            fun,
            start,
            jac=jac,
            bounds=(lower, upper),
            loss="soft_l1",
            f_scale=1.0,
            x_scale=widths,
            max_nfev=settings.max_evaluations,
        )
        x = solution.x
    before, after = data(start) * noise, data(x) * noise
    return _TimeFit(
        x=x,
        x0=x0,
        residuals=after / noise,
        jacobian=model.log_jacobian(x, upper) / noise if settings.bootstrap_samples else None,
        lower=lower,
        upper=upper,
        rms_before=float(np.sqrt(np.mean(before**2))),
        rms_after=float(np.sqrt(np.mean(after**2))),
    )


def _linear_refit(fitted: _TimeFit, rows: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """The step-time factors refitted on resampled rows, residuals linearised at the fit."""
    assert fitted.jacobian is not None
    return _linear_solve(
        fitted.residuals[rows],
        fitted.jacobian[rows],
        fitted.x,
        fitted.x0,
        widths,
        (fitted.lower, fitted.upper),
    )


@dataclass(frozen=True, slots=True)
class _MemoryData:
    """Predicted memory without its reserved part, and what each row says of the truth.

    A peak measured as ``allocated`` is compared with the predicted tensors alone: ``kept``
    of the variable part (what fragmentation leaves), without the reserved part; one measured
    as ``reserved`` (the caching allocator's) with the variable part and what the allocator
    keeps cached (``kept`` above 1 by that), without the reserved part; ``device`` peaks with
    the whole prediction (``kept`` 1, the reserved part added): the fitted constant where
    ``constant``, else each row's own derived figure (:func:`_fits_constant`).
    """

    variable_gib: np.ndarray
    reserved_gib: np.ndarray
    cached_gib: np.ndarray  # what a device peak shows beyond it (Prediction.cached_gib)
    constant: bool
    kept: np.ndarray
    device: np.ndarray  # the measured peak is the whole device's (else the tensors')
    capacity_gib: np.ndarray
    measured_gib: np.ndarray  # NaN where not measured
    oom: np.ndarray  # ran out of memory
    ran: np.ndarray  # ran (so the truth is within the capacity)


def _fits_constant(simulator: Simulator, runs: Sequence[Run]) -> bool:
    """Whether the fit sets the reserved memory as one figure (``memory_constant_gib``): the
    simulator charges a fixed one, or the runs are of one cluster and some of them measured
    the whole device (a device peak, or an out-of-memory run).

    Otherwise each layout keeps the figure the simulator derives for it (its devices' runtime
    and its communicators' buffers: docs/decisions/0041-device-memory-beyond-tensors.md): a
    figure in GiB of one cluster's devices, or one fitted without a measurement of them, is no
    evidence for another cluster, nor for layouts with other communicators.
    """
    if _reserved_gib(simulator) is not None:
        return True
    return any(map(_measured_whole_device, runs)) and len(_clusters(runs)) == 1


def _measured_whole_device(run: Run) -> bool:
    """The run says how much its whole device held: a device peak, or it ran out of memory."""
    device_peak = run.peak_memory_measure == "device" and math.isfinite(run.peak_memory_gib)
    return device_peak or run.status == "oom"


def _clusters(runs: Sequence[Run]) -> set[str]:
    return {run.specs[0].cluster.name for run in runs}


def _memory_data(simulator: Simulator, center: Calibration, runs: Sequence[Run]) -> _MemoryData:
    plain = center.with_factors({"memory_factor": 1.0})
    sim = calibrated(simulator, plain)
    variable, reserved, cached, kept, capacity = [], [], [], [], []
    for run in runs:
        p = sim.simulate(*run.specs)
        held = p.rank_memory(run.peak_memory_rank)  # the rank whose peak was measured
        reserved.append(held.breakdown_gib.get("reserved", 0.0))
        cached.append(held.cached_gib)
        variable.append(held.memory_gib - reserved[-1])
        measure, rank = run.peak_memory_measure, run.peak_memory_rank
        whole = measure == "device"
        kept.append(1.0 if whole or not variable[-1] else p.peak_gib(measure, rank) / variable[-1])
        capacity.append(p.memory_capacity_gib)
    device = np.array([run.peak_memory_measure == "device" for run in runs], dtype=bool)
    return _MemoryData(
        variable_gib=np.array(variable),
        reserved_gib=np.array(reserved),
        cached_gib=np.array(cached),
        constant=_fits_constant(simulator, runs),
        kept=np.array(kept),
        device=device,
        capacity_gib=np.array(capacity),
        measured_gib=np.array([run.peak_memory_gib for run in runs], dtype=float),
        oom=np.array([run.status == "oom" for run in runs]),
        ran=np.array([run.status == "ok" for run in runs]),
    )


def _whole_gib(y: np.ndarray, data: _MemoryData, rows: np.ndarray | slice) -> np.ndarray:
    """The device's whole predicted memory of ``rows`` at the memory factors ``y``."""
    reserved = y[1] if data.constant else data.reserved_gib[rows]
    return reserved + math.exp(y[0]) * data.variable_gib[rows]


def _as_measured_gib(y: np.ndarray, data: _MemoryData, rows: np.ndarray | slice) -> np.ndarray:
    """The predicted peak of ``rows`` as each measured it at the memory factors ``y``: the
    whole device with what the allocator keeps cached, or the tensors alone."""
    device = _whole_gib(y, data, rows) + math.exp(y[0]) * data.cached_gib[rows]
    tensors = math.exp(y[0]) * data.kept[rows] * data.variable_gib[rows]
    return np.where(data.device[rows], device, tensors)


def _memory_residuals(
    y: np.ndarray, data: _MemoryData, rows: np.ndarray, noise: float
) -> np.ndarray:
    whole = np.log(_whole_gib(y, data, rows))
    predicted = np.log(_as_measured_gib(y, data, rows))
    capacity = np.log(data.capacity_gib[rows])
    measured = data.measured_gib[rows]
    has = np.isfinite(measured)
    out = np.zeros(len(rows))
    out[has] = predicted[has] - np.log(measured[has])
    oom = data.oom[rows] & ~has
    out[oom] = np.minimum(0.0, whole[oom] - capacity[oom])  # must exceed the device
    ran = data.ran[rows] & ~has
    out[ran] = np.maximum(0.0, whole[ran] - capacity[ran])  # must stay within it
    return out / noise


def _least_squares(*args: Any, **kwargs: Any) -> Any:
    """scipy's ``least_squares``, imported on first use: a search never fits, and importing
    ``scipy.optimize`` takes about half a second."""
    from scipy.optimize import least_squares

    return least_squares(*args, **kwargs)


def _solve_memory(
    data: _MemoryData, rows: np.ndarray, y0: np.ndarray, widths: np.ndarray, noise: float
) -> np.ndarray:
    lower = np.array([-math.log(_MEMORY_SCALE_RANGE), 0.0])
    upper = np.array([math.log(_MEMORY_SCALE_RANGE), float(np.min(data.capacity_gib))])
    start = np.clip(y0, lower, upper)

    def fun(y: np.ndarray) -> np.ndarray:
        prior, _ = _gaussian((y - y0) / widths)
        return np.concatenate([_memory_residuals(y, data, rows, noise), prior])

    solution = _least_squares(fun, start, bounds=(lower, upper), loss="soft_l1", x_scale=widths)
    return np.asarray(solution.x)


def memory_margin(
    predicted_gib: np.ndarray, measured_gib: np.ndarray, capacity_gib: np.ndarray
) -> float | None:
    """The margin that keeps a layout at the device's limit clear of the memory model's
    under-prediction 19 times in 20; None without a row that has all three figures.

    Each run's miss is counted in shares of its device's memory, ``(measured - predicted) /
    capacity``, because the misses do not grow with the prediction (docs/calibration.md 3):
    what the model leaves out (the allocator's cache and fragmentation, the runtime, the
    collective library's buffers, workspaces) is a part of the device, not of the peak. With
    ``s`` the 95th percentile of those shares (at least 0), a layout fits when its predicted
    peak is within ``capacity * (1 - s)``, which is ``predicted * (1 + margin) <= capacity``
    for ``margin = s / (1 - s)``: the margin returned, as the search applies it.

    A run that ran out of memory counts with the device's memory as its measurement: its peak
    was at least that (the miss it shows is a lower bound).
    """
    keep = np.isfinite(predicted_gib) & np.isfinite(measured_gib) & (predicted_gib > 0)
    keep &= np.isfinite(capacity_gib) & (capacity_gib > 0)
    if not keep.any():
        return None
    shares = (measured_gib[keep] - predicted_gib[keep]) / capacity_gib[keep]
    share = min(max(0.0, float(np.percentile(shares, _MARGIN_QUANTILE))), _MAX_SHARE)
    return share / (1.0 - share)


def device_share(margin: float) -> float:
    """The share of the device's memory that ``margin`` keeps free for a layout at the limit
    (:func:`memory_margin`'s inverse): ``predicted * (1 + margin) = capacity`` leaves
    ``capacity * margin / (1 + margin)``."""
    return margin / (1.0 + margin)


def _reserved_gib(simulator: Simulator) -> float | None:
    """The fixed reserved memory the simulator charges every layout (the constant that
    ``memory_constant_gib`` sets); None where it derives it per layout."""
    values = simulator.calibrated_values()
    keys = simulator.calibrated_constants.get("memory_constant_gib", ())
    return next((values[key] for key in keys if key in values), None)


# size: the fit's steps (priors, solve, bootstrap, notes) share a dozen locals
def fit(
    simulator: Simulator,
    runs: Sequence[Run],
    settings: FitSettings,
    center: Calibration | None = None,
    plausible: bool = False,
    layouts: bool = False,
) -> FitResult:
    """Fit the factors of ``simulator`` to ``runs``, pulled toward ``center``.

    Args:
        simulator: the uncalibrated simulator (its constants are the starting point).
        runs: the measured rows; rows with status other than ``ok`` or ``oom`` are ignored.
        settings: priors, noise, limits and the bootstrap.
        center: the calibration the priors pull toward (None: uncalibrated); its cluster,
            framework and name are kept.
        plausible: first refuse fitted rows whose step time is further than
            ``MAX_MEASURED_OVER_PREDICTED`` times from the prediction at ``center`` (measured
            rows a user brings; the benchmark scores a simulator against its rows instead).
        layouts: also remember what each measured layout ran beyond the fitted calibration
            against the other layouts of its job (:func:`measured_layouts`): a cluster's
            history, for new jobs of the same layer and shape.

    Returns:
        The fitted calibration (every factor set), its intervals and what was used.

    Raises:
        UserError: with ``plausible``, naming each row too far from its prediction.
    """
    started = time.perf_counter()
    center = center or Calibration(simulator=simulator.name)
    ran = [i for i, run in enumerate(runs) if run.ran]
    oom = [i for i, run in enumerate(runs) if run.status == "oom"]
    used = [
        ran[i] for i in _even_subsample([runs[i] for i in ran], settings.max_rows, settings.seed)
    ]
    notes: list[str] = []
    time_widths = np.array([settings.prior[name] for name in TIME_FACTORS])
    x0 = _x_of(center, TIME_FACTORS)
    fitted: _TimeFit | None = None
    if used:
        model = _TimeModel(simulator, center, [runs[i] for i in used])
        measured = np.array([runs[i].step_time_s for i in used])
        if plausible:  # the predictions at x0 are the fit's first, cached
            check_plausible(simulator.name, [runs[i] for i in used], measured, model.step_s(x0))
        fitted = _solve_time(
            model,
            measured,
            x0,
            time_widths,
            _time_bounds(simulator, [runs[i] for i in used]),
            settings,
        )
    x = fitted.x if fitted is not None else x0
    if len(ran) > len(used):
        notes.append(
            f"{len(used)} of the {len(ran)} rows that ran were fitted (max_rows), spread "
            "evenly over the scenarios"
        )
    if not ran:
        notes.append(
            "no row ran: the step-time factors stay at their prior"
            + (f"; the memory model learns from {len(oom)} out-of-memory row(s)" if oom else "")
        )
    elif len(used) < len(TIME_FACTORS):
        notes.append(
            f"only {len(used)} row(s) with a step time for {len(TIME_FACTORS)} step-time "
            "factors: the priors keep the factors near their uncalibrated values"
        )

    measured_rows = [i for i in (*ran, *oom) if math.isfinite(runs[i].peak_memory_gib)]
    memory_runs = [runs[i] for i in (*ran, *oom)]
    memory_widths = np.array([settings.prior[name] for name in MEMORY_FACTORS])
    data = _memory_data(simulator, center, memory_runs) if memory_runs else None
    # The constant's prior: the simulator's fixed figure, else what it derives for these runs.
    reserved = _reserved_gib(simulator)
    if reserved is None:
        reserved = float(np.median(data.reserved_gib)) if data is not None else 0.0
    y0 = _x_of(center, MEMORY_FACTORS, reserved)
    y = y0
    if data is not None:
        every = np.arange(len(memory_runs))
        if _memory_residuals(y0, data, every, settings.memory_noise).any():
            y = _solve_memory(data, every, y0, memory_widths, settings.memory_noise)
    if not measured_rows:
        notes.append(
            "no row has a measured peak_memory_gib: the memory factor and constant move only "
            "for rows that ran out of memory or ran above the predicted capacity"
        )

    factors = {**_factors_of(x, TIME_FACTORS), **_factors_of(y, MEMORY_FACTORS)}
    if data is not None and not data.constant:
        del factors["memory_constant_gib"]
        clusters = len(_clusters(memory_runs))
        why = (
            f"the rows span {clusters} clusters"
            if clusters > 1
            else "no row measured the whole device (a device peak or an out-of-memory run)"
        )
        notes.append(f"the reserved memory stays derived per layout: {why}")
    margin = None
    if data is not None:
        whole = _whole_gib(y, data, slice(None))
        predicted = _as_measured_gib(y, data, slice(None))
        exceeded = data.oom & ~np.isfinite(data.measured_gib)  # past the device's memory
        margin = memory_margin(
            np.where(exceeded, whole, predicted),
            np.where(exceeded, data.capacity_gib, data.measured_gib),
            data.capacity_gib,
        )
        evident = int(np.sum(np.isfinite(data.measured_gib) | exceeded))
        if margin is not None and evident < MIN_EVIDENCE:
            notes.append(
                f"{evident} row(s) with a measured peak or an out-of-memory run, fewer than the "
                f"{MIN_EVIDENCE} a 95th percentile needs: no memory margin of its own (the "
                "search applies the stack's margin from the shipped runs)"
            )
            margin = None
        if margin is not None and margin > 1:  # a calibration's margin is in [0, 1]
            notes.append(
                f"the calibrated memory model still misses {device_share(margin):.0%} of the "
                "device's memory (95th percentile): the margin is capped at 100% (half the "
                "device kept free); are the peaks in GiB, and of these layouts?"
            )
            margin = 1.0
    calibration = center.with_factors(factors)
    calibration = Calibration(
        simulator=calibration.simulator,
        factors=calibration.factors,
        cluster=center.cluster,
        framework=center.framework,
        memory_margin=margin,
        name=center.name,
    )
    if layouts:
        remembered = measured_layouts(simulator, calibration, runs)
        calibration = calibration.with_layouts(remembered)
        notes.append(
            f"{sum(map(len, remembered.values()))} measured layout(s) of {len(remembered)} job "
            "shape(s) remembered, from the jobs of two layouts or more that ran: a layout of a "
            "new job of the same layer and shape takes what its twin ran beyond the calibrated "
            "prediction (docs/calibration.md 7)"
        )
    intervals = _bootstrap(fitted, data, x, y, y0, time_widths, memory_widths, settings)
    return FitResult(
        calibration=calibration,
        intervals=intervals,
        used=used,
        n_ran=len(ran),
        n_oom=len(oom),
        memory_rows=len(measured_rows),
        rms_before=fitted.rms_before if fitted else math.nan,
        rms_after=fitted.rms_after if fitted else math.nan,
        seconds=time.perf_counter() - started,
        notes=notes,
    )


def check_plausible(
    simulator: str, runs: Sequence[Run], measured: np.ndarray, predicted: np.ndarray
) -> None:
    """Refuse step times too far from their predictions to be measurements of their layouts
    (:data:`autotune.simulators.limits.MAX_MEASURED_OVER_PREDICTED`).

    Raises:
        UserError: naming each such row, its time and the prediction.
    """
    ratio = measured / predicted
    far = np.flatnonzero(
        ~((ratio >= 1 / MAX_MEASURED_OVER_PREDICTED) & (ratio <= MAX_MEASURED_OVER_PREDICTED))
    )
    if not len(far):
        return
    shown = "; ".join(
        f"{runs[i].label or runs[i].specs[1].describe()}: {measured[i]:g} s measured, "
        f"{predicted[i]:.3g} s predicted"
        for i in far[:_SHOWN]
    )
    more = f" and {len(far) - _SHOWN} more" if len(far) > _SHOWN else ""
    raise UserError(
        f"{len(far)} measured step time(s) more than {MAX_MEASURED_OVER_PREDICTED:g} times "
        f"from the {simulator} simulator's prediction ({shown}{more}): a time in milliseconds, "
        "or a row of another job? (autotune/simulators/limits.py)"
    )


def _bootstrap(
    fitted: _TimeFit | None,
    data: _MemoryData | None,
    x: np.ndarray,
    y: np.ndarray,
    y0: np.ndarray,
    time_widths: np.ndarray,
    memory_widths: np.ndarray,
    settings: FitSettings,
) -> dict[str, tuple[float, float]]:
    """``settings.interval`` intervals of every factor (a point where nothing was resampled)."""
    rng = np.random.default_rng(settings.seed)
    samples = settings.bootstrap_samples
    xs = np.tile(x, (max(samples, 1), 1))
    ys = np.tile(y, (max(samples, 1), 1))
    for b in range(samples):
        if fitted is not None and len(fitted.residuals) > 1:
            rows = rng.integers(0, len(fitted.residuals), len(fitted.residuals))
            xs[b] = _linear_refit(fitted, rows, time_widths)
        if data is not None and len(data.variable_gib) > 1:
            rows = rng.integers(0, len(data.variable_gib), len(data.variable_gib))
            ys[b] = _solve_memory(data, rows, y0, memory_widths, settings.memory_noise)
    tail = 100 * (1 - settings.interval) / 2
    intervals: dict[str, tuple[float, float]] = {}
    for names, values in ((TIME_FACTORS, xs), (MEMORY_FACTORS, ys)):
        low = np.percentile(values, tail, axis=0)
        high = np.percentile(values, 100 - tail, axis=0)
        lows, highs = _factors_of(low, names), _factors_of(high, names)
        for name in names:
            intervals[name] = (lows[name], highs[name])
    return {name: intervals[name] for name in FACTORS}
