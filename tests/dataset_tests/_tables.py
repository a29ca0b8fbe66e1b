"""Small schema-v1 tables written by the tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

# One valid row: GPT-22B-like, 8 A100s, tp 8.
BASE: dict[str, Any] = {
    "scenario": "s1",
    "model": "toy",
    "num_layers": 8,
    "hidden_size": 1024,
    "ffn_hidden_size": 4096,
    "num_attention_heads": 16,
    "num_kv_heads": 16,
    "vocab_size": 32000,
    "cluster": "a100",
    "num_devices": 8,
    "seq_len": 2048,
    "global_batch_size": 64,
    "dp": 1,
    "tp": 8,
    "pp": 1,
    "cp": 1,
    "ep": 1,
    "micro_batch": 1,
    "recompute": "none",
    "status": "ok",
    "step_time_s": 1.0,
}


def write(path: Path, *rows: dict[str, Any]) -> Path:
    """A CSV of ``rows`` (each a change of BASE; a value None drops the cell to empty)."""
    records = [{**BASE, **row} for row in rows]
    pd.DataFrame.from_records(records).to_csv(path, index=False)
    return path
