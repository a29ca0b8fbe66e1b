"""Collect a layout's distinct operators on the meta device, then time them on a real one."""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_leaves
from torch.utils._pytree import tree_map

from autotune.simulators.hierarchical.graph import Op
from autotune.simulators.hierarchical.record import Recorder

__all__ = ["DeviceSpeed", "OpCollector", "OpTimer", "PendingOp", "median_time_s"]

# The probes stop growing once one run takes this long (seconds).
_PROBE_S = 0.02


@dataclass(frozen=True, slots=True)
class _TensorArg:
    """A tensor argument by shape and dtype: the profiler makes a real one of it."""

    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass(frozen=True, slots=True)
class PendingOp:
    """One distinct operator to time: its record, ATen function and arguments (no data)."""

    op: Op
    func: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    @property
    def input_elements(self) -> int:
        """Elements of the input tensors the profiler fills before timing."""
        leaves = tree_leaves((self.args, self.kwargs), is_leaf=_is_arg)
        return sum(_numel(leaf.shape) for leaf in leaves if isinstance(leaf, _TensorArg))


class OpCollector(Recorder):
    """Records like the simulator and keeps each distinct op ``(name, shapes, dtype)``."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: dict[tuple[str, str, str], PendingOp] = {}

    def observe(self, op: Op, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        key = (op.name, op.signature, op.dtype)
        if key not in self.pending:
            args, kwargs = tree_map(_describe, (args, kwargs))
            self.pending[key] = PendingOp(op=op, func=func, args=args, kwargs=kwargs)


@dataclass(frozen=True, slots=True)
class DeviceSpeed:
    """What a few probes measured on the device: matmul FLOP/s, copy and fill rates, and the
    seconds of one small call (Python, dispatch and launch).

    :meth:`estimate_s` guesses what timing an op costs, to order the ops and keep within a
    time budget; it never goes into the table.
    """

    flops_per_s: float
    bytes_per_s: float
    fill_elements_per_s: float
    call_s: float

    def estimate_s(self, pending: PendingOp, repeats: int) -> float:
        """Seconds to fill the op's inputs and run it ``repeats`` + 1 times (one warm-up)."""
        op = pending.op
        run_s = self.call_s + max(op.flops / self.flops_per_s, op.bytes / self.bytes_per_s)
        return pending.input_elements / self.fill_elements_per_s + (repeats + 1) * run_s


class OpTimer:
    """Times operators on ``device`` (``cpu``, ``cuda``, ``npu``): median of ``repeats`` runs."""

    def __init__(self, device: str, repeats: int) -> None:
        self.device, self.repeats = device, repeats
        self.device_name = (
            torch.cuda.get_device_name()
            if device == "cuda"
            else torch.npu.get_device_name()  # type: ignore[attr-defined]
            if device == "npu"
            else "cpu"
        )
        module = getattr(torch, device, None)
        self.synchronize: Callable[[], None] = getattr(module, "synchronize", lambda: None)

    def time_s(self, pending: PendingOp) -> float | None:
        """Median seconds of the op on the device; None when the device has no kernel for it
        (fused attention on a CPU)."""
        try:
            args, kwargs = tree_map(self._real, (pending.args, pending.kwargs), is_leaf=_is_arg)
            return median_time_s(
                lambda: pending.func(*args, **kwargs), self.repeats, self.synchronize
            )
        except (RuntimeError, NotImplementedError):
            return None

    def row(self, pending: PendingOp, seconds: float) -> dict[str, object]:
        """The table row of a timed op (``COST_TABLE_COLUMNS``)."""
        op = pending.op
        return {
            "op": op.name,
            "shapes": op.signature,
            "dtype": op.dtype,
            "device": self.device_name,
            "time_us": round(seconds * 1e6, 3),
        }

    def speed(self, dtype: torch.dtype) -> DeviceSpeed:
        """Probe the device: a square matmul in ``dtype``, a copy and a random fill."""
        flops_per_s = self._grow(
            lambda n: (torch.ones(n, n, dtype=dtype, device=self.device),) * 2,
            lambda a, b: torch.mm(a, b),
            lambda n: 2.0 * n**3,
            start=64,
        )
        bytes_per_s = self._grow(
            lambda n: (torch.ones(n * n, dtype=dtype, device=self.device),),
            lambda a: a.clone(),
            lambda n: 2.0 * n * n * torch.finfo(dtype).bits / 8,  # read and write
            start=256,
        )
        fill_per_s = self._grow(
            lambda n: ((n * n,),),
            lambda shape: self._fill(shape, dtype),
            lambda n: float(n * n),
            start=256,
        )
        one = torch.ones(1, dtype=dtype, device=self.device)
        call_s = median_time_s(functools.partial(torch.add, one, one), 5, self.synchronize)
        return DeviceSpeed(flops_per_s, bytes_per_s, fill_per_s, call_s)

    def _grow(
        self,
        make: Callable[[int], tuple[Any, ...]],
        run: Callable[..., Any],
        work: Callable[[int], float],
        start: int,
    ) -> float:
        """Work per second of ``run`` at the first size (doubling from ``start``) that takes
        at least a few milliseconds, so that launch costs do not dominate."""
        n = start
        while True:
            inputs = make(n)
            seconds = median_time_s(functools.partial(run, *inputs), 3, self.synchronize)
            if seconds >= _PROBE_S or n >= 16 * start:
                return work(n) / max(seconds, 1e-9)
            n *= 2

    def _fill(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """Inputs of a floating dtype: random on an accelerator; on a CPU a constant, as
        random numbers cost more there than most ops (a kernel's time on a CPU does not
        depend on the values, but for denormals and NaN, which a constant avoids)."""
        if self.device == "cpu":
            return torch.full(shape, 0.5, dtype=dtype)
        return torch.randn(shape, dtype=dtype, device=self.device)

    def _real(self, value: Any) -> Any:
        if isinstance(value, _TensorArg):
            if value.dtype.is_floating_point:
                return self._fill(value.shape, value.dtype)
            return torch.zeros(value.shape, dtype=value.dtype, device=self.device)
        if isinstance(value, torch.device):
            return torch.device(self.device)
        return value


def median_time_s(run: Callable[[], Any], repeats: int, synchronize: Callable[[], None]) -> float:
    """Median wall time of ``run()`` over ``repeats`` calls after one warm-up call."""
    run()
    synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return _TensorArg(shape=tuple(value.shape), dtype=value.dtype)
    return value


def _is_arg(value: Any) -> bool:
    return isinstance(value, _TensorArg)


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count
