"""OneFlow DLPerf GPT report (2021-05-12): GPT 117M-3.5B on 4 nodes of 8 V100-SXM2-16GB.

Parsed: the ``model`` cell (``GPT h1536 L16 (498M)``) gives hidden size and layers; the case
name in ``source_ref`` keys the micro-batch and head count. Step time = global batch /
throughput (sequences/s). Transcribed from DLPerf ``Megatron-LM/README.md`` @01e43de4 (the
table of test cases) because the raw file leaves them blank: micro-batch per case, heads per
hidden size, ``--checkpoint-activations`` and ``--fp16``
(``scripts/mutil_perf_pretrain_gpt_dp_mp_pp.sh``), one 100 Gb/s EDR HCA per node (``ibstat``:
one ``mlx5_0``, rate 100). Assumed (NOTICE.md):
OneFlow-GPT rows use the same micro-batch and full recompute as the Megatron-LM run of the
same case, the report's stated aim being identical configurations.
"""

from __future__ import annotations

import re
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

SOURCE = "dlperf"
RAW_FILE = "oneflow_dlperf_gpt_v100.csv"
DEVICE_MEMORY_GIB = 16.0  # V100-SXM2-16GB (the report's hardware line)
INTER_NODE_GBPS = 100 / 8 / 8  # one 100 Gb/s HCA per node shared by 8 GPUs, GB/s per GPU

# DLPerf Megatron-LM/README.md @01e43de4, table "测试用例": micro-batch-size per case.
MICRO_BATCH = {
    "DP_1x1x1_2_1536x16": 2,
    "DP_8x1x1_16_1536x16": 2,
    "DP_16x1x1_32_1536x16": 2,
    "DP_32x1x1_64_1536x16": 2,
    "MP_1x1x1_8_768x12": 8,
    "MP_1x8x1_16_1536x16": 16,
    "MP_1x16x1_16_3072x16": 16,
    "MP_1x32x1_16_3072x32": 16,
    "2D_8x1x1_16_1536x16": 2,
    "2D_1x8x1_16_1536x16": 16,
    "2D_2x4x1_16_1536x16": 8,
    "2D_4x2x1_16_1536x16": 4,
    "2D_2x8x1_16_2304x24": 8,
    "2D_4x8x1_32_2304x24": 8,
    "DP_PP_8x1x4_512_1536x16": 2,
    "MP_PP_1x8x4_512_2304x24": 16,
    "2D_PP_2x4x4_512_2304x24": 8,
    "2D_PP_2x8x2_512_2304x24": 8,
}
# Same table: num-attention-heads per hidden size.
HEADS = {768: 12, 1536: 16, 2304: 24, 3072: 32}
_SHAPE = re.compile(r"GPT h(?P<h>\d+) L(?P<L>\d+)")
_CASE = re.compile(r"\(case (?P<case>[^)]+)\)")


def convert(path: Path) -> pd.DataFrame:
    """Schema-v1 rows of ``oneflow_dlperf_gpt_v100.csv`` (Megatron-LM and OneFlow-GPT runs)."""
    records = []
    for config in configs(path):
        row = config.row
        shape, case = _SHAPE.search(row["model"]), _CASE.search(row["source_ref"])
        if not shape or not case:
            raise ValueError(f"{path}: no shape or case in {row['config_id']}")
        hidden = int(shape["h"])
        global_batch = int(row["global_batch"])
        records.append(
            {
                "scenario": row["sweep_group"],
                "model": row["model"],
                **gpt_model(
                    int(shape["L"]), hidden, HEADS[hidden], int(knobs(row["other_knobs"])["vocab"])
                ),
                "cluster": "v100",
                "device_memory_gib": DEVICE_MEMORY_GIB,
                "inter_node_gbps": INTER_NODE_GBPS,
                **job_columns(row),
                "micro_batch": MICRO_BATCH[case["case"]],
                "recompute": "full",
                **EARLY_MEGATRON,
                "framework": "megatron_lm",
                "status": row["status"],
                "step_time_s": global_batch / metric(config, "throughput", "sequences/s"),
                **provenance(config, SOURCE),
                "stack": row["framework"],
            }
        )
    return order_columns(records)
