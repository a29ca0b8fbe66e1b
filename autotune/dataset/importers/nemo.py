"""NeMo performance docs (NVIDIA/NeMo): the 24.07 pre-training summary and the long-sequence page.

Kept: rows with status ``ok`` of catalog models on H100 (every kept row is FP8 -> ``fp8``).
The 24.07 table publishes tokens/s/GPU: step time = global batch * seq / (tokens/s/GPU *
devices). The long-sequence page's "with CP" rows publish the layout and TFLOP/s only; their
tokens/s/GPU and micro-batch are read from the ``duplicate`` row of the same run (an unmerged
revision of the summary page with the same layout and TFLOP/s), which is not kept itself.
Skipped, and counted in NOTICE.md: other statuses, models outside the catalog, the "without CP"
rows (layout not published).

Assumed (NOTICE.md): dp = devices / (tp * pp * cp); VP=1 is no interleaving; recompute none
(not published); sequence parallelism where tp > 1 and the distributed optimizer (as in the NeMo
recipes of the dgxc-benchmarking Hydra configs and NeMo 2.0's performance scripts); Megatron-Core
(``framework``); bf16 gradients and, for the 24.07 models whose launcher configs say so, TP
communication overlap. Each row is its own scenario: it counts for step-time error, not for
regret.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from autotune.dataset.importers._tables import layout_reason
from autotune.dataset.importers._tables import megatron_core_row
from autotune.dataset.importers._tables import read_rows
from autotune.dataset.importers._tables import row_label
from autotune.dataset.importers._tables import skip_reason
from autotune.dataset.importers._tables import table

__all__ = ["RAW_FILE", "SOURCE", "convert", "skipped"]

SOURCE = "nemo"
RAW_FILE = "nemo_perf_summary.csv"
_CLUSTERS = {"h100": "h100", "b200": "b200", "gb200": "gb200"}
_NO_LAYOUT = "layout not published ('without CP' column)"
_NO_THROUGHPUT = "no tokens/s published (TFLOP/s only) and no duplicate row that has it"
# The cells that identify one run on both the long-sequence page and its duplicate.
_RUN = ("model_key", "num_devices", "seq_len", "global_batch", "tp", "pp", "cp")
_RUN_METRIC = "model_tflops_per_gpu"

Row = Mapping[str, str]
# 24.07 models whose launcher config (or the dgxc-benchmarking config of the same layout, for
# Nemotron-340B) runs with TP communication overlap; source: NOTICE.md.
_TP_OVERLAP_24_07 = frozenset({"LLAMA2-70B", "LLAMA3-70B", "Nemotron-340B"})


def _run_key(row: Row) -> tuple[str, ...]:
    return tuple(row[k] for k in (*_RUN, _RUN_METRIC))


def _duplicates(rows: list[dict[str, str]]) -> dict[tuple[str, ...], Row]:
    """The ``duplicate`` rows that carry tokens/s, by the run they repeat."""
    return {
        _run_key(r): r for r in rows if r["status"] == "duplicate" and r["tokens_per_s_per_gpu"]
    }


def _with_throughput(row: Row, duplicates: Mapping[tuple[str, ...], Row]) -> dict[str, str]:
    """``row``, with tokens/s/GPU and micro-batch from its duplicate where it lacks them."""
    twin = duplicates.get(_run_key(row))
    if row["tokens_per_s_per_gpu"] or twin is None:
        return dict(row)
    return {
        **row,
        "tokens_per_s_per_gpu": twin["tokens_per_s_per_gpu"],
        "micro_batch": row["micro_batch"] or twin["micro_batch"],
        "other": f"{row['other']}; tokens/s/GPU and MBS from {twin['source_ref'].split(' ')[0]}",
    }


def _reason(row: Row) -> str:
    reason = skip_reason(row, _CLUSTERS)
    if reason:
        return reason
    if "variant=without CP" in row["other"]:
        return _NO_LAYOUT
    if not row["tokens_per_s_per_gpu"]:
        return _NO_THROUGHPUT
    return layout_reason(row, _CLUSTERS[row["hardware"]])


def _rows(path: Path) -> list[dict[str, str]]:
    rows = read_rows(path)
    duplicates = _duplicates(rows)
    return [_with_throughput(r, duplicates) for r in rows]


def skipped(path: Path) -> list[tuple[str, str]]:
    """``(row, reason)`` of every raw row that :func:`convert` leaves out."""
    return [(row_label(r), _reason(r)) for r in _rows(path) if _reason(r)]


def _tp_overlap_known(row: Row) -> bool:
    """Whether the row's run is known to overlap TP communication: the 24.07 launcher configs
    of its layout set ``ub_tp_comm_overlap: true`` (NOTICE.md); GPT3-175B's says false and the
    long-sequence page names no config."""
    return row["release"] == "NeMo 24.07" and row["model"] in _TP_OVERLAP_24_07


def convert(path: Path) -> pd.DataFrame:
    """Schema-v1 rows of the kept NeMo measurements."""
    records = [
        megatron_core_row(
            SOURCE,
            r,
            _CLUSTERS[r["hardware"]],
            int(r["seq_len"]),
            tp_comm_overlap=_tp_overlap_known(r),
        )
        for r in _rows(path)
        if not _reason(r)
    ]
    return table(records)
