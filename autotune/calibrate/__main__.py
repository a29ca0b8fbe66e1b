"""``python -m autotune.calibrate``: fit a simulator's factors to measured runs."""

from __future__ import annotations

import sys

from autotune.calibrate._command import run_calibrate
from autotune.cli import Command
from autotune.cli import Input
from autotune.cli import Output
from autotune.config import CalibrateConfig


def calibrate_outputs(config: CalibrateConfig) -> tuple[Output, ...]:
    """What calibrate writes: the calibration (``out``, else by its name)."""
    return (Output("out", str(config.output_path())),)


def calibrate_inputs(config: CalibrateConfig) -> tuple[Input, ...]:
    """What calibrate reads and must not write over: the data and the simulator's cost table
    (the calibration it starts from it may replace: a refit in place)."""
    op_costs = config.simulator.get("op_costs")
    return (Input("data", config.data), Input("simulator.op_costs", op_costs))


COMMAND = Command(
    module="autotune.calibrate",
    config_name="calibrate",
    schema=CalibrateConfig,
    summary=(
        "Fit a few interpretable factors of a simulator (matmul and memory-bound efficiency,\n"
        "collective efficiency inside and between nodes, TP and DP overlap, host overhead per\n"
        "operator, memory factor and constant) to measured runs of one cluster and framework,\n"
        "with priors toward the uncalibrated constants and bootstrap intervals. Writes\n"
        "./calibrations/<name>.yaml; calibration=<name> applies it in the search, simulate\n"
        "and the benchmark."
    ),
    options=(
        ("data", "a schema-v1 .csv/.parquet file, a shipped source, or public (required)"),
        ("name", "the calibration's name (required)"),
        ("simulator", "the simulator that prices a layout (Simulators: below)"),
        ("out", "write the calibration here (unset: ./calibrations/<name>.yaml)"),
        ("rows.cluster", "the cluster every row must be on"),
        ("rows.framework", "the framework every row must run"),
        ("rows.model", "the model every row must be of"),
        ("rows.source", "keep only these sources"),
        ("rows.hardware", "keep only the rows on these clusters"),
        ("rows.exclude_model", "leave out the rows of these models (history of other jobs)"),
        ("calibration", "start from this calibration: NAME or ./PATH.yaml"),
        ("calibrate.time_noise", "log step-time error a row keeps"),
        ("output", "table or json"),
    ),
    examples=(
        "python -m autotune.calibrate data=runs.csv name=my_cluster",
        "python -m autotune.calibrate data=vtrain name=vtrain_a100 simulator=analytical",
        "python -m autotune.calibrate data=runs.csv name=mine out=/tmp/mine.yaml output=json",
        "python -m autotune.calibrate data=dgxc name=h100_history rows.hardware=h100 "
        "'rows.exclude_model=Llama 3.1 70b'",
    ),
    run=run_calibrate,
    outputs=calibrate_outputs,
    inputs=calibrate_inputs,
)

main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
