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
from autotune.simulators.files import not_a_file
from autotune.simulators.gemm_table import shape_efficiency
from autotune.simulators.hierarchical.graph import Op
from autotune.simulators.layout import Layout
from autotune.simulators.limits import MAX_STEP_S
from autotune.simulators.limits import MIN_OP_S
from autotune.simulators.specs import ClusterSpec
from autotune.simulators.specs import DeviceSpec
from autotune.simulators.told import Problems
from autotune.simulators.told import capped
from autotune.simulators.told import lines_text

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
    Ascend device, e.g. ``NVIDIA H100 80GB HBM3``, ``Ascend910B2``).
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
    """Read a profiled table (CSV with :data:`COST_TABLE_COLUMNS`, UTF-8) and either return
    it whole or refuse it whole.

    Each row is one operator: ``op`` as torch names it (``aten.mm.default``), ``shapes`` the
    recorder's text of its arguments (any text: the key it is looked up by), ``dtype`` a torch
    dtype name (empty for an operator without tensor inputs), ``device`` where it was timed
    (one per table) and ``time_us`` its microseconds, within :func:`_time_us`'s bounds. The
    same operator twice with two times is refused; so is a table without rows.

    Raises:
        DataFileError: listing every problem at once, rows with the same problem in one column
            told once with their lines (file, lines, column: expected ..., got ...).
    """
    file = Path(path)
    why = not_a_file(file)
    if why is not None:
        raise DataFileError(
            f"op cost table {path}: {why}; give the CSV table autotune.profile wrote"
        )
    header, rows = _cost_rows(file, path)
    if not rows:
        raise DataFileError(
            f"op cost table {path}: no rows, only the header; a table holds one row per "
            "operator autotune.profile timed"
        )
    problems = Problems(file.name)
    table: dict[tuple[str, str, str], float] = {}
    devices: dict[str, list[int]] = {}
    first: dict[tuple[str, str, str, str], tuple[int, float]] = {}
    conflicts: list[tuple[int, int, float, float]] = []
    at = {name: header.index(name) for name in COST_TABLE_COLUMNS}  # each column's cell
    for line, cells in rows:
        if len(cells) != len(header):
            problems.add(
                line, None, f"more or fewer cells than the header's {len(header)} columns"
            )
            continue
        row = {name: cells[index].strip() for name, index in at.items()}
        time_us = _row_time_us(line, row, problems)
        if time_us is None:
            continue
        key = (row["op"], row["shapes"], row["dtype"], row["device"])
        devices.setdefault(row["device"], []).append(line)
        if key not in first:
            first[key] = (line, time_us)
            table[key[:3]] = time_us * 1e-6
        elif first[key][1] != time_us:
            conflicts.append((first[key][0], line, first[key][1], time_us))
    _note_across_rows(problems, devices, conflicts)
    if problems:
        raise DataFileError(problems.message(f"op cost table {path}", "table"))
    return CostTable(path=path, device=next(iter(devices)), seconds=table)


def _note_across_rows(
    problems: Problems,
    devices: dict[str, list[int]],
    conflicts: list[tuple[int, int, float, float]],
) -> None:
    """Add the problems across rows: two devices (with their lines), and operators timed
    twice with different times (``(earlier line, later line, its time, the other)``)."""
    if len(devices) > 1:
        found = [f"{device!r} on {lines_text(lines)}" for device, lines in devices.items()]
        problems.note(
            f"{problems.name}, column device: one device per table (where autotune.profile "
            f"timed it), got {capped(found, 'more devices')}"
        )
    for earlier, later, seconds, again in conflicts[:_CONFLICTS_SHOWN]:
        problems.note(
            f"{problems.name}, lines {earlier} and {later}: the same operator (op, shapes, "
            f"dtype, device) timed {seconds:g} us and {again:g} us; keep one row per operator"
        )
    if len(conflicts) > _CONFLICTS_SHOWN:
        more = [later for _, later, _, _ in conflicts[_CONFLICTS_SHOWN:]]
        problems.note(
            f"{problems.name}, {lines_text(more)}: {len(more)} more operators timed twice "
            "with different times"
        )


# An operator as torch names an overload (str(OpOverload)), which the recorder writes:
# namespace.name.overload, e.g. aten.mm.default, aten.add.Tensor.
_OP_NAME = re.compile(r"[A-Za-z_]\w*\.\w+\.\w+")
_CONFLICTS_SHOWN = 5  # operators timed twice, each named with its two lines, before the rest


def _row_time_us(line: int, row: dict[str, str], problems: Problems) -> float | None:
    """The row's microseconds, or None when a cell of the row is wrong (added to ``problems``)."""
    before = len(problems)
    for column, cell in row.items():
        if "\r" in cell or "\n" in cell:
            problems.add(
                line,
                column,
                "a cell spans lines (an unclosed quote joins the rows after it into one cell); "
                "keep each row on one line",
            )
    if not _OP_NAME.fullmatch(row["op"]):
        problems.add(
            line,
            "op",
            "expected an operator as torch names it, namespace.name.overload "
            "(e.g. aten.mm.default)",
            row["op"],
        )
    if row["dtype"] and row["dtype"] not in _torch_dtypes():
        problems.add(
            line,
            "dtype",
            "expected a torch dtype as torch prints it (bfloat16, float16, float32, int64, bool, "
            f"... {len(_torch_dtypes())} in all), or empty for an operator without tensor inputs",
            row["dtype"],
        )
    if not row["device"]:
        problems.add(
            line,
            "device",
            "expected the name of the device it was timed on (cpu, or the "
            "name torch gives a CUDA or Ascend device, e.g. NVIDIA H100 80GB HBM3)",
            "",
        )
    time_us = _time_us(row["time_us"])
    if time_us is None:
        problems.add(
            line,
            "time_us",
            f"expected microseconds from {MIN_OP_S * 1e6:g} (a nanosecond) to "
            f"{MAX_STEP_S * 1e6:g} (a day)",
            row["time_us"],
        )
    return time_us if len(problems) == before else None


def _time_us(cell: str) -> float | None:
    """A cell of ``time_us`` as microseconds; None: not a number, or not a time one operator
    call can take. A call is part of one training step, which takes at most a day
    (``MAX_STEP_S``: 1e300 us is an overflow or a typo), and lasts at least a nanosecond
    (``MIN_OP_S``: zero or a negative time is no measurement)."""
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if MIN_OP_S * 1e6 <= value <= MAX_STEP_S * 1e6 else None  # False for NaN


@functools.cache
def _torch_dtypes() -> frozenset[str]:
    """The dtypes the recorder can write (``str(tensor.dtype)`` less ``torch.``)."""
    import torch

    return frozenset(
        str(value).removeprefix("torch.")
        for value in vars(torch).values()
        if isinstance(value, torch.dtype)
    )


def _cost_rows(file: Path, path: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header (names stripped) and the rows that are not blank, each with its line.

    Raises:
        DataFileError: the file is empty, not UTF-8 CSV text, or lacks or repeats a column.
    """
    try:
        with file.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle, strict=True)
            header = [name.strip() for name in next(reader, [])]
            rows = [(reader.line_num, row) for row in reader if any(c.strip() for c in row)]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise DataFileError(
            f"op cost table {path}: not a UTF-8 CSV table ({exc}); autotune.profile writes one"
        ) from None
    if not any(header):
        raise DataFileError(
            f"op cost table {path}: an empty file; autotune.profile writes a header "
            f"({', '.join(COST_TABLE_COLUMNS)}) and a row per operator it timed"
        )
    missing = [c for c in COST_TABLE_COLUMNS if c not in header]
    twice = [c for c in COST_TABLE_COLUMNS if header.count(c) > 1]
    if missing or twice:
        what = (
            f"missing column(s) {', '.join(missing)}"
            if missing
            else (f"column(s) {', '.join(twice)} named twice")
        )
        raise DataFileError(
            f"op cost table {path}, line 1: {what}; expected {', '.join(COST_TABLE_COLUMNS)}"
        )
    return header, rows


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
