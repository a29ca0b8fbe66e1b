"""Cost: seconds for each recorded operator and each collective.

:class:`RooflineCost` prices a compute op as the slower of its FLOPs at the class's achievable
throughput and its bytes at the achievable HBM bandwidth; :class:`ProfiledCost` looks the op up
in a table measured by ``python -m autotune.profile`` and falls back to the roofline.
:class:`CommCost` prices the collectives of one layout's groups, placed in Megatron's rank order,
with the shared alpha-beta models of :mod:`autotune.simulators.collectives` (docs/reference.md
3.6).
"""

from __future__ import annotations

import csv
import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from autotune.simulators.collectives import all_gather_time_s
from autotune.simulators.collectives import all_reduce_time_s
from autotune.simulators.collectives import all_to_all_time_s
from autotune.simulators.collectives import deepep_time_s
from autotune.simulators.collectives import p2p_time_s
from autotune.simulators.collectives import reduce_scatter_time_s
from autotune.simulators.collectives import ring_exchange_time_s
from autotune.simulators.errors import DataFileError
from autotune.simulators.gemm_table import shape_efficiency
from autotune.simulators.hierarchical.graph import Op
from autotune.simulators.layout import Layout
from autotune.simulators.specs import ClusterSpec
from autotune.simulators.specs import DeviceSpec

__all__ = [
    "COST_TABLE_COLUMNS",
    "CommCost",
    "CostTable",
    "Efficiencies",
    "ProfiledCost",
    "RooflineCost",
    "load_cost_table",
]

COST_TABLE_COLUMNS = ("op", "shapes", "dtype", "device", "time_us")


@dataclass(frozen=True, slots=True, kw_only=True)
class Efficiencies:
    """Achievable fractions of peak per operator class; ``None`` takes the cluster's figure."""

    matmul: float | None = None
    attention: float | None = None
    memory: float | None = None
    comm: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RooflineCost:
    """Roofline time of a compute op: max(FLOPs / achieved FLOP/s, bytes / achieved GB/s).

    A matmul's FLOP/s are scaled by the tile and wave quantization of its shape
    (:mod:`autotune.simulators.gemm_waves`).
    """

    device: DeviceSpec
    precision: str
    efficiency: Efficiencies

    def op_time_s(self, op: Op) -> float:
        dtype = "fp8" if op.dtype == "fp8" else self.precision  # FP8 linear-layer GEMMs
        fraction = self.efficiency.matmul or self.device.gemm_efficiency(dtype)
        if op.category == "attention":
            fraction = self.efficiency.attention or fraction
        if op.gemm is not None:
            batch, rows, depth, cols = op.gemm
            fraction *= shape_efficiency(self.device, rows, cols, depth, batch)
        flops_per_s = self.device.peak_flops(dtype) * fraction
        memory = self.efficiency.memory or self.device.memory_efficiency
        bytes_per_s = self.device.memory_gbps * 1e9 * memory
        return max(op.flops / flops_per_s, op.bytes / bytes_per_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class CostTable:
    """A profiled op-cost table: seconds by ``(op, shapes, dtype)``, and where it was timed.

    ``device`` is the table's ``device`` column (``cpu``, or the name torch gives a CUDA or
    Ascend device, e.g. ``NVIDIA H100 80GB HBM3``, ``Ascend910B2``; empty for no rows).
    """

    path: str
    device: str
    seconds: Mapping[tuple[str, str, str], float]

    def __len__(self) -> int:
        return len(self.seconds)

    def profiled_on(self, device: DeviceSpec) -> bool:
        """Whether the table was timed on the kind of device ``device`` describes.

        The device's model number (the first word of its name with a digit: ``910B2``,
        ``H100``, ``A100``) must appear in the table's device name as a word of its own
        (``Ascend910B2`` and ``NVIDIA A100-SXM4-80GB`` match, ``Ascend910B2`` is no ``910``).
        """
        model = next((word for word in device.name.split() if any(map(str.isdigit, word))), "")
        if not model:
            return self.device.lower() == device.name.lower()
        pattern = rf"(?<![0-9a-z]){re.escape(model.lower())}(?![0-9a-z])"
        name = re.sub(r"^(ascend|nvidia|tesla)", "", self.device.lower())
        return re.search(pattern, name) is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfiledCost:
    """Measured op times from a :class:`CostTable`, roofline for the ops it lacks."""

    table: CostTable
    fallback: RooflineCost

    def op_time_s(self, op: Op) -> float:
        measured = self.table.seconds.get((op.name, op.signature, op.dtype))
        return self.fallback.op_time_s(op) if measured is None else measured

    def covers(self, op: Op) -> bool:
        return (op.name, op.signature, op.dtype) in self.table.seconds


@functools.lru_cache(maxsize=8)
def load_cost_table(path: str) -> CostTable:
    """Read a profiled table (CSV with :data:`COST_TABLE_COLUMNS`, UTF-8).

    Raises:
        DataFileError: the file is missing or not a UTF-8 CSV table, lacks a column or a cell,
            mixes devices or has a bad time.
    """
    file = Path(path)
    if not file.is_file():
        raise DataFileError(f"op cost table {path}: no such file")
    rows = _cost_rows(file, path)
    problems, table = [], {}
    for number, row in enumerate(rows, start=2):
        if None in row.values() or None in row:
            problems.append(f"row {number}: more or fewer cells than the header has columns")
            continue
        time_us = _time_us(row["time_us"])
        if time_us is None:
            problems.append(
                f"row {number}, column time_us: {row['time_us']!r} is not a finite time >= 0"
            )
            continue
        table[(row["op"], row["shapes"], row["dtype"])] = time_us * 1e-6
    devices = sorted({str(row["device"]) for row in rows})
    if len(devices) > 1:
        problems.append(f"column device: one device per table, found {', '.join(devices)}")
    if problems:
        raise DataFileError(f"op cost table {path}:\n  - " + "\n  - ".join(problems))
    return CostTable(path=path, device=devices[0] if devices else "", seconds=table)


def _cost_rows(file: Path, path: str) -> list[dict[str, str]]:
    """The rows of a cost table, each a column -> cell mapping.

    Raises:
        DataFileError: the file is not UTF-8 CSV text, or lacks a column.
    """
    try:
        with file.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in COST_TABLE_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise DataFileError(
                    f"op cost table {path}: missing column(s) {', '.join(missing)}; "
                    f"expected {', '.join(COST_TABLE_COLUMNS)}"
                )
            return list(reader)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise DataFileError(
            f"op cost table {path}: not a UTF-8 CSV table ({exc}); autotune.profile writes one"
        ) from None


def _time_us(cell: str) -> float | None:
    """A cell of ``time_us`` as microseconds (None: not a finite time >= 0)."""
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


@dataclass(frozen=True, slots=True, kw_only=True)
class CommCost:
    """Collective times for the parallel groups of one layout on one cluster.

    Groups are placed by :meth:`simulators.Layout.group` in Megatron's rank order, on the
    cluster's links as the simulator sees them (``HierarchicalSimulator.effective_cluster``).
    With ``deepep_copies`` (the experts a token goes to) the expert all-to-all is DeepEP's,
    which sends a token once per node (:func:`autotune.simulators.collectives.deepep_time_s`).
    """

    cluster: ClusterSpec
    layout: Layout
    deepep_copies: int = 0

    def time_s(self, kind: str, nbytes: float, group: str) -> float:
        """Seconds for collective ``kind`` moving ``nbytes`` (docs/reference.md 3.6 buffer sizes).

        The collectives are those of :mod:`autotune.simulators.collectives`, shared with the
        analytical simulator (``ring_send_recv``: the CP ring's neighbour exchange).
        """
        placement = self.layout.group(group, self.cluster.devices_per_node)
        if placement.size == 1 or nbytes <= 0:
            return 0.0
        if kind not in _COLLECTIVES:
            raise ValueError(f"unknown collective {kind!r}")
        if kind == "all_to_all" and group == "ep" and self.deepep_copies:
            copies = self.deepep_copies
            return deepep_time_s(nbytes / copies, copies, placement, self.cluster)
        return _COLLECTIVES[kind](nbytes, placement, self.cluster)

    def p2p_s(self, nbytes: float, src: int, dst: int, group: str) -> float:
        """One send between members ``src`` and ``dst`` of ``group`` (same node or not)."""
        placement = self.layout.group(group, self.cluster.devices_per_node)
        same_node = placement.same_node(src, dst, self.cluster.devices_per_node)
        return p2p_time_s(nbytes, same_node, self.cluster)


_COLLECTIVES = {
    "all_reduce": all_reduce_time_s,
    "all_gather": all_gather_time_s,
    "reduce_scatter": reduce_scatter_time_s,
    "all_to_all": all_to_all_time_s,
    "ring_send_recv": ring_exchange_time_s,
}
