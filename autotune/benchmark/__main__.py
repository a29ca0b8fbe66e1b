"""``python -m autotune.benchmark``: which simulator picks layouts that are really fast?"""

from __future__ import annotations

import sys

from autotune.benchmark._report_files import REPORT_FILES
from autotune.benchmark._run import run
from autotune.cli import Command
from autotune.cli import Input
from autotune.cli import Output
from autotune.cli import calibration_input
from autotune.config import BenchmarkConfig


def benchmark_outputs(config: BenchmarkConfig) -> tuple[Output, ...]:
    """What the benchmark writes: its report folder."""
    return (Output("report_dir", config.report_dir, folder=True, files=REPORT_FILES),)


def benchmark_inputs(config: BenchmarkConfig) -> tuple[Input, ...]:
    """What the benchmark reads: the data, and the calibration it also scores."""
    return (Input("data", config.data), calibration_input(config.calibration))


COMMAND = Command(
    module="autotune.benchmark",
    config_name="benchmark",
    schema=BenchmarkConfig,
    summary=(
        "Score simulators by the regret of the layouts they pick, against measured step times\n"
        "(the shipped data or yours): each simulator ranks the measured layouts of every\n"
        "scenario (one job, several layouts); its pick's measured time over the best measured\n"
        "time, minus one, is its regret. Also Kendall tau, MAPE, memory errors, random and\n"
        "rule-of-thumb baselines.\n"
        "Reports go to report_dir and MLflow."
    ),
    options=(
        ("simulators", "simulators to score"),
        ("data", "public, a shipped source, or a schema-v1 .csv/.parquet file"),
        ("hardware", "keep only these clusters"),
        ("source", "keep only these sources"),
        ("protocols", "zero_shot, leave_one_source_out, leave_one_model_out, probe"),
        ("probes", "the K of the probe protocol (measured layouts per scenario)"),
        ("workers", "processes fitting leave one source out's and model out's calibrations"),
        ("calibration", "also score this calibration: NAME or ./PATH.yaml"),
        ("top_k", "the k of regret@k"),
        ("memory_margin", "fits: predicted peak x (1 + margin) <= memory (null: the search's)"),
        ("report_dir", "where the report files go"),
        ("simulator.<name>.<constant>", "override a simulator constant"),
        ("output", "table or json"),
        ("tracking.enabled", "record the benchmark in MLflow"),
        ("tracking.uri", "MLflow tracking URI"),
    ),
    examples=(
        "python -m autotune.benchmark",
        "python -m autotune.benchmark simulators=[analytical,hierarchical] data=vtrain",
        "python -m autotune.benchmark data=runs.csv simulator.analytical.host_op_overhead_us=15",
        "python -m autotune.benchmark 'protocols=[zero_shot,leave_one_source_out,probe]'",
        "python -m autotune.benchmark 'protocols=[zero_shot,leave_one_model_out]'",
        "python -m autotune.benchmark -m data=vtrain,simumax tracking.enabled=false",
    ),
    run=run,
    outputs=benchmark_outputs,
    inputs=benchmark_inputs,
)

main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
