"""torchtitan's published performance tables (pytorch/torchtitan, 2024-04 to 2026-08).

Kept: rows with status ``ok`` (and the printed ``OOM`` rows, as out-of-memory outcomes) of
catalog models on catalog hardware whose layout the simulators price. The layout is
torchtitan's (docs/torchtitan.md 1, 3; docs/decisions/0051): FSDP2 is ZeRO-3 (``zero_stage``
3 with the sharded optimizer) over ``dp_shard x cp``, so the layout's ``dp`` is
``dp_shard x dp_replicate`` (torchtitan's batch mesh) and ``Layout.dp_shard`` gives the shard
group; TP always with sequence parallelism; ``vpp`` 2 for Interleaved1F1B (two stages per rank
by default); under PP the micro-batch is the local batch over the micro-batch count (the PP
degree at 9dec370) and the layers split as that commit's ``generate_split_points`` splits them.
Recompute ``full`` is torchtitan's ``full``; "selective layer" (``selective_ac_option`` "2",
the default the notes cite) is ``full`` with ``recompute_layers`` half of a stage's layers.
Step time = global batch * seq / (tokens/s/GPU * devices). A sequence length or a global batch
the table does not print comes from the facts in the row's notes (the job config's
``seq_len = N`` of the row's commit; no gradient accumulation: local batch x dp). Peaks: the
console's max reserved memory (``peak_memory_measure`` reserved: the caching allocator's peak,
NOTICE.md); the 94/96 GB H100 variants as a device-memory override of the catalog's H100.

Skipped, and counted in NOTICE.md: statuses superseded and inconsistent, per-op selective
activation checkpointing (not priced, decision 0051), context parallelism with the
``allgather`` rotate method (9dec370's default, not modelled), hardware or models outside the
catalog, NVFP4. Rows of one job (model, devices, sequence, global batch, precision, async TP,
release) that differ only in their layout share a scenario: they count for regret.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from autotune import catalog
from autotune.dataset.importers._common import knobs
from autotune.dataset.importers._common import order_columns
from autotune.dataset.importers._tables import architecture
from autotune.dataset.importers._tables import precision_of
from autotune.dataset.importers._tables import read_rows
from autotune.dataset.importers._tables import row_label
from autotune.simulators.layout import LAYOUT_FIELDS

__all__ = ["RAW_FILE", "SOURCE", "convert", "skipped"]

SOURCE = "torchtitan"
RAW_FILE = "torchtitan_benchmarks.csv"
_CLUSTERS = {"a100": "a100", "h100": "h100", "h200": "h200", "b200": "b200", "gb200": "gb200"}
# The raw statuses: ok, infeasible (printed OOM: an out-of-memory outcome), the others skipped.
_STATUS = {"ok": "ok", "infeasible": "oom"}
_NOT_OK = "status {} (not a usable measurement of the stated layout)"
_HARDWARE = "hardware not in the catalog (conf/cluster/)"
_MODEL = "model not in the catalog (conf/model/)"
_NVFP4 = "NVFP4 precision (not modelled)"
_OP_SAC = "per-op selective activation checkpointing (not priced, docs/decisions/0051)"
_CP_ALLGATHER = (
    "context parallelism with the allgather rotate method (9dec370's default, not modelled)"
)
_NO_SEQ = "sequence length neither printed nor in the notes"
# "selective layer" with selective_ac_option "2" (the default the notes cite): every second
# block checkpointed whole (docs/torchtitan.md 5)
_LAYER_SAC_EVERY = 2
# The job config's sequence length as the notes quote it ("seq_len = 8192")
_SEQ_NOTE = re.compile(r"seq_len = (\d+)")
# The H100 variant's memory as the hardware detail prints it ("H100 96GB"), in the catalog's
# convention of the data sheet's GB (conf/cluster/h100.yaml: 80 GB -> memory_gib 80.0)
_H100_MEMORY = re.compile(r"H100 (\d+)GB")
_ON = "on"

Row = Mapping[str, str]


def _other(row: Row) -> dict[str, str]:
    return knobs(row["other"])


def _seq_len(row: Row) -> int | None:
    """The printed sequence length, else the one of the job config the notes quote."""
    if row["seq_len"]:
        return int(row["seq_len"])
    found = set(_SEQ_NOTE.findall(row["notes"]))
    return int(found.pop()) if len(found) == 1 else None


def _reason(row: Row) -> str:
    """Why a raw row is left out ("" when it is kept)."""
    if row["status"] not in _STATUS:
        return _NOT_OK.format(row["status"])
    if not precision_of(row["precision"]):
        return _NVFP4
    if row["hardware"] not in _CLUSTERS:
        return _HARDWARE
    if row["model_key"] not in catalog.options("model"):
        return _MODEL
    if row["recompute"] in ("selective op", "selective"):  # "selective" tables: per-op SAC
        return _OP_SAC
    if int(row["cp"] or 1) > 1:
        return _CP_ALLGATHER
    if _seq_len(row) is None:
        return _NO_SEQ
    return ""


def skipped(path: Path) -> list[tuple[str, str]]:
    """``(row, reason)`` of every raw row that :func:`convert` leaves out."""
    return [(row_label(r), _reason(r)) for r in read_rows(path) if _reason(r)]


def generated_split(num_layers: int, stages: int) -> tuple[int, ...]:
    """Layers per (virtual) stage as torchtitan's ``generate_split_points`` (9dec370,
    ``torchtitan/parallelisms/pipelining_utils.py``) splits them: ``num_layers // stages``
    each, the remainder one more layer each on the stages after the first."""
    base, extra = divmod(num_layers, stages)
    return tuple(base + (0 < i <= extra) for i in range(stages))


def _layout(row: Row, num_layers: int) -> dict[str, object]:
    other = _other(row)
    tp, pp, cp = int(row["tp"]), int(row["pp"]), int(row["cp"] or 1)
    replicas, dp = int(other["dp_replicate"]), int(other["dp_shard"]) * int(other["dp_replicate"])
    if dp * tp * pp * cp != int(row["num_devices"]):
        raise ValueError(f"{row_label(row)}: degrees do not multiply to the devices")
    local = int(other["local_batch_size"])
    vpp = 2 if other.get("pp_schedule") == "Interleaved1F1B" else 1
    # micro-batches under PP: 9dec370's pipeline_parallel_microbatches default, the PP degree
    micro_batch, rest = divmod(local, pp) if pp > 1 else (local, 0)
    if rest:
        raise ValueError(f"{row_label(row)}: local batch {local} over {pp} micro-batches")
    layout: dict[str, object] = {
        "dp": dp,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "ep": 1,
        "vpp": vpp,
        "micro_batch": micro_batch,
        "sequence_parallel": tp > 1,
        "distributed_optimizer": True,
        "zero_stage": 3,
        "dp_replicate": replicas,
    }
    if pp > 1:  # rank totals of the virtual stages dealt round-robin (loop style)
        chunks = generated_split(num_layers, pp * vpp)
        layout["layer_split"] = "/".join(
            str(sum(chunks[rank + c * pp] for c in range(vpp))) for rank in range(pp)
        )
    recompute = row["recompute"]
    layout["recompute"] = "full" if recompute == "selective layer" else recompute
    if recompute == "selective layer":
        layout["recompute_layers"] = num_layers // pp // _LAYER_SAC_EVERY
    return layout


def _global_batch(row: Row) -> int:
    """The printed global batch, else local batch x dp (no gradient accumulation: the notes)."""
    if row["global_batch"]:
        return int(row["global_batch"])
    other = _other(row)
    return int(other["local_batch_size"]) * int(other["dp_shard"]) * int(other["dp_replicate"])


def _memory(row: Row) -> dict[str, object]:
    """The peak in GiB where printed in GiB (the console's max reserved, the caching
    allocator's peak: NOTICE.md), and the device override."""
    other, found = _other(row), {}
    if other.get("memory") and other.get("memory_unit") == "GiB":
        found = {"peak_memory_gib": float(other["memory"]), "peak_memory_measure": "reserved"}
    variant = _H100_MEMORY.search(other.get("hardware_detail", ""))
    if row["hardware"] == "h100" and variant:
        found["device_memory_gib"] = float(variant.group(1))
    return found


def _scenario(row: Row, seq_len: int, global_batch: int, async_tp: bool) -> str:
    """One job: rows of the same job that differ only in layout share it (regret); the catalog
    model names it (the first revision's table calls Llama 2 70B "LLaMa 70B")."""
    cells = (row["model_key"], row["hardware"], row["num_devices"], row["precision"])
    tail = (str(seq_len), str(global_batch), f"async_tp={_ON if async_tp else 'off'}")
    return "|".join((SOURCE, *cells, *tail, row["release"]))


def _record(row: Row) -> dict[str, object]:
    model = architecture(row)
    seq_len, batch = _seq_len(row), _global_batch(row)
    assert seq_len is not None  # _reason checked it
    async_tp = _other(row).get("async_tp") == _ON
    status = _STATUS[row["status"]]
    devices = int(row["num_devices"])
    measured: dict[str, object] = {"status": status}
    if status == "ok":
        per_device = float(row["tokens_per_s_per_gpu"])
        measured["step_time_s"] = batch * seq_len / (per_device * devices)
        measured["tokens_per_s_per_device"] = per_device
    notes = (f"precision as published: {row['precision']}", row["release"], row["other"])
    return {
        "scenario": _scenario(row, seq_len, batch, async_tp),
        "model": row["model"],
        **model,
        "cluster": _CLUSTERS[row["hardware"]],
        "num_devices": devices,
        "seq_len": seq_len,
        "global_batch_size": batch,
        **_layout(row, int(str(model["num_layers"]))),
        "framework": "torchtitan",
        "precision": precision_of(row["precision"]),
        "tp_comm_overlap": True if async_tp else None,
        **measured,
        **_memory(row),
        "source": SOURCE,
        "source_ref": row["source_ref"],
        "license": row["license"],
        "notes": "; ".join(filter(None, notes)),
    }


def convert(path: Path) -> pd.DataFrame:
    """Schema-v1 rows of the kept torchtitan measurements."""
    records = [_record(r) for r in read_rows(path) if not _reason(r)]
    keys = Counter((r["scenario"], *(r.get(f) for f in LAYOUT_FIELDS)) for r in records)
    repeated = sorted(str(k) for k, n in keys.items() if n > 1)
    if repeated:
        raise ValueError(f"rows repeat a layout of one scenario: {repeated}")
    return order_columns(records)
