"""The GEMM-efficiency fit: its root finder, and that h100.yaml carries what the fit gives."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from autotune import catalog
from autotune.simulators import UserError
from tests.benchmarks_tests._scripts import BENCHMARKS
from tests.benchmarks_tests._scripts import import_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return import_script("fit_gemm_efficiency")


def test_the_root_of_a_decreasing_gap_and_the_ends_of_the_bracket(bench) -> None:  # noqa: ANN001
    assert bench.root(lambda e: 0.37 - e) == pytest.approx(0.37, abs=bench.TOLERANCE)
    assert bench.root(lambda e: 2.0 - e) == bench.HIGHEST  # too slow even at the peak
    assert bench.root(lambda e: -1.0) == bench.LOWEST


@pytest.mark.slow  # about 10 s: every dgxc H100 row, priced some 30 times
def test_h100_carries_the_efficiencies_fit_on_dgxc(bench) -> None:  # noqa: ANN001
    """Change the analytical simulator and this may fail: rerun
    ``python benchmarks/fit_gemm_efficiency.py --refresh`` and copy its values
    (docs/decisions/0033-h100-gemm-level-fitted.md), which is the protocol that the benchmark's
    fitted-constants table reports."""
    table = bench.measured_rows("h100")
    fitted = bench.fit(catalog.load_simulator("analytical"), table, ["dgxc"])
    device = catalog.load_cluster("h100").device
    assert catalog.load_cluster("h100").fitted_on == ("dgxc",)
    assert set(fitted) == {"matmul_efficiency", "fp8_matmul_efficiency"}
    for field, value in fitted.items():
        assert getattr(device, field) == pytest.approx(value, abs=0.006), field


def test_a_cluster_without_rows_is_a_user_error(bench) -> None:  # noqa: ANN001
    with pytest.raises(UserError, match="no shipped row ran on cluster 'nope'; clusters with"):
        bench.measured_rows("nope")


@pytest.mark.slow  # a process that loads every shipped row
def test_a_source_without_rows_is_one_error_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "fit_gemm_efficiency.py"), "--cluster", "b200"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(BENCHMARKS.parent)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no row of dgxc ran on b200; sources with rows there: megatron_bridge, simumax" in (
        proc.stderr
    )
    assert not (tmp_path / "benchmark_results").exists()  # nothing written
