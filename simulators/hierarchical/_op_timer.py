"""A recorder that also runs each recorded operator on a real device and times it."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from torch.utils._pytree import tree_map

from simulators.hierarchical.graph import Op
from simulators.hierarchical.record import Recorder

__all__ = ["OpTimer", "median_time_s"]


class OpTimer(Recorder):
    """Records like the simulator, then times each distinct op on ``device`` (rows)."""

    def __init__(self, device: str, repeats: int, limit: int | None) -> None:
        super().__init__()
        self.device, self.repeats, self.limit = device, repeats, limit
        self.rows: list[dict[str, object]] = []
        self.seen: set[tuple[str, str, str]] = set()
        self.device_name = (
            torch.cuda.get_device_name()
            if device == "cuda"
            else torch.npu.get_device_name()  # type: ignore[attr-defined]
            if device == "npu"
            else "cpu"
        )
        module = getattr(torch, device, None)
        self.synchronize = getattr(module, "synchronize", lambda: None)

    def observe(self, op: Op, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        key = (op.name, op.signature, op.dtype)
        if key in self.seen or (self.limit is not None and len(self.seen) >= self.limit):
            return
        self.seen.add(key)
        real_args, real_kwargs = tree_map(self._real, (args, kwargs))
        try:
            seconds = median_time_s(
                lambda: func(*real_args, **real_kwargs), self.repeats, self.synchronize
            )
        except (RuntimeError, NotImplementedError):
            return  # the device has no kernel for it (e.g. fused attention on a CPU)
        self.rows.append(
            {
                "op": op.name,
                "shapes": op.signature,
                "dtype": op.dtype,
                "device": self.device_name,
                "time_us": round(seconds * 1e6, 3),
            }
        )

    def _real(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if value.is_floating_point():
                return torch.randn(value.shape, dtype=value.dtype, device=self.device)
            return torch.zeros(value.shape, dtype=value.dtype, device=self.device)
        if isinstance(value, torch.device):
            return torch.device(self.device)
        return value


def median_time_s(run: Any, repeats: int, synchronize: Any) -> float:
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
