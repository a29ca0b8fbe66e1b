"""MindSpeed-LLM measured pre-training tables after 2024-10 (README.md, later docs/zh/...).

Kept: rows with status ``ok`` of catalog models on Atlas 900 A2 PODc (910B, catalog ``ascend``)
that publish a throughput. The tables give tokens/s without saying per device or per cluster;
the 2024-10 README defined its column per device, so it is read per device (NOTICE.md): step
time = global batch * seq / (tokens/s * devices). Skipped, and counted in NOTICE.md: superseded
rows, the Atlas 900 A3 SuperPoD rows (hardware not in the catalog), models outside the catalog,
and the LLAMA2 / Mixtral rows that publish MFU only (MindSpeed's own formula; no step time).

Parsed, from the linked example script of the same commit (the README does not restate the
layout; an assumption of the raw file): ``recompute`` (``recompute-granularity=full`` with the
uniform method over 1 layer recomputes every layer: ``full``; "none found in script":
``none``), ``sequence-parallel`` (which Megatron turns off at tp = 1) and
``use-distributed-optimizer`` in ``other``. ``framework`` is ``mindspeed``. Each row is its own
scenario: it counts for step-time error, not for regret.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from autotune.dataset.importers._common import dp_overlap
from autotune.dataset.importers._tables import architecture
from autotune.dataset.importers._tables import layout_columns
from autotune.dataset.importers._tables import layout_reason
from autotune.dataset.importers._tables import measured_row
from autotune.dataset.importers._tables import read_rows
from autotune.dataset.importers._tables import row_label
from autotune.dataset.importers._tables import skip_reason
from autotune.dataset.importers._tables import table

__all__ = ["RAW_FILE", "SOURCE", "convert", "skipped"]

SOURCE = "mindspeed_2026"
RAW_FILE = "mindspeed_llm_perf_2024-11_to_2026.csv"
_CLUSTERS = {"ascend_910b (Atlas 900 A2 PODc)": "ascend"}
_MFU_ONLY = "MFU only (no throughput or step time)"
_RECOMPUTE = {
    "none found in script": "none",
    "recompute-granularity=full; recompute-method=uniform; recompute-num-layers=1": "full",
}

Row = Mapping[str, str]


def _flags(row: Row) -> set[str]:
    return {part.strip() for part in row["other"].split(";")}


def _reason(row: Row) -> str:
    reason = skip_reason(row, _CLUSTERS)
    if reason:
        return reason
    if not row["tokens_per_s_per_gpu"]:
        return _MFU_ONLY
    return layout_reason(row, _CLUSTERS[row["hardware"]])


def skipped(path: Path) -> list[tuple[str, str]]:
    """``(row, reason)`` of every raw row that :func:`convert` leaves out."""
    return [(row_label(r), _reason(r)) for r in read_rows(path) if _reason(r)]


def _record(row: Row) -> dict[str, object]:
    layout = layout_columns(row)
    flags = _flags(row)
    return {
        **measured_row(SOURCE, row, int(row["seq_len"]), layout),
        **architecture(row),
        "cluster": _CLUSTERS[row["hardware"]],
        "recompute": _RECOMPUTE[row["recompute"]],
        "sequence_parallel": "sequence-parallel" in flags and int(row["tp"]) > 1,
        "distributed_optimizer": "use-distributed-optimizer" in flags,
        **dp_overlap(flags),
        "framework": "mindspeed",
    }


def convert(path: Path) -> pd.DataFrame:
    """Schema-v1 rows of the kept MindSpeed-LLM measurements."""
    records = [_record(r) for r in read_rows(path) if not _reason(r)]
    return table(records)
