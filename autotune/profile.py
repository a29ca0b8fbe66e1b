"""Time the hierarchical simulator's operators on this machine's device and write a table.

Usage::

    python -m autotune.profile model=llama70b cluster=ascend parallel.tp=8 parallel.pp=4 \\
        out=op_costs.csv [device=auto|cpu|cuda|npu] [repeats=3] [limit=N]
    python -m autotune.simulate ... simulator=hierarchical simulator.op_costs=op_costs.csv

The layers of the layout are recorded on the meta device as the simulator records them; each
distinct operator (name, shapes and arguments, dtype) is then run on the device with random
inputs and timed. The CSV columns are ``op, shapes, dtype, device, time_us``. Operators the
device cannot run (fused attention kernels on a CPU) are left out; the simulator prices them
with its roofline. ``device=auto`` picks an Ascend NPU when CANN is installed
(``ASCEND_HOME_PATH``), else CUDA when available, else the CPU.
"""

from __future__ import annotations

import csv
import os
import statistics
import sys
import time
from collections.abc import Iterable
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulators import Layout
from simulators import ModelSpec
from simulators import TrainSpec
from simulators import UserError
from simulators.hierarchical.cost import COST_TABLE_COLUMNS
from simulators.hierarchical.graph import LayerShape
from simulators.hierarchical.graph import layer_shapes

__all__ = ["main", "profile_shapes", "resolve_device", "write_table"]

_OWN = {"out": "op_costs.csv", "device": "auto", "repeats": "3", "limit": ""}
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
    from autotune._op_timer import OpTimer
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


def _specs(overrides: list[str]) -> tuple[ModelSpec, TrainSpec, Layout]:
    from hydra import compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from autotune.config import register_schemas
    from autotune.config import to_specs

    parallel = [o.removeprefix("parallel.") for o in overrides if o.startswith("parallel.")]
    rest = [o for o in overrides if not o.startswith("parallel.")]
    groups = {o.split("=", 1)[0] for o in rest}
    defaults = [f"+{g}={v}" for g, v in (("train", "default"),) if g not in groups]
    chosen = [f"+{o}" if o.split("=", 1)[0] in ("model", "cluster", "train") else o for o in rest]
    register_schemas()
    conf_dir = str(Path(__file__).resolve().parent.parent / "conf")
    with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
        cfg = compose(overrides=chosen + defaults)
    model, cluster, train = to_specs(cfg)
    values = OmegaConf.to_container(OmegaConf.from_dotlist(parallel))
    layout = Layout.resolve(cluster.num_devices, **values)  # type: ignore[arg-type]
    layout.check(model, cluster, train)
    return model, train, layout


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m autotune.profile`` (see the module docstring)."""
    args = list(sys.argv[1:] if argv is None else argv)
    own = dict(_OWN)
    forwarded = []
    for arg in args:
        key, _, value = arg.partition("=")
        if key in own:
            own[key] = value
        else:
            forwarded.append(arg)
    try:
        model, train, layout = _specs(forwarded)
        device = resolve_device(own["device"])
        rows = profile_shapes(
            layer_shapes(model, layout, train).values(),
            device,
            repeats=int(own["repeats"]),
            limit=int(own["limit"]) if own["limit"] else None,
        )
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    path = write_table(rows, own["out"])
    print(f"timed {len(rows)} operators on {device} -> {path}")
    print(f"use it with: simulator=hierarchical simulator.op_costs={path}")
    return 0


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


if __name__ == "__main__":
    raise SystemExit(main())
