"""BigScience tr3m-1B3 benchmarking (bigscience-workshop/bigscience@1dee360c): Jean Zay V100.

A GPT of 1.3B (h2048, 24 layers, 16 heads) trained with Megatron-DeepSpeed and ZeRO-1 in fp16
on 2 nodes of 4 V100 (32 GB and 16 GB partitions): seconds per iteration at global batch 512,
the GPU memory in use, and the layouts that ran out of memory. Parsed: ``other_knobs`` (shape,
vocabulary, ``zero_stage``, ``dropout``), the recompute cell (``full`` with
``--checkpoint-activations``, ``none`` without), the memory of the partition in the hardware
cell. Assumed (autotune/dataset/data/NOTICE.md): the GPT block; the vocabulary padded to 128 * tp;
the memory cells (``16GB``) read as GiB; the catalog's V100 with 4 GPUs per node and the 400 Gb/s
Omni-Path of a Jean Zay node shared by its 4 GPUs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from autotune.dataset.importers._common import EARLY_MEGATRON
from autotune.dataset.importers._common import Config
from autotune.dataset.importers._common import configs
from autotune.dataset.importers._common import gpt_model
from autotune.dataset.importers._common import job_columns
from autotune.dataset.importers._common import knobs
from autotune.dataset.importers._common import metric
from autotune.dataset.importers._common import order_columns
from autotune.dataset.importers._common import padded_vocab
from autotune.dataset.importers._common import provenance

__all__ = ["RAW_FILE", "SOURCE", "convert"]

SOURCE = "bigscience_tr3m"
RAW_FILE = "bigscience_tr3m_v100.csv"
_GPUS_PER_NODE = 4  # Jean Zay V100 nodes: --gres=gpu:4 in experiments/tr3m-1B3.md
# "Intel OPA ... supposed to be 400Gbps max" per node (experiments/bandwidth/README.md) / 4 GPUs
_INTER_NODE_GBPS = 400 / 8 / _GPUS_PER_NODE
_MEMORY = re.compile(r"V100-SXM2-(?P<gb>\d+)GB")
_RECOMPUTE = ("full", "none")


def _record(config: Config) -> dict[str, object]:
    row = config.row
    shape = knobs(row["other_knobs"])
    recompute = row["recompute"].split()[0]
    memory = _MEMORY.search(row["hardware"])
    if recompute not in _RECOMPUTE or not memory or shape.get("zero_stage") != "1":
        raise ValueError(f"{row['config_id']}: unexpected recompute, hardware or ZeRO stage")
    hidden, tp = int(shape["hidden"]), int(row["tp"])
    model = gpt_model(
        int(shape["layers"]), hidden, int(shape["heads"]), padded_vocab(int(shape["vocab"]), tp)
    )
    if int(shape["ffn"]) != model["ffn_hidden_size"]:
        raise ValueError(f"{row['config_id']}: ffn {shape['ffn']} is not 4 * hidden")
    ran = row["status"] == "ok"
    return {
        "scenario": row["sweep_group"],
        "model": row["model"],
        **model,
        "cluster": "v100",
        "devices_per_node": _GPUS_PER_NODE,
        "device_memory_gib": float(memory["gb"]),
        "inter_node_gbps": _INTER_NODE_GBPS,
        **job_columns(row),
        "micro_batch": int(row["micro_batch"]),
        "recompute": recompute,
        **EARLY_MEGATRON,  # fp16, no sequence parallelism, no flash attention (V100, 2021)
        "distributed_optimizer": True,  # DeepSpeed ZeRO stage 1 shards the optimizer states
        "framework": "megatron_deepspeed",
        "dropout": float(shape["dropout"]),
        # Benchmarked with the slurm setup of 2021-12-01, on BigScience's fork of 2021-10-21 to
        # 2022-03-06, whose fused softmax check reads heads per rank as keys (reference.md 3.3).
        "fused_softmax_rule": "bigscience_fork",
        "status": row["status"],
        "step_time_s": metric(config, "iteration_time", "s") if ran else None,
        "peak_memory_gib": metric(config, "gpu_memory_used", "GB") if ran else None,
        "peak_memory_measure": "device",  # the GPU's used memory, as the notes read it
        # Of the first node's GPUs: DeepSpeed numbers ranks pipeline-outermost, so they hold
        # stage 0; the layouts that read 15 and 13 GB ran out of 16 GB (docs/decisions/0069).
        "peak_memory_rank": "first",
        **provenance(config, SOURCE),
        "notes": row["notes"],
    }


def convert(path: Path) -> pd.DataFrame:
    """Schema-v1 rows of ``bigscience_tr3m_v100.csv``: every configuration, ok or oom."""
    return order_columns([_record(c) for c in configs(path)])
