"""vTrain ground truth (VIA-Research/vTrain): Megatron-DeepSpeed GPT on A100, 2 to 512 GPUs.

Parsed: ``other_knobs`` (``hidden=..;layers=..;heads=..;pipeline_schedule=1f1b``) gives the
shape. Assumed (autotune/dataset/data/NOTICE.md): the GPT block (GeLU MLP of 4h, LayerNorm,
biases, tied embeddings, MHA), vocabulary 51200, fp16, full recompute on every layer
(``use_checkpoint``), no sequence parallelism, no distributed optimizer (plain Megatron-DeepSpeed
data parallelism).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from autotune.dataset.importers._common import EARLY_MEGATRON
from autotune.dataset.importers._common import configs
from autotune.dataset.importers._common import gpt_model
from autotune.dataset.importers._common import job_columns
from autotune.dataset.importers._common import knobs
from autotune.dataset.importers._common import metric
from autotune.dataset.importers._common import order_columns
from autotune.dataset.importers._common import provenance

__all__ = ["RAW_FILE", "SOURCE", "convert"]

SOURCE = "vtrain"
RAW_FILE = "vtrain_a100.csv"
VOCAB_SIZE = 51200  # GPT-2's 50257 padded as Megatron does at TP=8 (docs/reference.md 2.1)


def convert(path: Path) -> pd.DataFrame:
    """Schema-v1 rows of ``vtrain_a100.csv``: one per configuration, all ``ok``."""
    records = []
    for config in configs(path):
        row = config.row
        shape = knobs(row["other_knobs"])
        if shape.get("pipeline_schedule") != "1f1b" or not row["recompute"].startswith("full"):
            raise ValueError(f"{path}: unexpected vTrain settings in {row['config_id']}")
        hidden, heads = int(shape["hidden"]), int(shape["heads"])
        records.append(
            {
                "scenario": row["sweep_group"],
                "model": row["model"],
                **gpt_model(int(shape["layers"]), hidden, heads, VOCAB_SIZE),
                "cluster": "vtrain_a100",
                **job_columns(row),
                "micro_batch": int(row["micro_batch"]),
                "recompute": "full",
                **EARLY_MEGATRON,
                "framework": "megatron_deepspeed",
                "status": row["status"],
                "step_time_s": metric(config, "iteration_time", "ms") / 1000.0,
                **provenance(config, SOURCE),
            }
        )
    return order_columns(records)
