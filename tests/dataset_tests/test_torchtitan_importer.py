"""torchtitan's published tables -> schema v1: layouts, filled-in job facts, skips."""

from __future__ import annotations

from collections import Counter

import pandas as pd
import pytest

from autotune import dataset
from autotune.dataset.build import RAW_DIR
from autotune.dataset.importers import torchtitan

RAW = RAW_DIR / torchtitan.RAW_FILE


@pytest.fixture(scope="module")
def kept() -> pd.DataFrame:
    return torchtitan.convert(RAW)


def test_generated_split_is_9dec370s() -> None:
    """``n // stages`` each, the remainder one layer more on the stages after the first."""
    assert torchtitan.generated_split(126, 8) == (15, 16, 16, 16, 16, 16, 16, 15)
    assert torchtitan.generated_split(126, 16) == (7, *(8,) * 14, 7)
    assert torchtitan.generated_split(32, 4) == (8, 8, 8, 8)


def test_skip_reasons_are_counted() -> None:
    reasons = Counter(r.split(" (")[0] for _, r in torchtitan.skipped(RAW))
    assert reasons == {
        "per-op selective activation checkpointing": 22,
        "context parallelism with the allgather rotate method": 6,
        "hardware not in the catalog": 4,
        "NVFP4 precision": 2,
        "status inconsistent": 2,
        "status superseded": 1,
    }


def test_layouts_are_torchtitans_fsdp2(kept: pd.DataFrame) -> None:
    assert set(kept["framework"]) == {"torchtitan"}
    assert set(kept["zero_stage"]) == {3} and kept["distributed_optimizer"].all()
    assert set(kept["dp_replicate"]) == {1}
    assert (kept["sequence_parallel"] == (kept["tp"] > 1)).all()
    degrees = kept["dp"] * kept["tp"] * kept["pp"] * kept["cp"]
    assert (degrees == kept["num_devices"]).all()


def test_405b_pipeline_rows_checked_by_hand(kept: pd.DataFrame) -> None:
    """Table 5 of the 2024-12 page: 512 H100, FSDP 8 x TP 8 x PP 8, local batch 32, 8
    micro-batches (the PP degree), 128 and 100 tokens/s/GPU; seq 8192 from the job config."""
    rows = kept[(kept["num_devices"] == 512) & (kept["seq_len"] == 8192)].set_index("vpp")
    assert len(rows) == 2 and rows["scenario"].nunique() == 1  # one job, two schedules
    interleaved, plain = rows.loc[2], rows.loc[1]
    assert interleaved["micro_batch"] == 4 and interleaved["global_batch_size"] == 256
    assert interleaved["layer_split"] == "15/16/16/16/16/16/16/15"
    assert interleaved["step_time_s"] == pytest.approx(256 * 8192 / (128 * 512))
    assert plain["step_time_s"] == pytest.approx(256 * 8192 / (100 * 512))
    assert interleaved["peak_memory_gib"] == 72.7 and plain["peak_memory_gib"] == 82.5
    assert interleaved["peak_memory_measure"] == "reserved"  # the console's max_reserved
    assert interleaved["device_memory_gib"] == 96.0 and interleaved["tp_comm_overlap"]
    assert interleaved["precision"] == "fp8"


def test_recompute_and_oom_rows(kept: pd.DataFrame) -> None:
    """Llama 2 on 64 A100: 'selective layer' is every second block whole; the first
    revision's OOM row joins the full-recompute run of its job."""
    a100 = kept[kept["cluster"] == "a100"]
    thirteen = a100[a100["num_layers"] == 40].set_index("recompute")
    assert thirteen.loc["full", "recompute_layers"] == 20
    assert pd.isna(thirteen.loc["none", "recompute_layers"])
    seventy = a100[(a100["num_layers"] == 80) & (a100["global_batch_size"] == 128)]
    assert sorted(seventy["status"]) == ["ok", "oom"] and seventy["scenario"].nunique() == 1
    oom = seventy[seventy["status"] == "oom"].iloc[0]
    assert oom["recompute_layers"] == 40 and pd.isna(oom["step_time_s"])


def test_unprinted_global_batch_is_local_times_dp(kept: pd.DataFrame) -> None:
    """Table 2's CP 1 row: local batch 1 x FSDP 8, sequence 32768 as printed."""
    row = kept[(kept["num_devices"] == 8)].iloc[0]
    assert (row["seq_len"], row["global_batch_size"], row["micro_batch"]) == (32768, 8, 1)


def test_the_shipped_rows_load_and_price() -> None:
    table = dataset.load_public(["torchtitan"])
    assert len(table) == 21
    priced = dataset.priceable_rows(table)
    assert len(priced.table) == 21 and not priced.skipped
