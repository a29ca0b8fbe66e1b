"""Time loading and scoring a large measurement file: both must grow linearly with its rows.

    python benchmarks/bench_large_data.py                 # 50,000 rows, analytical simulator
    python benchmarks/bench_large_data.py --rows 10000    # a smaller file

Writes a valid schema-v1 CSV of ``--rows`` rows into a temporary folder: the shipped rows
repeated, each copy a distinct scenario whose global batch and times are scaled by 1 to 4 (so
that no two rows are equal and every layout stays valid). Then times
``dataset.load_measurements`` alone, and the whole benchmark (load, simulate with the
analytical simulator, score; no MLflow, no report files).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd

from autotune import dataset
from autotune.benchmark import run_benchmark
from autotune.config import BenchmarkConfig
from autotune.config import load_config
from autotune.csv_files import write_csv

_SCALED = ("global_batch_size", "step_time_s", "predicted_step_time_s")
_SCALES = 4  # copy i runs a global batch (i % 4 + 1) times the shipped one


def shipped_text() -> pd.DataFrame:
    """Every shipped row as text cells (empty where a source has no such column)."""
    files = sorted(dataset.DATA_DIR.glob("*.csv"))
    tables = [pd.read_csv(f, dtype=str, keep_default_na=False) for f in files]
    return pd.concat(tables, ignore_index=True).fillna("")


def _copy(shipped: pd.DataFrame, index: int) -> pd.DataFrame:
    """Copy ``index`` of the shipped rows: its own scenarios, batch and times scaled."""
    copy = shipped.copy()
    copy["scenario"] = copy["scenario"] + f"#copy{index}"
    factor = index % _SCALES + 1
    for column in _SCALED:
        numbers = pd.to_numeric(copy[column].replace("", None))
        scaled = (numbers * factor).astype(object)
        copy[column] = scaled.where(numbers.notna(), "").map(str)
    copy["global_batch_size"] = copy["global_batch_size"].str.removesuffix(".0")
    return copy


def write_large_file(path: Path, rows: int) -> Path:
    """A valid measurement CSV of ``rows`` rows built from the shipped ones."""
    shipped = shipped_text()
    copies = -(-rows // len(shipped))
    table = pd.concat([_copy(shipped, i) for i in range(copies)], ignore_index=True)
    return write_csv(table.iloc[:rows], path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--simulators", default="analytical", help="e.g. [analytical]")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = write_large_file(Path(folder) / "large.csv", args.rows)
        start = time.perf_counter()
        table = dataset.load_measurements(path)
        load_s = time.perf_counter() - start
        cfg = load_config(
            BenchmarkConfig,
            ["tracking.enabled=false", f"data={path}", f"simulators={args.simulators}"],
        )
        start = time.perf_counter()
        result = run_benchmark(cfg)
        total_s = time.perf_counter() - start
    scenarios = max(s["n_scenarios"] for s in result.summaries.values())
    print(f"{len(table)} rows, {scenarios} scored scenarios")
    print(f"load_measurements: {load_s:.1f} s")
    print(f"benchmark (load + simulate + score): {total_s:.1f} s")


if __name__ == "__main__":
    main()
