"""DGX Cloud benchmarking recipes (NVIDIA/dgxc-benchmarking), "Expected Performance" tables.

Kept: rows with status ``ok`` of NeMo (Megatron-Core) runs of catalog models on H100 and GB200,
BF16 (``bf16``) or FP8 (``fp8``). The tables publish the step time (used as is) and the cluster
tokens/s (tokens/s per device = cluster tokens/s / devices); the one malformed step time cell
("8.7  5") is replaced by global batch * seq / cluster tokens/s. ``layers=N`` in ``other`` marks a
layer-truncated proxy: the catalog model cut to N layers. Skipped, and counted in NOTICE.md:
models outside the catalog (Grok-1, Llama 4, Nemotron-H, GPT 5B/175B of Paxml), FSDP rows
(MaxText), and layouts that contradict their own cells. The JAX runs (MaxText, Paxml) all fall
under the first two. A row's expert TP (``etp``) is the layout's; empty, it is TP.

Read in the recipe of the row's own commit where the README is silent (NeMo 1.0 Hydra configs of
releases v24.11.1 and v25.02): the sequence length, which those tables omit (each README's MFU
notes state it, and tokens/s = global batch * seq / step time checks it), Nemotron4-340B's
selective recompute, Llama 3.1 405B's 16 KV groups, and the GPT-2 BPE tokenizer of Llama 3.1
405B and GPT-3 175B (vocabulary 50257 padded to a multiple of 128 * tp), and of every release:
the gradient dtype (bf16 but one config, ``_FP32_GRADS``) and TP communication overlap (on
wherever tp > 1). Assumed (NOTICE.md):
recompute none elsewhere, sequence parallelism where tp > 1, the distributed optimizer, 64 GPUs
of each NVL72 rack for jobs of more than 72 GB200 GPUs. Each row is its own scenario.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from autotune.dataset.importers._common import padded_vocab
from autotune.dataset.importers._tables import layout_reason
from autotune.dataset.importers._tables import megatron_core_row
from autotune.dataset.importers._tables import read_rows
from autotune.dataset.importers._tables import row_label
from autotune.dataset.importers._tables import skip_reason
from autotune.dataset.importers._tables import table

__all__ = ["RAW_FILE", "SOURCE", "convert", "skipped"]

SOURCE = "dgxc"
RAW_FILE = "dgxc_benchmarking.csv"
_CLUSTERS = {"h100": "h100", "gb200": "gb200"}
_GPT2_VOCAB = 50257  # GPT-2 BPE vocabulary (docs/reference.md 2.1, GPT-3 175B)
_VOCAB_MULTIPLE = 128  # the configs' make_vocab_size_divisible_by (times tp, as Megatron pads)
# Published tokens/s against global batch * seq / published step time (rounded step times).
_THROUGHPUT_TOLERANCE = 0.01

Row = Mapping[str, str]
# Every FSDP row of these tables is a MaxText run (JAX, FSDP + DP), not a Megatron-Core one.
_FSDP_JAX = "FSDP on (MaxText on JAX: not a Megatron-Core run)"


@dataclass(frozen=True, slots=True)
class _Recipe:
    """What a README's Hydra config (same commit) states beyond the README's table."""

    seq_len: int
    recompute: str = "none"
    kv_heads: int = 0  # 0: the catalog's
    gpt2_tokenizer: bool = False


# README -> its config: llama3.1/llama3.1_{8b,70b,405b}.yaml, nemo_megatron/gpt3_175b_hydra.yaml,
# nemotron/nemotron4-{15b,340b}-synth.yaml at 35a9aecc (v24.11.1) and 8f5cbb3 (v25.02), which
# agree on these keys (encoder_seq_length, activations_checkpoint_granularity,
# num_query_groups, tokenizer.type); the sequence length also in the README's MFU notes.
_RECIPES = {
    "llama3.1/README_8b.md": _Recipe(seq_len=8192),
    "llama3.1/README_70b.md": _Recipe(seq_len=8192),
    "llama3.1/README_405b.md": _Recipe(seq_len=8192, kv_heads=16, gpt2_tokenizer=True),
    "nemo_megatron/README_175b.md": _Recipe(seq_len=2048, gpt2_tokenizer=True),
    "nemotron/README_15b.md": _Recipe(seq_len=4096),
    "nemotron/README_340b.md": _Recipe(seq_len=4096, recompute="selective"),
}


# The one README whose config reduces gradients in fp32: Nemotron4-15B of v25.02 runs
# mcore_distributed_optim without grad_sync_dtype, whose NeMo default is fp32. Every other config
# syncs bf16 gradients (NeMo 1 grad_sync_dtype: bf16; NeMo 2 performance mode
# grad_reduce_in_fp32 = False). Sources: NOTICE.md.
_FP32_GRADS = {("dgxc-benchmarking v25.02", "nemotron/README_15b.md")}


def _readme(row: Row) -> str:
    """The README path of ``source_ref`` (``owner/repo@commit:path (table ...)``)."""
    return row["source_ref"].split(":", 1)[1].split(" ", 1)[0]


def _seq_len(row: Row) -> int:
    """The row's sequence length, or its README config's, checked against the throughput."""
    seq_len = int(row["seq_len"]) if row["seq_len"] else _RECIPES[_readme(row)].seq_len
    if row["step_time_s"] and row["tokens_per_s_total"]:
        tokens = int(row["global_batch"]) * seq_len / float(row["step_time_s"])
        published = float(row["tokens_per_s_total"])
        if abs(tokens / published - 1) > _THROUGHPUT_TOLERANCE:
            raise ValueError(f"{row_label(row)}: tokens/s {published} != GBS * {seq_len} / step")
    return seq_len


def _reason(row: Row) -> str:
    reason = skip_reason(row, _CLUSTERS, fsdp=_FSDP_JAX)
    if reason:
        return reason
    return layout_reason(row, _CLUSTERS[row["hardware"]])


def skipped(path: Path) -> list[tuple[str, str]]:
    """``(row, reason)`` of every raw row that :func:`convert` leaves out."""
    return [(row_label(r), _reason(r)) for r in read_rows(path) if _reason(r)]


def _record(row: Row) -> dict[str, object]:
    recipe = _RECIPES.get(_readme(row), _Recipe(seq_len=0))
    changes: dict[str, object] = {}
    if recipe.kv_heads:
        changes["num_kv_heads"] = recipe.kv_heads
    if recipe.gpt2_tokenizer:
        changes["vocab_size"] = padded_vocab(_GPT2_VOCAB, int(row["tp"]), _VOCAB_MULTIPLE)
    cluster = _CLUSTERS[row["hardware"]]
    fp32_grads = (row["release"], _readme(row)) in _FP32_GRADS
    return megatron_core_row(
        SOURCE,
        row,
        cluster,
        _seq_len(row),
        recipe.recompute,
        grad_reduce_in_fp32=fp32_grads,
        changes=changes,
    )


def convert(path: Path) -> pd.DataFrame:
    """Schema-v1 rows of the kept dgxc-benchmarking measurements."""
    records = [_record(r) for r in read_rows(path) if not _reason(r)]
    return table(records)
