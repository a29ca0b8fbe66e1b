"""Shared steps of the importers of published performance tables (one raw row per configuration).

The raw files (``autotune/dataset/raw/README.md``, "Published performance tables") hold one
measured configuration per row: the layout cells as published, the metric the table printed
(tokens/s/GPU, step time or cluster tokens/s), a ``status`` and the raw published row in
``source_ref``. Each row the importers keep becomes its own job: its scenario is a stable id of
the row, so it counts for step-time error, never for regret.
"""

from __future__ import annotations

import csv
import functools
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from autotune import catalog
from autotune.dataset.importers._common import catalog_architecture
from autotune.dataset.importers._common import order_columns

__all__ = [
    "LayoutMismatch",
    "architecture",
    "cluster_columns",
    "layout_columns",
    "layout_reason",
    "measured_row",
    "megatron_core_row",
    "precision_of",
    "read_rows",
    "row_label",
    "sharding_columns",
    "skip_reason",
    "table",
]

_NO_THROUGHPUT = "no tokens/s published (model TFLOP/s only)"
# Megatron-FSDP's sharding of the performance scripts: optim_grads_params, ZeRO-3 (NOTICE.md).
_FSDP_ZERO_STAGE = 3
_NVFP4 = "NVFP4 precision (not modelled)"
_NOT_OK = "status {} (not a usable measurement of the stated layout)"
_HARDWARE = "hardware not in the catalog (conf/cluster/)"
_MODEL = "model not in the catalog (conf/model/)"
_MISMATCH = "layout contradicts itself (world size, batch, accumulation or experts)"
_LAYERS = re.compile(r"(?:^|; )layers=(\d+)")
# GPUs per NVLink domain that a job larger than one domain uses, where the catalog's domain does
# not divide the job (assumed: 64 of an NVL72 rack's 72, the power-of-two share; the tables do
# not publish the placement; NOTICE.md).
_DOMAIN_SHARE = {"gb200": 64}


class LayoutMismatch(ValueError):
    """A published layout that contradicts its own cells (world size, batch, accumulation)."""


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a raw table, every cell as text."""
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def row_label(row: Mapping[str, str]) -> str:
    """A short description of a raw row, for skip lists."""
    return (
        f"{row['release']} {row['model']} {row['hardware']} x{row['num_devices']} "
        f"{row['precision']}"
    )


def precision_of(label: str) -> str:
    """The schema precision of a published label ("" for NVFP4, which is skipped).

    BF16 -> ``bf16``; FP8, FP8-CS, FP8-MX, MXFP8 and the block-scaled FP8 variants -> ``fp8``
    (the recipe stays in ``notes``).
    """
    upper = label.upper()
    if upper.startswith("BF16"):
        return "bf16"
    if upper.startswith("NVFP4"):
        return ""
    if "FP8" in upper:
        return "fp8"
    raise ValueError(f"unknown precision label {label!r}")


def _fsdp_on(row: Mapping[str, str]) -> bool:
    return row["fsdp"] not in ("", "0")


def skip_reason(row: Mapping[str, str], clusters: Mapping[str, str], fsdp: str = "") -> str:
    """Why a raw row is left out by every importer ("" when it passes these checks).

    The checks, in order: status, NVFP4, hardware (``clusters`` maps the raw ``hardware`` cell
    to a catalog cluster), catalog model (the raw ``model_key``), FSDP (``fsdp``: the reason an
    importer gives for a row with FSDP on, "" where it keeps them through
    :func:`sharding_columns`), a throughput (tokens/s per device or in all; a row that publishes
    only model TFLOP/s has no step time).
    """
    if row["status"] != "ok":
        return _NOT_OK.format(row["status"])
    if not precision_of(row["precision"]):
        return _NVFP4
    if row["hardware"] not in clusters:
        return _HARDWARE
    if row["model_key"] not in catalog.options("model"):
        return _MODEL
    if fsdp and _fsdp_on(row):
        return fsdp
    if not (row["tokens_per_s_per_gpu"] or row["tokens_per_s_total"]):
        return _NO_THROUGHPUT
    return ""


def architecture(row: Mapping[str, str], **changes: object) -> dict[str, object]:
    """The catalog architecture of ``model_key``, cut to ``layers=N`` of ``other`` if given."""
    match = _LAYERS.search(row["other"])
    if match:
        changes = {"num_layers": int(match.group(1)), **changes}
    return catalog_architecture(row["model_key"], **changes)


def _int(row: Mapping[str, str], key: str, default: int) -> int:
    return int(row[key]) if row[key] else default


def layout_columns(row: Mapping[str, str], expert_tp: int | None = None) -> dict[str, int | None]:
    """dp (devices / (tp*pp*cp)), tp, pp, cp, ep, etp, vpp and micro_batch of a raw row.

    An empty ``cp``, ``ep`` or ``vp`` is 1 (NeMo prints VP=1 or n/a for no interleaving); an
    empty ``etp`` is ``expert_tp`` where the importer knows the recipes' value, else tp; etp
    equal to tp is written empty (the layout's spelling of experts that reuse TP).

    Raises:
        LayoutMismatch: no micro-batch, degrees that do not divide the devices, a published dp
            that differs from the derived one, global batch != micro-batch * dp * published GA,
            or an expert grid etp * ep * pp that does not divide the devices.
    """
    tp, pp, cp = int(row["tp"]), int(row["pp"]), _int(row, "cp", 1)
    devices, batch = int(row["num_devices"]), int(row["global_batch"])
    if not row["micro_batch"]:
        raise LayoutMismatch("no micro-batch")
    mbs = int(row["micro_batch"])
    dp, rest = divmod(devices, tp * pp * cp)
    if rest or (row["dp"] and int(row["dp"]) != dp):
        raise LayoutMismatch(f"{devices} devices != dp * tp({tp}) * pp({pp}) * cp({cp})")
    if batch % (mbs * dp) or (row["ga"] and batch != mbs * dp * int(row["ga"])):
        raise LayoutMismatch(f"global batch {batch} != micro-batch {mbs} * dp {dp} * GA")
    ep = _int(row, "ep", 1)
    etp = _int(row, "etp", expert_tp or tp) if "etp" in row else tp
    if devices % (etp * ep * pp):
        raise LayoutMismatch(f"expert grid etp {etp} * ep {ep} * pp {pp} over {devices} devices")
    return {
        "dp": dp,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "ep": ep,
        "etp": None if etp == tp else etp,
        "vpp": _int(row, "vp", 1),
        "micro_batch": mbs,
    }


def sharding_columns(row: Mapping[str, str]) -> dict[str, int]:
    """``zero_stage`` 3 and ``dp_replicate`` of a row with FSDP on; nothing for one without.

    Megatron-FSDP shards over dp * cp (``optim_grads_params``, ZeRO-3, as the performance
    scripts set it). ``fsdp`` 1 (the 0/1 flag of the 25.09 and 25.0x tables) is full sharding;
    a larger cell is the shard size, so dp_replicate = dp * cp / fsdp (hybrid below dp * cp).

    Raises:
        LayoutMismatch: a shard size that does not divide dp * cp.
    """
    if not _fsdp_on(row):
        return {}
    size = int(row["fsdp"])
    ranks = int(row["num_devices"]) // (int(row["tp"]) * int(row["pp"]))
    if size > 1 and ranks % size:
        raise LayoutMismatch(f"FSDP size {size} does not divide dp * cp = {ranks}")
    return {"zero_stage": _FSDP_ZERO_STAGE, "dp_replicate": ranks // size if size > 1 else 1}


def layout_reason(row: Mapping[str, str], cluster: str, expert_tp: int | None = None) -> str:
    """Why the layout of a raw row cannot be used ("" when it can); ``expert_tp`` as
    :func:`layout_columns` takes it."""
    try:
        layout_columns(row, expert_tp)
        sharding_columns(row)
        cluster_columns(cluster, int(row["num_devices"]))
    except LayoutMismatch:
        return _MISMATCH
    return ""


@functools.cache
def _devices_per_node(cluster: str) -> int:
    return catalog.load_cluster(cluster).devices_per_node


def cluster_columns(cluster: str, num_devices: int) -> dict[str, object]:
    """``cluster``, plus ``devices_per_node`` where the job spans NVLink domains unevenly.

    Raises:
        LayoutMismatch: a job that no assumed placement fits.
    """
    per_node = _devices_per_node(cluster)
    if num_devices <= per_node or num_devices % per_node == 0:
        return {"cluster": cluster}
    share = _DOMAIN_SHARE.get(cluster, per_node)
    if num_devices % share:
        raise LayoutMismatch(f"{num_devices} devices in nodes of {per_node} on {cluster}")
    return {"cluster": cluster, "devices_per_node": share}


def _step_time_s(row: Mapping[str, str], seq_len: int) -> tuple[float, float, str]:
    """Step time, tokens/s per device, and where they come from, for one raw row.

    tokens/s/GPU published: step = global batch * seq / (tokens/s/GPU * devices). Else the
    cluster tokens/s is published: tokens/s per device = cluster tokens/s / devices, and the step
    time is the published one, or global batch * seq / cluster tokens/s where none is.
    """
    devices, tokens = int(row["num_devices"]), int(row["global_batch"]) * seq_len
    if row["tokens_per_s_per_gpu"]:
        per_device = float(row["tokens_per_s_per_gpu"])
        return tokens / (per_device * devices), per_device, "step time from tokens/s/GPU"
    total = float(row["tokens_per_s_total"])
    if row["step_time_s"]:
        return float(row["step_time_s"]), total / devices, "step time as published"
    return tokens / total, total / devices, "step time from cluster tokens/s"


def _scenario(source: str, row: Mapping[str, str], seq_len: int) -> str:
    """source|model|hardware|devices|precision label|seq|gbs|release: one job per raw row."""
    cells = (row["model"], row["hardware"], row["num_devices"], row["precision"])
    return "|".join((source, *cells, str(seq_len), row["global_batch"], row["release"]))


def _provenance(row: Mapping[str, str], source: str) -> dict[str, str]:
    """The provenance columns: short source name, the raw reference, the licence."""
    return {"source": source, "source_ref": row["source_ref"], "license": row["license"]}


def measured_row(
    source: str, row: Mapping[str, str], seq_len: int, layout: Mapping[str, int | None]
) -> dict[str, object]:
    """The job, layout, precision, measurement and provenance columns of a kept raw row."""
    step, per_device, how = _step_time_s(row, seq_len)
    notes = (f"precision as published: {row['precision']}", how, row["release"], row["other"])
    return {
        "scenario": _scenario(source, row, seq_len),
        "model": row["model"],
        "num_devices": int(row["num_devices"]),
        "seq_len": seq_len,
        "global_batch_size": int(row["global_batch"]),
        **layout,
        "precision": precision_of(row["precision"]),
        "status": "ok",
        "step_time_s": step,
        "tokens_per_s_per_device": per_device,
        **_provenance(row, source),
        "notes": "; ".join(filter(None, notes)),
    }


def megatron_core_row(
    source: str,
    row: Mapping[str, str],
    cluster: str,
    seq_len: int,
    recompute: str = "none",
    *,
    grad_reduce_in_fp32: bool = False,
    tp_comm_overlap: bool = True,
    moe: Mapping[str, object] | None = None,
    changes: Mapping[str, object] | None = None,
    expert_tp: int | None = None,
) -> dict[str, object]:
    """A kept row of an NVIDIA table (NeMo, Megatron-Bridge, dgxc-benchmarking).

    Sequence parallelism where tp > 1 and the distributed optimizer, as the NeMo and
    Megatron-Bridge recipes set them (NOTICE.md); gradients reduced in bf16 unless
    ``grad_reduce_in_fp32`` and TP communication overlapped where tp > 1 unless not
    ``tp_comm_overlap`` (False: not known, the framework's default), as the performance configs
    of these tables set them (NOTICE.md); ``moe`` the MoE settings the config names
    (``moe_dispatcher``, ``moe_a2a_overlap``); ``changes`` replace architecture fields;
    ``expert_tp`` the recipes' expert TP where the row leaves it empty (:func:`layout_columns`);
    a row with FSDP on runs ZeRO-3 (:func:`sharding_columns`).
    """
    layout = {**layout_columns(row, expert_tp), **sharding_columns(row)}
    tp = int(row["tp"])
    return {
        **measured_row(source, row, seq_len, layout),
        **architecture(row, **(changes or {})),
        **cluster_columns(cluster, int(row["num_devices"])),
        "recompute": recompute,
        "sequence_parallel": tp > 1,
        "distributed_optimizer": True,
        "framework": "megatron_core",
        "grad_reduce_in_fp32": grad_reduce_in_fp32,
        "tp_comm_overlap": True if tp_comm_overlap and tp > 1 else None,
        "moe_dispatcher": None,
        "moe_a2a_overlap": None,
        **(moe or {}),
    }


def table(records: list[dict[str, object]]) -> pd.DataFrame:
    """The schema-ordered table of ``records``, after checking that no two share a scenario."""
    counts = Counter(str(record["scenario"]) for record in records)
    repeated = sorted(s for s, n in counts.items() if n > 1)
    if repeated:
        raise ValueError(f"rows share the scenario(s) {repeated}")
    return order_columns(records)
