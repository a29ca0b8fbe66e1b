"""Time the hierarchical simulator's operators on a real device and write a cost table.

The layers of a layout are recorded on the meta device exactly as the simulator records them;
each distinct operator (name, shapes and arguments, dtype) is then run on the device with
random inputs and timed. The table's columns are :data:`COST_TABLE_COLUMNS`
(``op, shapes, dtype, device, time_us``). Operators the device cannot run (fused attention
kernels on a CPU) are left out; the simulator prices them with its roofline.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable
from collections.abc import Sequence
from pathlib import Path

from simulators.errors import UserError
from simulators.hierarchical.cost import COST_TABLE_COLUMNS
from simulators.hierarchical.graph import LayerShape

__all__ = ["DEVICES", "profile_shapes", "resolve_device", "write_table"]

DEVICES = ("auto", "cpu", "cuda", "npu")


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


def profile_shapes(
    shapes: Iterable[LayerShape], device: str, repeats: int, limit: int | None = None
) -> list[dict[str, object]]:
    """Time every distinct operator of the layers ``shapes`` on ``device`` (rows of the CSV).

    At most ``limit`` distinct operators are timed (None: all).
    """
    from simulators.hierarchical._op_timer import OpTimer
    from simulators.hierarchical.compile import trace_layer

    timer = OpTimer(device=device, repeats=repeats, limit=limit)
    for shape in shapes:
        trace_layer(shape, timer)
    return timer.rows


def write_table(rows: Sequence[dict[str, object]], path: str | Path) -> Path:
    """Write profiled rows as CSV with :data:`COST_TABLE_COLUMNS`."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COST_TABLE_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return target
