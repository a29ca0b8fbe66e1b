"""Tile and wave quantization of a GEMM: the fraction of a device's GEMM throughput it can use.

A GPU computes a GEMM by cutting its output into tiles, one per thread block, and runs the
blocks in waves of one block per streaming multiprocessor (SM). A dimension that is not a
multiple of the tile wastes part of the edge tiles (tile quantization), and a last wave with
fewer blocks than SMs leaves SMs idle (wave quantization). Both are NVIDIA's terms and model
("Matrix Multiplication Background User's Guide", docs/reference.md 1.5): a GEMM whose output
makes 1.1 waves runs about as long as one making 2.

The device's ``matmul_efficiency`` is the best case over shapes (the MAMF figure, a shape with
whole tiles and whole waves); this fraction scales it down for the shape at hand. cuBLAS picks
among several tiles; the model takes the best of three large ones (``TILES``), each at that
efficiency, and leaves out the smaller tiles, which quantize less but run slower per tile.
An output of fewer tiles than SMs splits its K loop over the idle SMs (split-K, which cuBLAS
uses for such shapes), in slices of at least ``MIN_SPLIT_DEPTH``. A device applies it when its
file sets ``sm_count`` (A100, V100; :func:`autotune.simulators.gemm_table.shape_efficiency`
chooses); docs/reference.md 1.5 says why Hopper (a measured table instead), Blackwell and Ascend
do not.
"""

from __future__ import annotations

import math

__all__ = ["MIN_SPLIT_DEPTH", "TILES", "wave_efficiency"]

# Output tiles (rows x columns) of cuBLAS's large half-precision tensor-core kernels, the sizes
# NVIDIA's guide uses for its quantization examples (docs/reference.md 1.5).
TILES = ((256, 128), (128, 256), (128, 128))
# Shortest K slice a split-K block gets: one tile edge of K, so that a slice still runs the
# kernel's main loop over several k-blocks [D].
MIN_SPLIT_DEPTH = 128


def wave_efficiency(
    rows: float, cols: float, depth: float, sm_count: int | None, batch: float = 1.0
) -> float:
    """Useful fraction of the SM time that a ``batch`` of ``(rows x depth) @ (depth x cols)``
    GEMMs occupies.

    1.0 when ``sm_count`` is None (a device whose efficiency already includes these losses,
    or whose tiling is not modelled). Fractional sizes (a mean share of tokens) round up.
    """
    if sm_count is None or rows <= 0 or cols <= 0:
        return 1.0
    rows, cols, batch = math.ceil(rows), math.ceil(cols), max(1, math.ceil(batch))
    best = 0.0
    for tile_rows, tile_cols in TILES:
        tiles = batch * math.ceil(rows / tile_rows) * math.ceil(cols / tile_cols)
        splits = max(1, min(sm_count // tiles, int(depth // MIN_SPLIT_DEPTH)))
        waves = math.ceil(tiles * splits / sm_count)
        used = batch * rows * cols * splits
        best = max(best, used / (waves * sm_count * tile_rows * tile_cols))
    return best
