"""The FP8-savings benchmark pairs a job's bf16 and FP8 rows and splits their error."""

from __future__ import annotations

from types import ModuleType

import pandas as pd
import pytest

from tests.benchmarks_tests._scripts import import_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return import_script("bench_fp8_savings")


def _row(precision: str, measured: float, predicted: float, tp: int = 4) -> dict[str, object]:
    job = {key: 1 for key in ("num_devices", "seq_len", "global_batch_size", "dp", "pp", "cp")}
    job |= {"ep": 1, "vpp": 1, "micro_batch": 1, "recompute": "none", "tp": tp}
    return {
        "source": "dgxc",
        "model": "m",
        "cluster": "h100",
        **job,
        "precision": precision,
        "step_time_s": measured,
        "predicted": predicted,
    }


def test_savings_and_missing_time_by_hand(bench) -> None:  # noqa: ANN001
    """Two jobs: one missing 2 s in both precisions with FP8's saving priced right (1.0), one
    whose GEMMs are priced twice too slow (FP8 saves twice what it measures: 2.0); a bf16 row
    without an FP8 twin (another TP) pairs with nothing."""
    table = pd.DataFrame(
        [
            _row("bf16", 10.0, 8.0),
            _row("fp8", 7.0, 5.0),
            _row("bf16", 20.0, 20.0, tp=8),
            _row("fp8", 18.0, 16.0, tp=8),
            _row("bf16", 5.0, 4.0, tp=2),
        ]
    )
    matched = bench.pairs(table)
    assert len(matched) == 2
    summary = bench.summary(matched).loc["h100"]
    assert summary["pairs"] == 2
    assert summary["predicted / measured FP8 savings"] == pytest.approx(1.5)
    assert summary["missing, bf16 (share of bf16 step)"] == pytest.approx(0.1)  # 0.2 and 0
    assert summary["missing, FP8 (same base)"] == pytest.approx(0.15)  # 0.2 and 0.1
    assert "| h100 | 2 | 1.5 |" in bench.markdown(bench.summary(matched))
