"""What a simulator answers for one layout."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field

import numpy as np

__all__ = [
    "BREAKDOWN_KEYS",
    "FIRST_RANK_MEMORY",
    "LazyDetail",
    "MEMORY_MEASURES",
    "MEMORY_READINGS",
    "OUTSIDE_ALLOCATOR_KEYS",
    "PEAK_RANKS",
    "Prediction",
    "RankMemory",
    "peak_arrays",
    "peak_as_measured",
    "reading",
]

# Time categories of a step, in seconds; they add up to the step time.
BREAKDOWN_KEYS = (
    "compute",
    "recompute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_comm",
    "dp_comm",
    "bubble",
    "optimizer",
)

# The memory terms that are not the framework's tensors (autotune/simulators/device_memory.py):
# what the caching allocator loses to fragmentation, and what the runtime and communicators hold.
OUTSIDE_ALLOCATOR_KEYS = ("fragmentation", "reserved")
# What a measured peak memory is: ``allocated``, the framework's tensors at their peak
# (torch.cuda.max_memory_allocated, Megatron's "max allocated"); ``reserved``, what the caching
# allocator holds at its peak (torch.cuda.max_memory_reserved, torchtitan's "max_reserved"): the
# tensors, what fragmentation loses and what it keeps cached, not the runtime's context nor the
# communicators' buffers, which are outside it; ``device``, everything the process holds on the
# device (nvidia-smi, npu-smi), what must fit in the device's memory.
MEMORY_MEASURES = ("allocated", "reserved", "device")
# Whose peak a reading is: ``fullest``, the rank that holds the most (what must fit; a maximum
# over the ranks, or the rank a framework reports as such); ``first``, the first rank of the
# first pipeline stage (global rank 0, and the first node's GPUs where the pipeline is the
# outermost axis of the rank numbering, as in DeepSpeed's pipeline engine).
PEAK_RANKS = ("fullest", "first")
# A prediction's ``detail`` key of the first pipeline rank's memory (:class:`RankMemory`);
# absent, the first rank is taken to be the fullest (one stage, or a simulator that does not
# tell its ranks apart).
FIRST_RANK_MEMORY = "first_rank_memory"


def reading(measure: str, rank: str = "fullest") -> str:
    """The key of a peak as ``measure`` counts it on ``rank`` (:data:`MEMORY_READINGS`)."""
    return measure if rank == "fullest" else f"{measure}@{rank}"


MEMORY_READINGS = tuple(reading(m, r) for r in PEAK_RANKS for m in MEMORY_MEASURES)


@dataclass(frozen=True, slots=True)
class RankMemory:
    """One rank's predicted peak: its terms (GiB, as ``Prediction.memory_breakdown_gib``) and
    what the caching allocator keeps cached beyond them (``Prediction.cached_gib``)."""

    breakdown_gib: Mapping[str, float]
    cached_gib: float = 0.0

    @property
    def memory_gib(self) -> float:
        return sum(self.breakdown_gib.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class Prediction:
    """Predicted step time and memory of one layout.

    ``breakdown`` splits ``step_time_s`` into the categories of :data:`BREAKDOWN_KEYS`
    (seconds, summing to the step time). ``memory_gib`` is the peak memory of the worst rank;
    ``fits`` says whether it stays within ``memory_capacity_gib``. ``mfu`` is model FLOPs per
    second over the devices' peak in the step's precision (FP8 runs: the FP8 peak, as NVIDIA's
    benchmark tables count it). ``detail`` holds optional simulator-specific views (per-rank
    figures, memory breakdown, events).

    ``cached_gib`` is what the caching allocator keeps reserved beyond ``memory_gib`` when
    nothing makes it give memory back: the blocks of the optimizer step's gradient copies,
    which it cannot carve from the activations' freed blocks (docs/reference.md 3.2). A
    device-level peak (``nvidia-smi``) shows them; an allocation that fails first releases the
    free blocks and retries, so they do not decide whether a layout fits.
    """

    step_time_s: float
    memory_gib: float
    memory_capacity_gib: float
    breakdown: Mapping[str, float]
    memory_breakdown_gib: Mapping[str, float]
    tokens_per_s_per_device: float
    mfu: float
    detail: Mapping[str, object] = field(default_factory=dict)
    cached_gib: float = 0.0

    @property
    def fits(self) -> bool:
        return self.memory_gib <= self.memory_capacity_gib

    @property
    def memory_margin(self) -> float:
        """The share of the predicted peak a layout must keep free (0 without a margin): a
        margin lowers ``memory_capacity_gib`` to the device's memory over ``1 + margin``."""
        return float(self.detail.get("memory_margin", 0.0))  # type: ignore[arg-type]

    @property
    def device_memory_gib(self) -> float:
        """The device's memory, what a user reads on its data sheet."""
        return self.memory_capacity_gib * (1 + self.memory_margin)

    @property
    def memory_with_margin_gib(self) -> float:
        """The predicted peak with the margin added: what must fit in the device's memory."""
        return self.memory_gib * (1 + self.memory_margin)

    def peak_gib(self, measure: str, rank: str = "fullest") -> float:
        """The predicted peak of ``rank`` (:data:`PEAK_RANKS`) as ``measure``
        (:data:`MEMORY_MEASURES`) counts it: the whole device's, what the allocator keeps
        cached included; the allocator's, without the runtime's and the communicators' part
        (``reserved``); or the framework's tensors only (without fragmentation and
        reserved)."""
        held = self.rank_memory(rank)
        breakdown, cached = held.breakdown_gib, held.cached_gib
        memory = self.memory_gib if rank == "fullest" else held.memory_gib
        if measure == "device":
            return memory + cached
        if measure == "reserved":
            return memory - breakdown.get("reserved", 0.0) + cached
        if measure != "allocated":
            raise ValueError(f"unknown memory measure {measure!r}; known: {MEMORY_MEASURES}")
        return memory - sum(breakdown.get(k, 0.0) for k in OUTSIDE_ALLOCATOR_KEYS)

    def rank_memory(self, rank: str = "fullest") -> RankMemory:
        """The terms of ``rank``'s predicted peak (:data:`PEAK_RANKS`); the first rank's are the
        fullest's where the simulator does not tell them apart (:data:`FIRST_RANK_MEMORY`)."""
        if rank not in PEAK_RANKS:
            raise ValueError(f"unknown rank {rank!r} of a memory reading; known: {PEAK_RANKS}")
        first = self.detail.get(FIRST_RANK_MEMORY) if rank == "first" else None
        if isinstance(first, RankMemory):
            return first
        return RankMemory(self.memory_breakdown_gib, self.cached_gib)

    def retimed(self, step_time_s: float) -> Prediction:
        """This prediction at another step time (what measurements of the job lead to
        expect): every term of the breakdown scaled alike, tokens per second and MFU with it."""
        scale = step_time_s / self.step_time_s
        return dataclasses.replace(
            self,
            step_time_s=step_time_s,
            breakdown={key: value * scale for key, value in self.breakdown.items()},
            tokens_per_s_per_device=self.tokens_per_s_per_device / scale,
            mfu=self.mfu / scale,
        )

    def peaks_gib(self, rank: str = "fullest") -> dict[str, float]:
        """``rank``'s predicted peak (:data:`PEAK_RANKS`) as each of :data:`MEMORY_MEASURES`
        counts it."""
        return {measure: self.peak_gib(measure, rank) for measure in MEMORY_MEASURES}

    def readings_gib(self) -> dict[str, float]:
        """The predicted peak of each of :data:`MEMORY_READINGS` (a measure on a rank)."""
        return {reading(m, r): self.peak_gib(m, r) for r in PEAK_RANKS for m in MEMORY_MEASURES}

    def as_dict(self) -> dict[str, object]:
        """Plain JSON-ready form (no detail)."""
        return {
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_device": self.tokens_per_s_per_device,
            "mfu": self.mfu,
            "memory_gib": self.memory_gib,
            "memory_capacity_gib": self.memory_capacity_gib,
            "cached_gib": self.cached_gib,
            "peaks_gib": self.peaks_gib(),
            "first_rank_peaks_gib": self.peaks_gib("first"),
            "fits": self.fits,
            "breakdown": dict(self.breakdown),
            "memory_breakdown_gib": dict(self.memory_breakdown_gib),
        }


def peak_as_measured(
    readings: np.ndarray,
    memory_gib: np.ndarray,
    peaks_gib: Mapping[str, np.ndarray] | None,
) -> np.ndarray:
    """:meth:`Prediction.peak_gib` over arrays of predictions: per row, the predicted peak
    ``peaks_gib[key]`` of the reading (:data:`MEMORY_READINGS`: a measure on a rank) its peak
    was measured as; where that is missing or NaN, ``memory_gib`` (the peak that must fit)
    stands in."""
    result = np.array(memory_gib, dtype=float)
    for key, peaks in (peaks_gib or {}).items():
        rows = (np.asarray(readings) == key) & ~np.isnan(peaks)
        result[rows] = peaks[rows]
    return result


def peak_arrays(n: int) -> dict[str, np.ndarray]:
    """Empty (NaN) predicted peaks of ``n`` rows, one per reading (:func:`peak_as_measured`)."""
    return {key: np.full(n, np.nan) for key in MEMORY_READINGS}


class LazyDetail(Mapping[str, object]):
    """A prediction's ``detail`` computed when first read: a search prices many layouts and
    reads the per-rank views of few. It pickles as a plain dict."""

    def __init__(self, compute: Callable[[], dict[str, object]]) -> None:
        self._compute: Callable[[], dict[str, object]] | None = compute
        self._values: dict[str, object] = {}

    def _computed(self) -> dict[str, object]:
        if self._compute is not None:
            self._values, self._compute = self._compute(), None
        return self._values

    def __getitem__(self, key: str) -> object:
        return self._computed()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._computed())

    def __len__(self) -> int:
        return len(self._computed())

    def __repr__(self) -> str:
        return repr(self._computed())

    def __reduce__(self) -> tuple[type[dict[str, object]], tuple[dict[str, object]]]:
        return dict, (self._computed(),)
