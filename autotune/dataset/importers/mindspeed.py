"""MindSpeed-LLM README performance table (2024-10): one measured run per model on 910B.

Only the ``throughput_npu`` rows (Atlas 900 A2, 910B) with status ``ok`` are measurements of a
known layout. Skipped, and listed in NOTICE.md: the ``throughput_reference`` rows (the README's
reference column, platform not stated), rows marked ``config_mismatch`` / ``config_unknown``,
and models whose architecture is not in the catalog (``conf/model/``).

Parsed: ``vpp`` cells such as ``4 (num-layers-per-virtual-pipeline-stage=5)`` (the number of
model chunks), ``recompute`` cells (``full/uniform/num_layers=1`` is full recompute of every
layer; ``none+swap-attention`` is priced as no recompute: Mixtral 8x22B's script swaps every
layer's attention activations to host and recomputes every layer's MoE block, neither of which
the simulators model, docs/decisions/0036-mindspeed-moe-rows-left-unpriced.md),
``use-distributed-optimizer``, ``overlap-grad-reduce``, ``overlap-param-gather`` and
``num-layer-list`` (the uneven split, as ``layer_split``) in ``notes`` (each read from the row's
example script at the same commit), and the MoE rows' token dispatcher (from their scripts).
Every one of those scripts passes ``--attention-dropout 0.0 --hidden-dropout 0.0``, GPT-3's
included: ``dropout`` 0. Step time = global batch * sequence length / (tokens/s/device *
devices). Each row is its own scenario: useful for error, not for regret.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from autotune.dataset.importers._common import catalog_architecture
from autotune.dataset.importers._common import configs
from autotune.dataset.importers._common import dp_overlap
from autotune.dataset.importers._common import leading_int
from autotune.dataset.importers._common import metric
from autotune.dataset.importers._common import order_columns
from autotune.dataset.importers._common import provenance

__all__ = ["MODELS", "RAW_FILE", "SOURCE", "convert", "skipped"]

SOURCE = "mindspeed"
RAW_FILE = "mindspeed_llm_npu_readme_2024-10.csv"
_MEASURED = "throughput_npu"
# README model name -> catalog model (conf/model/; docs/reference.md 2: Llama-3.1-8B/70B have
# the shape of Llama-3-8B/70B, Qwen2-7B/72B the shape of Qwen2.5-7B/72B).
MODELS = {
    "LLaMA2 7B": "llama2_7b",
    "LLaMA2 13B": "llama2_13b",
    "LLaMA2 70B": "llama2_70b",
    "LLaMA3 8B": "llama3_8b",
    "LLaMA3.1 8B": "llama3_8b",
    "LLaMA3 70B": "llama3_70b",
    "LLaMA3.1 70B": "llama3_70b",
    "Qwen2 7B": "qwen2_5_7b",
    "Qwen2.5 7B": "qwen2_5_7b",
    "Qwen2.5 14B": "qwen2_5_14b",
    "Qwen2.5 32B": "qwen2_5_32b",
    "Qwen2 72B": "qwen2_5_72b",
    "Baichuan2 7B": "baichuan2_7b",
    "Baichuan2 13B": "baichuan2_13b",
    "ChatGLM3 6B": "chatglm3_6b",
    "GLM4 9B": "glm4_9b",
    "InternLM2 20B": "internlm2_20b",
    "Mixtral 8x7B": "mixtral_8x7b",
    "Mixtral 8x22B": "mixtral_8x22b",
    "GPT3 175B": "gpt3_175b",
    "DeepSeek-V2-Lite 16B": "deepseek_v2_lite",
}
_RECOMPUTE = {
    "none": "none",
    "none+swap-attention": "none",
    "full/uniform/num_layers=1": "full",
}


def skipped(path: Path) -> list[tuple[str, str]]:
    """``(model, reason)`` of every measured 910B row that :func:`convert` leaves out."""
    found = []
    for config in configs(path):
        reason = _skip_reason(config.row, set(config.metrics))
        if reason and _MEASURED in config.metrics:
            found.append((config.row["model"], reason))
    return found


def _skip_reason(row: dict[str, str], metrics: set[str]) -> str:
    if _MEASURED not in metrics:
        return "no 910B measurement"
    if row["status"] != "ok":
        return f"status {row['status']} (layout of the run not known)"
    if row["model"] not in MODELS:
        return "architecture not in the catalog (conf/model/)"
    return ""


def _layer_list(notes: str) -> str | None:
    """The script's ``--num-layer-list`` (layers per pipeline stage, ``11/13/19/21``), if any."""
    match = re.search(r"num-layer-list=([0-9/]+)", notes)
    return match[1] if match else None


# --context-parallel-algo of the example scripts; hybrid_cp_algo (Ulysses inside a group, the
# ring across groups) is neither exchange and stays empty: the framework's default.
_CP_EXCHANGES = {"ulysses_cp_algo": "a2a", "megatron_cp_algo": "p2p"}


# --moe-token-dispatcher-type of the MoE rows' example scripts at d58c5688fe: DeepSeek-V2-Lite's
# names allgather, Mixtral 8x22B's alltoall, and Mixtral 8x7B's none, which is Megatron
# core_r0.6.0's default, allgather (docs/reference.md 7.7).
_DISPATCHERS = {
    "Mixtral 8x7B": "allgather",
    "Mixtral 8x22B": "alltoall",
    "DeepSeek-V2-Lite 16B": "allgather",
}


def _cp_comm_type(notes: str, cp: int) -> str | None:
    """The context-parallel exchange of a row's script (``ulysses_cp_algo``, the default at
    d58c5688fe, where the script names none)."""
    if cp == 1:
        return None
    match = re.search(r"cp_algo=(\w+)", notes)
    return _CP_EXCHANGES.get(match[1] if match else "ulysses_cp_algo")


def convert(path: Path) -> pd.DataFrame:
    """Schema-v1 rows of the README table's 910B measurements of catalog models."""
    records = []
    for config in configs(path):
        row = config.row
        if _skip_reason(row, set(config.metrics)):
            continue
        tokens_per_s = metric(config, _MEASURED, "tokens/s/device")
        devices, seq, batch = (
            int(row["num_devices"]),
            int(row["seq_len"]),
            int(row["global_batch"]),
        )
        tp = int(row["tp"])
        records.append(
            {
                "scenario": row["sweep_group"],
                "model": row["model"],
                **catalog_architecture(MODELS[row["model"]]),
                "cluster": "ascend",
                "num_devices": devices,
                "seq_len": seq,
                "global_batch_size": batch,
                **{k: int(row[k]) for k in ("dp", "tp", "pp", "cp", "ep")},
                "vpp": leading_int(row["vpp"]),
                "micro_batch": int(row["micro_batch"]),
                "recompute": _RECOMPUTE[row["recompute"]],
                "sequence_parallel": row["seq_parallel"] == "yes" and tp > 1,
                "distributed_optimizer": "use-distributed-optimizer" in row["notes"],
                "layer_split": _layer_list(row["notes"]),
                **dp_overlap(row["notes"]),
                "cp_comm_type": _cp_comm_type(row["notes"], int(row["cp"])),
                "moe_dispatcher": _DISPATCHERS.get(row["model"]),
                "dropout": 0.0,
                "precision": row["precision"],
                "framework": "mindspeed",
                "status": "ok",
                "step_time_s": batch * seq / (tokens_per_s * devices),
                "tokens_per_s_per_device": tokens_per_s,
                **provenance(config, SOURCE),
                "notes": row["notes"],
            }
        )
    return order_columns(records)
