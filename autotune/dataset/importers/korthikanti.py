"""Korthikanti et al. 2022 Table 5 (via Calculon): GPT 22B-1T on Selene A100 80GB.

Parsed: the ``model`` cell (``GPT-22B (h=6144, L=48, heads=64)``) gives the shape; the
``recompute`` cell maps ``full`` to full and ``selective (attention-only) + sequence
parallelism`` to selective with sequence parallelism. Assumed (NOTICE.md): the GPT block with
vocabulary 51200, fp16, no distributed optimizer (Megatron-LM 2022), the generic ``a100``
cluster (Selene is DGX A100 80GB: 8 GPUs, NVSwitch, 8 x HDR 200 Gb/s per node).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from autotune.dataset.importers._common import EARLY_MEGATRON
from autotune.dataset.importers._common import configs
from autotune.dataset.importers._common import gpt_model
from autotune.dataset.importers._common import job_columns
from autotune.dataset.importers._common import metric
from autotune.dataset.importers._common import order_columns
from autotune.dataset.importers._common import provenance

__all__ = ["RAW_FILE", "SOURCE", "convert"]

SOURCE = "korthikanti"
RAW_FILE = "korthikanti_recompute_a100.csv"
VOCAB_SIZE = 51200  # Megatron's padded GPT-2 vocabulary (docs/reference.md 2.1)
_SHAPE = re.compile(r"\(h=(?P<h>\d+), L=(?P<L>\d+), heads=(?P<a>\d+)\)")
_RECOMPUTE = {
    "full": ("full", False),
    "selective (attention-only) + sequence parallelism": ("selective", True),
}


def convert(path: Path) -> pd.DataFrame:
    """Schema-v1 rows of ``korthikanti_recompute_a100.csv``: full vs selective + SP pairs."""
    records = []
    for config in configs(path):
        row = config.row
        shape = _SHAPE.search(row["model"])
        if not shape:
            raise ValueError(f"{path}: no shape in model {row['model']!r}")
        recompute, sequence_parallel = _RECOMPUTE[row["recompute"]]
        if sequence_parallel != (row["seq_parallel"] == "yes"):
            raise ValueError(f"{path}: recompute and seq_parallel disagree in {row['config_id']}")
        hidden, heads = int(shape["h"]), int(shape["a"])
        records.append(
            {
                "scenario": row["sweep_group"],
                "model": row["model"],
                **gpt_model(int(shape["L"]), hidden, heads, VOCAB_SIZE),
                "cluster": "a100",
                **job_columns(row),
                "micro_batch": int(row["micro_batch"]),
                "recompute": recompute,
                **EARLY_MEGATRON,
                "sequence_parallel": sequence_parallel,
                "framework": "megatron_lm",
                "status": row["status"],
                "step_time_s": metric(config, "iteration_time", "s"),
                **provenance(config, SOURCE),
            }
        )
    return order_columns(records)
