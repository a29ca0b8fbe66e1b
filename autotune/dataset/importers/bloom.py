"""BigScience's BLOOM-176B topology search (tr11 chronicles-prequel, February 2022).

Megatron-DeepSpeed (BigScience's fork) with DeepSpeed's pipeline engine on Jean Zay's A100 80 GB
nodes (8 per node, 4 x 100 Gb/s Omni-Path per node), GPT-style models of 6-106 layers and
hidden 12288-14400 with a 250,880-token vocabulary, sequence 2048, full activation
checkpointing. TP, PP, DP and the micro-batch vary; some runs ran out of memory; many carry the
peak memory the author read off ``nvidia-smi``.

Parsed: the ``model`` cell (``NHIDDEN=.., NLAYERS=.., NHEADS=..``), ``other_knobs``
(``zero_stage``), the date and the optimizer epoch from ``sweep_group``, ``max mem NNGB`` from
``notes``. What is inferred or assumed is in autotune/dataset/data/NOTICE.md ("bloom").
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
from autotune.dataset.importers._common import provenance
from autotune.simulators.frameworks import deepspeed_split

__all__ = ["RAW_FILE", "SOURCE", "convert"]

SOURCE = "bloom"
RAW_FILE = "bloom_tr11_prequel_a100.csv"
# BLOOM's tokenizer has 250,680 tokens; Megatron pads it to a multiple of 128 x tp, 250,880 at
# every tp of these runs from 2 to 8 (from 2022-03-01 the run pins it: --pad-vocab-size-to).
VOCAB_SIZE = 250880
# Heads of the two model shapes whose table does not restate them: the 200B model of the
# same days ran 96 heads at hidden 14400, and the 13824-wide runs of 02-21 ran 64 ("all
# NHEADS=64 (above too)").
_HEADS_NOT_STATED = {14400: 96, 13824: 64}
# Rows with no usable measurement: a layout that does not fill its GPUs, a run without a time.
_SKIPPED = ("inconsistent_config", "no_measurement")
# The optimizer epoch of BF16_Optimizer (fp32 gradient accumulation, ZeRO stage 0, its own
# sharding of the fp32 states) and of 'type:transformer|embedding' pipeline partitioning.
_BF16_OPTIMIZER = "bf16opt"
_GB_AS_GIB = 1000 / 1024  # nvidia-smi's MiB read in thousands ("56GB" for 56xxxMiB)
# The table at line 656 lists GBS 2048 under the heading "NLAYERS=6 / GBS=512"; its times and
# TFLOPs agree only with 512 (Megatron's formula gives 1.50e17 FLOPs per step at 512, and
# 143.48 TFLOPs x 8 GPUs x 130.43 s = 1.50e17).
_GLOBAL_BATCH_BY_TABLE = {"bloom_L656": 512}


def convert(path: Path) -> pd.DataFrame:
    """Schema-v1 rows of the BLOOM tr11 topology search: ``ok`` and ``oom`` runs."""
    records: list[dict[str, object]] = []
    seen: set[tuple[object, ...]] = set()
    for config in configs(path):
        row = config.row
        if row["status"] in _SKIPPED:
            continue
        record = _record(config)
        key = tuple(record[k] for k in ("scenario", "dp", "tp", "pp", "micro_batch"))
        if key in seen:  # a layout measured twice on one day: the first measurement is kept
            continue
        seen.add(key)
        records.append(record)
    return order_columns(records)


def _record(config: Config) -> dict[str, object]:
    row = config.row
    hidden, layers, heads = _shape(row)
    epoch, date = row["sweep_group"].split("|")[1:3]
    zero_stage = int(re.search(r"zero_stage=(\d)", row["other_knobs"]).group(1))  # type: ignore[union-attr]
    bf16_optimizer = epoch == _BF16_OPTIMIZER
    precision = "bf16" if bf16_optimizer or row["precision"] == "bf16" else "fp16"
    # 'type:transformer|embedding' weighs the two embedding copies as layers (02-27 on).
    embedding_slots = bf16_optimizer or "partition_method" in row["notes"]
    status = "oom" if row["status"] == "OOM" else row["status"]
    table = row["config_id"].rsplit("_", 1)[0]
    gpus = int(row["num_devices"])
    gbs = _GLOBAL_BATCH_BY_TABLE.get(table, int(row["global_batch"]))
    pp = int(row["pp"])
    # DeepSpeed of early 2022 split by partition_balanced (docs/reference.md 7.1): "78/12=6.5 -
    # so the last stage has 1 block, while the rest have 7"
    split = deepspeed_split(layers, pp, balanced=True, embedding_slots=embedding_slots)
    optimizer = "bf16_optimizer" if bf16_optimizer else f"zero{zero_stage}"
    return {
        "scenario": (
            f"bloom|{date}|{precision}|{optimizer}|h{hidden}|L{layers}|a{heads}"
            f"|gpus{gpus}|gbs{gbs}"
        ),
        "model": f"BLOOM-prequel h{hidden} L{layers} a{heads}",
        **gpt_model(layers, hidden, heads, VOCAB_SIZE),
        "cluster": "jean_zay_a100",
        **job_columns(row),
        "global_batch_size": gbs,
        "micro_batch": int(row["micro_batch"]),
        "recompute": "full",
        "layer_split": "/".join(map(str, split)) if len(set(split)) > 1 else None,
        **EARLY_MEGATRON,
        "precision": precision,
        # ZeRO-1's DeepSpeedZeroOptimizer; BF16_Optimizer runs ZeRO stage 0 and shards the
        # fp32 states itself, keeping an unsharded fp32 gradient buffer (the replicated mode).
        "distributed_optimizer": zero_stage == 1 and not bf16_optimizer,
        "framework": "megatron_deepspeed",
        "dropout": 0.1,  # Megatron's default, which tr11 inherited ("--hidden-dropout 0.1")
        # The fork's fused_softmax.py of 2021-10-21 to 2022-03-06, which every run here used:
        # its kernel check reads the heads per rank as the key length (docs/reference.md 3.3).
        "fused_softmax_rule": "bigscience_fork",
        "status": status,
        "step_time_s": metric(config, "iteration_time", "s") if status == "ok" else None,
        "peak_memory_gib": _peak_gib(row["notes"]),
        "peak_memory_measure": "device",  # read off nvidia-smi on the first and last nodes
        **provenance(config, SOURCE),
    }


def _shape(row: dict[str, str]) -> tuple[int, int, int]:
    """(hidden, layers, heads); layers the author tweaked per PP are inferred from the size."""
    found = re.search(r"NHIDDEN=(\d+), NLAYERS=(\d+|\?), NHEADS=(\d+|\?)", row["model"])
    if found is None:
        raise ValueError(f"config {row['config_id']}: no shape in {row['model']!r}")
    hidden = int(found.group(1))
    heads_knob = knobs(row["other_knobs"]).get("nheads", "")
    heads = int(heads_knob) if heads_knob else _HEADS_NOT_STATED[hidden]
    if found.group(2) != "?":
        return hidden, int(found.group(2)), heads
    return hidden, _layers_from_size(hidden, int(row["pp"]), float(row["model_params_b"])), heads


def _layers_from_size(hidden: int, pp: int, size_b: float) -> int:
    """The multiple of ``pp`` whose parameter count, 12 L h^2 with or without the embedding,
    is nearest the stated size (the author "tweaked NLAYERS to make layers divisible by PP")."""

    def miss(layers: int) -> float:
        blocks = 12 * layers * hidden * hidden
        return min(abs(blocks - size_b * 1e9), abs(blocks + VOCAB_SIZE * hidden - size_b * 1e9))

    return min(range(pp, 4 * int(size_b) + pp, pp), key=miss)


def _peak_gib(notes: str) -> float | None:
    found = re.search(r"max mem (\d+)GB", notes)
    return int(found.group(1)) * _GB_AS_GIB if found else None
