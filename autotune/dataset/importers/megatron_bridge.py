"""Megatron-Bridge performance summary (NeMo containers 25.09 to 26.08): pre-training tables.

Kept: rows with status ``ok`` of catalog models on H100, B200 and GB200 in BF16 (``bf16``) or
FP8, FP8-CS, FP8-MX, MXFP8 and the block-scaled FP8 of 25.09 (``fp8``, the label in ``notes``).
Step time = global batch * seq / (tokens/s/GPU * devices). Skipped, and counted in NOTICE.md:
superseded rows, NVFP4, B300/GB300 and models outside the catalog, and layouts that contradict
their own cells. FSDP rows (``fsdp`` > 0) run Megatron-FSDP with ``optim_grads_params``, as the
performance scripts set it: ``zero_stage`` 3, sharded over ``fsdp`` ranks (1: the 25.09 flag,
all of dp * cp; every row shards over all of dp * cp, ``dp_replicate`` 1). Mixture-of-experts
rows leave ETP empty: the performance recipes set expert tensor parallelism to 1 (``etp`` 1
where tp > 1).

Assumed (NOTICE.md): dp = devices / (tp * pp * cp), checked against the published GA; an empty
VP or EP is 1; recompute none (not published); sequence parallelism where tp > 1 and the
distributed optimizer, as every pre-training recipe of ``src/megatron/bridge/perf_recipes`` sets;
an empty FSDP cell is no FSDP; jobs of more than 72 GB200 GPUs use 64 GPUs of each NVL72 rack;
Megatron-Core (``framework``). Read in the performance configs of every release: bf16 gradients,
TP communication overlap where tp > 1, and DeepEP and the EP all-to-all overlap where they use
them (``_MOE_SETTINGS``). Each row is its own scenario: error, not regret.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from autotune import catalog
from autotune.dataset.importers._tables import layout_reason
from autotune.dataset.importers._tables import megatron_core_row
from autotune.dataset.importers._tables import read_rows
from autotune.dataset.importers._tables import row_label
from autotune.dataset.importers._tables import skip_reason
from autotune.dataset.importers._tables import table

__all__ = ["RAW_FILE", "SOURCE", "convert", "skipped"]

SOURCE = "megatron_bridge"
RAW_FILE = "megatron_bridge_perf_summary.csv"
_CLUSTERS = {"h100": "h100", "b200": "b200", "gb200": "gb200"}

Row = Mapping[str, str]
# The MoE settings of the performance configs, by (release, model, hardware), where they are
# not the defaults: DeepEP (the flex dispatcher, backend deepep) and the EP all-to-all overlap.
# The other rows run the all-to-all, or HybridEP inside one NVLink domain, without the overlap.
# Source: NOTICE.md.
_DEEPEP: dict[str, object] = {"moe_dispatcher": "deepep"}
_OVERLAP: dict[str, object] = {"moe_a2a_overlap": True}
_MOE_SETTINGS: dict[tuple[str, str, str], dict[str, object]] = {
    ("NeMo 26.02", "Qwen3_30B_a3B", "h100"): {**_DEEPEP, **_OVERLAP},
    ("NeMo 26.02.01", "Qwen3_30B_a3B", "h100"): {**_DEEPEP, **_OVERLAP},
    ("NeMo 26.04.01", "DeepSeekV3", "b200"): {**_DEEPEP, **_OVERLAP},
    **{
        (release, model, "gb200"): _OVERLAP
        for release in ("NeMo 26.06", "NeMo 26.06.01", "NeMo 26.08")
        for model in ("DeepSeekV3", "Qwen3_235B_a22B", "Qwen3_30B_a3B")
    },
}


def _expert_tp(row: Row) -> int | None:
    """The recipes' expert TP of a mixture-of-experts row: 1; None for a dense model."""
    return 1 if catalog.load_model(row["model_key"]).is_moe else None


def _reason(row: Row) -> str:
    reason = skip_reason(row, _CLUSTERS)
    if reason:
        return reason
    return layout_reason(row, _CLUSTERS[row["hardware"]], _expert_tp(row))


def skipped(path: Path) -> list[tuple[str, str]]:
    """``(row, reason)`` of every raw row that :func:`convert` leaves out."""
    return [(row_label(r), _reason(r)) for r in read_rows(path) if _reason(r)]


def convert(path: Path) -> pd.DataFrame:
    """Schema-v1 rows of the kept Megatron-Bridge measurements."""
    records = [
        megatron_core_row(
            SOURCE,
            r,
            _CLUSTERS[r["hardware"]],
            int(r["seq_len"]),
            moe=_MOE_SETTINGS.get((r["release"], r["model"], r["hardware"])),
            expert_tp=_expert_tp(r),
        )
        for r in read_rows(path)
        if not _reason(r)
    ]
    return table(records)
