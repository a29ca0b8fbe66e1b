"""How a GEMM's shape scales a device's matmul efficiency: measured tables or tiles and waves.

A device's ``matmul_efficiency`` is the throughput of its best GEMM shapes (the MAMF figure,
or where fitted, what they sustain in training; ``fp8_matmul_efficiency`` the same in FP8).
Smaller shapes run slower, and :func:`shape_efficiency` says by how much, from one of two
sources (docs/reference.md 1.5):

* ``sm_count`` (A100, V100): the tile and wave quantization of cuBLAS's kernels
  (:mod:`autotune.simulators.gemm_waves`);
* ``gemm_table`` (H100, H200, B200, GB200): a measured table of GEMM throughput by shape,
  relative to the shape the device's efficiency stands for. The tables are OpenXLA's default
  GEMM performance tables (``autotune/simulators/data/``, NOTICE.md there): BF16 cuBLAS GEMMs of
  ``b x (m x k) @ (k x n)``, each dimension 256-4096, interpolated in log2 of each dimension.
  H100's efficiency is what its best shapes sustain in a training step (fit on measured steps,
  docs/decisions/0033-h100-gemm-level-fitted.md; a microbenchmark's best shape reaches 0.80),
  so ``xla_h100`` is relative to its best entry; B200's is SimuMax's mean over training shapes
  of 4096 tokens, so ``xla_b200`` is relative to 4096^3 and capped at 1 (larger shapes already
  hold that level).

A batch of ``b`` GEMMs fills the device like one GEMM of ``b * m`` rows, so rows beyond 4096
read the table's batched entries (8192 rows: ``b = 2``; 16384 and more: ``b = 4``). Sizes
outside the table take its edge: larger shapes run as its largest, the smallest as 256.
"""

from __future__ import annotations

import bisect
import csv
import functools
import math
from dataclasses import dataclass
from pathlib import Path

from autotune.simulators.gemm_waves import wave_efficiency
from autotune.simulators.specs import DeviceSpec

__all__ = ["GemmTable", "load_gemm_table", "shape_efficiency"]

_DATA = Path(__file__).resolve().parent / "data"
# Per name of GEMM_TABLES: the file, and the (rows, cols, depth) at which the devices that name
# it measured their matmul_efficiency (None: the table's best shape).
_SOURCES: dict[str, tuple[str, tuple[int, int, int] | None]] = {
    "xla_h100": ("gemm_h100_xla.csv", None),
    "xla_b200": ("gemm_b200_xla.csv", (4096, 4096, 4096)),
}
# (batch, rows) of the table's entries along its row axis, in order of b * m.
_ROW_ENTRIES = ((1, 256), (1, 512), (1, 1024), (1, 2048), (1, 4096), (2, 4096), (4, 4096))
_ROW_AXIS = tuple(b * m for b, m in _ROW_ENTRIES)
_SIZES = (256, 512, 1024, 2048, 4096)


@dataclass(frozen=True, slots=True)
class GemmTable:
    """Measured TFLOP/s by (rows, cols, depth) on the grid of ``_ROW_ENTRIES`` x ``_SIZES``^2."""

    tflops: dict[tuple[int, int, int], float]  # keyed by (b * m, n, k)
    reference: float  # TFLOP/s of the shape the device's matmul_efficiency stands for

    def relative(self, rows: float, cols: float, depth: float, batch: float = 1.0) -> float:
        """Throughput of a ``batch`` of ``(rows x depth) @ (depth x cols)`` GEMMs against the
        reference shape (at most 1), trilinear in log2 of total rows, columns and depth."""
        return min(1.0, self.interpolate(rows * batch, cols, depth) / self.reference)

    def interpolate(self, rows: float, cols: float, depth: float) -> float:
        """TFLOP/s of a ``(rows x depth) @ (depth x cols)`` GEMM, from the grid around it."""
        value = 0.0
        for r, wr in _bracket(_ROW_AXIS, rows):
            for n, wn in _bracket(_SIZES, cols):
                for k, wk in _bracket(_SIZES, depth):
                    value += wr * wn * wk * self.tflops[(r, n, k)]
        return value


def _bracket(axis: tuple[int, ...], x: float) -> list[tuple[int, float]]:
    """The two grid points around ``x`` (clamped to the axis) and their log2 weights."""
    x = min(max(x, axis[0]), axis[-1])
    i = min(bisect.bisect_right(axis, x), len(axis) - 1)
    low, high = axis[i - 1], axis[i]
    t = math.log2(x / low) / math.log2(high / low)
    return [(low, 1.0 - t), (high, t)]


@functools.cache
def load_gemm_table(name: str) -> GemmTable:
    """The shipped table ``name`` (one of :data:`autotune.simulators.specs.GEMM_TABLES`)."""
    file, reference = _SOURCES[name]
    with (_DATA / file).open(newline="") as handle:
        entries = {
            (int(row["b"]) * int(row["m"]), int(row["n"]), int(row["k"])): float(
                row["bf16_tflops"]
            )
            for row in csv.DictReader(handle)
            if (int(row["b"]), int(row["m"])) in _ROW_ENTRIES
        }
    table = GemmTable(tflops=entries, reference=max(entries.values()))
    if reference is None:
        return table
    return GemmTable(tflops=entries, reference=table.interpolate(*reference))


def shape_efficiency(
    device: DeviceSpec, rows: float, cols: float, depth: float, batch: float = 1.0
) -> float:
    """Fraction of ``device.matmul_efficiency`` that a ``batch`` of ``(rows x depth) @
    (depth x cols)`` GEMMs reaches: 1.0 on a device with neither ``sm_count`` nor
    ``gemm_table`` (its efficiency was measured at training shapes, or is not modelled)."""
    if device.sm_count is not None:
        return wave_efficiency(rows, cols, depth, device.sm_count, batch)
    if device.gemm_table is not None:
        return load_gemm_table(device.gemm_table).relative(rows, cols, depth, batch)
    return 1.0
