"""The benchmark scripts write into ./benchmark_results/, never over the committed results."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"


def _results_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_results", BENCHMARKS / "_results.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    _results_module().add_output_options(parser)
    return parser.parse_args(argv)


def test_only_refresh_writes_the_committed_results() -> None:
    folder = _results_module().result_folder
    assert folder(_parse()) == Path("benchmark_results")
    assert folder(_parse("--out", "elsewhere")) == Path("elsewhere")
    assert folder(_parse("--refresh")) == BENCHMARKS / "results"
    with pytest.raises(SystemExit):
        _parse("--refresh", "--out", "elsewhere")


def test_a_script_writes_into_the_current_folder(tmp_path: Path) -> None:
    committed = BENCHMARKS / "results" / "mindspeed_rows_analytical.md"
    before = committed.stat().st_mtime_ns
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_mindspeed_rows.py")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    written = tmp_path / "benchmark_results" / "mindspeed_rows_analytical.md"
    assert proc.stdout.rstrip().endswith("wrote benchmark_results/mindspeed_rows_analytical.md")
    assert written.read_text().count("\n| ") == 25  # one row per published configuration
    assert committed.stat().st_mtime_ns == before
