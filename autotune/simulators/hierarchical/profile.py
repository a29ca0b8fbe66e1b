"""Time the hierarchical simulator's operators on a real device and write a cost table.

The layers of a layout are recorded on the meta device exactly as the simulator records them;
each distinct operator (name, shapes and arguments, dtype) is then run on the device with
inputs of its shapes (random on an accelerator, a constant on a CPU) and timed, the cheapest
first. The table's columns are :data:`COST_TABLE_COLUMNS` (``op, shapes, dtype, device,
time_us``). Operators the device cannot run (fused attention kernels on a CPU), and those a
time budget leaves out (the dearest: a bf16 GEMM of a 70B layer takes minutes on a CPU), are
not in the table; the simulator prices them with its roofline.
"""

from __future__ import annotations

import csv
import os
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autotune.simulators.errors import UserError
from autotune.simulators.files import atomic_writer
from autotune.simulators.hierarchical.cost import COST_TABLE_COLUMNS
from autotune.simulators.hierarchical.graph import LayerShape

__all__ = ["DEVICES", "ProfileResult", "profile_shapes", "resolve_device", "write_table"]

DEVICES = ("auto", "cpu", "cuda", "npu")
# Estimated seconds of timing after which the estimates are scaled by the time they took.
_SETTLED_S = 1.0


def resolve_device(name: str) -> str:
    """The torch device type for ``name``; imports torch (and torch_npu only for an NPU)."""
    if name not in DEVICES:
        raise UserError(f"device={name!r} is not one of {', '.join(DEVICES)}")
    if name == "auto":
        name = "npu" if os.environ.get("ASCEND_HOME_PATH") else "cuda_or_cpu"
    if name != "npu":
        # An installed torch_npu without CANN breaks `import torch` unless autoload is off.
        os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import torch

    if name == "npu":
        try:
            import torch_npu  # noqa: F401
        except ImportError as exc:
            raise UserError(f"device=npu needs torch_npu and Ascend CANN: {exc}") from None
        return "npu"
    if name == "cuda_or_cpu":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("device=cuda but torch sees no CUDA device")
    return name


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileResult:
    """What a profile did with the layout's distinct operators.

    ``rows`` are the timed ones (the table); ``no_kernel`` the ones the device cannot run
    (fused attention on a CPU); ``left_out`` those the time budget or the limit left out,
    with ``left_out_s`` the estimated seconds they would have taken. The simulator prices
    all but the rows with its roofline. ``seconds`` is the time spent timing.
    """

    device: str
    operators: int
    rows: list[dict[str, object]]
    no_kernel: int
    left_out: int
    left_out_s: float
    seconds: float


# size: the timing loop with its budget, progress and device synchronisation in one place
def profile_shapes(
    shapes: Iterable[LayerShape],
    device: str,
    repeats: int,
    limit: int | None = None,
    budget_s: float | None = None,
    progress: Callable[[int, int, float], None] | None = None,
) -> ProfileResult:
    """Time every distinct operator of the layers ``shapes`` on ``device``.

    Operators are recorded on the meta device, then timed from the cheapest to the dearest
    (an estimate from a few probes of the device's speed), so a budget keeps the most of
    them. ``limit``: at most this many operators (None: all); ``budget_s``: stop before an
    operator whose estimated cost would take the timing past it (None: no budget).
    ``progress(done, total, left_s)`` is called after each operator with an estimate of the
    seconds left (the probes' estimates, scaled by how the finished operators compared, and
    never past the budget).
    """
    from autotune.simulators.hierarchical._op_timer import OpCollector
    from autotune.simulators.hierarchical._op_timer import OpTimer
    from autotune.simulators.hierarchical.compile import trace_layer
    from autotune.simulators.hierarchical.modules import DTYPES

    collector = OpCollector()
    dtype = "bf16"
    for shape in shapes:
        trace_layer(shape, collector)
        dtype = shape.dtype
    timer = OpTimer(device=device, repeats=repeats)
    speed = timer.speed(DTYPES[dtype])
    pending = sorted(collector.pending.values(), key=lambda item: speed.estimate_s(item, repeats))
    estimates = [speed.estimate_s(item, repeats) for item in pending]
    chosen = len(pending) if limit is None else min(limit, len(pending))
    rows: list[dict[str, object]] = []
    started = time.perf_counter()
    done_estimate, no_kernel, tried = 0.0, 0, 0
    for item, estimate in zip(pending[:chosen], estimates, strict=False):
        elapsed = time.perf_counter() - started
        # How the estimates compare with the time spent, once there is enough to tell.
        scale = elapsed / done_estimate if done_estimate > _SETTLED_S else 1.0
        if budget_s is not None and elapsed + estimate * scale > budget_s:
            break
        seconds = timer.time_s(item)
        if seconds is None:
            no_kernel += 1
        else:
            rows.append(timer.row(item, seconds))
        done_estimate += estimate
        tried += 1
        if progress is not None:
            elapsed = time.perf_counter() - started
            scale = elapsed / done_estimate if done_estimate > _SETTLED_S else 1.0
            left = sum(estimates[tried:chosen]) * scale
            if budget_s is not None:
                left = max(0.0, min(left, budget_s - elapsed))
            progress(tried, chosen, left)
    return ProfileResult(
        device=timer.device_name,
        operators=len(pending),
        rows=rows,
        no_kernel=no_kernel,
        left_out=len(pending) - tried,
        left_out_s=sum(estimates[tried:]),
        seconds=time.perf_counter() - started,
    )


def write_table(rows: Sequence[dict[str, object]], path: str | Path) -> Path:
    """Write profiled rows as CSV with :data:`COST_TABLE_COLUMNS`, whole or not at all."""
    with atomic_writer(path, newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COST_TABLE_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return Path(path)
