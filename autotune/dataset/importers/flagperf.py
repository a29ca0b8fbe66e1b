"""FlagPerf (FlagOpen/FlagPerf@1b5a0303): BAAI's Megatron training cases on NVIDIA GPUs.

Each README table row gives the layout (``PPxDPyTPz``), tokens/s per GPU, the memory in use
(``mem`` ``used/80`` GiB, FlagPerf's nvidia-smi monitor) and MFU; an ablation of LLaMA3-8B on
one DGX A800 node has a layout that ran out of memory. Parsed: the model cell names the
catalog model; ``other_knobs`` its shape (checked against the catalog) and ``dropout=``;
the precision cell (``bf16``, ``amp`` run as ``--bf16``, ``bf16+fp8``). Step time = global
batch * seq / (tokens/s/GPU * GPUs), the inverse of run_pretraining.py's formula. Assumed
(autotune/dataset/data/NOTICE.md): A800 and H800 are the A100 and H100 entries with NVLink at 200
GB/s per direction; H800's InfiniBand 200 Gb/s is one link per GPU; the vocabulary is padded to
128 * tp as Megatron does. Rows of any other status are skipped (:func:`skipped`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from autotune import catalog
from autotune.dataset.importers._common import Config
from autotune.dataset.importers._common import catalog_architecture
from autotune.dataset.importers._common import configs
from autotune.dataset.importers._common import job_columns
from autotune.dataset.importers._common import knobs
from autotune.dataset.importers._common import metric
from autotune.dataset.importers._common import order_columns
from autotune.dataset.importers._common import padded_vocab
from autotune.dataset.importers._common import provenance

__all__ = ["RAW_FILE", "SOURCE", "convert", "skipped"]

SOURCE = "flagperf"
RAW_FILE = "flagperf_nvidia_megatron.csv"
_MODELS = {"llama3_8b": "llama3_8b", "llama3_70b": "llama3_70b", "llama2_70b": "llama2_70b"}
_KEPT = ("ok", "oom")
# A800 / H800: the A100 / H100 with NVLink cut to 400 GB/s both ways, 200 one way [U].
_EXPORT_NVLINK_GBPS = 200.0
# The H800 README's "InfiniBand, 200Gb/s", read as one 200 Gb/s link per GPU: 25 GB/s [assumed].
_H800_INTER_NODE_GBPS = 200 / 8
# hardware cell prefix -> catalog cluster and the row's overrides
_MACHINES: dict[str, tuple[str, Mapping[str, float]]] = {
    "NVIDIA A800": ("a100", {"intra_node_gbps": _EXPORT_NVLINK_GBPS}),
    "NVIDIA H100": ("h100", {}),
    "NVIDIA DGX H100": ("h100", {}),
    "NVIDIA H800": (
        "h100",
        {"intra_node_gbps": _EXPORT_NVLINK_GBPS, "inter_node_gbps": _H800_INTER_NODE_GBPS},
    ),
}
# other_knobs shape keys -> the catalog field each one must equal
_SHAPE = {
    "hidden": "hidden_size",
    "layers": "num_layers",
    "ffn": "ffn_hidden_size",
    "heads": "num_attention_heads",
    "kv_heads": "num_kv_heads",
}


def _precision(cell: str) -> str:
    """``bf16`` and ``amp`` (the launcher passes ``--bf16``) -> bf16; ``bf16+fp8`` -> fp8."""
    if cell.startswith("bf16+fp8"):
        return "fp8"
    if cell.startswith(("bf16", "amp")):
        return "bf16"
    raise ValueError(f"unknown FlagPerf precision {cell!r}")


def _machine(hardware: str) -> tuple[str, Mapping[str, float]]:
    for prefix, machine in _MACHINES.items():
        if hardware.startswith(prefix):
            return machine
    raise ValueError(f"unknown FlagPerf hardware {hardware!r}")


def _architecture(row: Mapping[str, str]) -> dict[str, object]:
    """The catalog model of the row, its vocabulary padded; the stated shape must match."""
    name = _MODELS[row["model"].split()[0]]
    vocab = padded_vocab(catalog.load_model(name).vocab_size, int(row["tp"]))
    architecture = catalog_architecture(name, vocab_size=vocab)
    shape = knobs(row["other_knobs"])
    for key, field in _SHAPE.items():
        if int(shape[key]) != architecture[field]:
            raise ValueError(f"{row['config_id']}: {key}={shape[key]}, catalog {name} differs")
    return architecture


def _record(config: Config) -> dict[str, object]:
    row = config.row
    if not row["recompute"].startswith("none"):
        raise ValueError(f"{row['config_id']}: unexpected recompute {row['recompute']!r}")
    shape = knobs(row["other_knobs"])
    cluster, overrides = _machine(row["hardware"])
    ran = row["status"] == "ok"
    tokens = metric(config, "tokens_per_s_per_device", "tokens/s/device") if ran else None
    batch_tokens = int(row["global_batch"]) * int(row["seq_len"])
    step = None if tokens is None else batch_tokens / (tokens * int(row["num_devices"]))
    memory = (
        metric(config, "gpu_memory_used", "GiB") if "gpu_memory_used" in config.metrics else None
    )
    tp = int(row["tp"])
    return {
        "scenario": row["sweep_group"],
        "model": row["model"],
        **_architecture(row),
        "cluster": cluster,
        **overrides,
        **job_columns(row),
        "micro_batch": int(row["micro_batch"]),
        "recompute": "none",
        # The launchers pass --sequence-parallel; Megatron turns it off at tp = 1.
        "sequence_parallel": row["seq_parallel"] == "yes" and tp > 1,
        "distributed_optimizer": "use_distributed_optimizer" in shape,
        "precision": _precision(row["precision"]),
        "flash_attention": "use_flash_attn" in shape,
        "framework": "megatron_core",
        # The launchers pass neither --overlap-grad-reduce nor --overlap-param-gather.
        "overlap_grad_reduce": False,
        "overlap_param_gather": False,
        "dropout": float(shape["dropout"]),
        "status": row["status"],
        "step_time_s": step,
        "tokens_per_s_per_device": tokens,
        "peak_memory_gib": memory,
        "peak_memory_measure": "device",  # FlagPerf's monitor samples nvidia-smi
        **provenance(config, SOURCE),
        "notes": row["notes"],
    }


def skipped(path: Path) -> list[tuple[str, str]]:
    """``(config_id, reason)`` of every configuration :func:`convert` leaves out."""
    return [
        (c.row["config_id"], f"status {c.row['status']}: {c.row['notes']}")
        for c in configs(path)
        if c.row["status"] not in _KEPT
    ]


def convert(path: Path) -> pd.DataFrame:
    """Schema-v1 rows of ``flagperf_nvidia_megatron.csv``: the ok and oom configurations."""
    return order_columns([_record(c) for c in configs(path) if c.row["status"] in _KEPT])
