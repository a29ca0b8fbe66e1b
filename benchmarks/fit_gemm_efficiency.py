"""Fit a device's GEMM efficiencies on one source's measured steps; score them on the others.

    python benchmarks/fit_gemm_efficiency.py [--cluster h100] [--fit-on dgxc]
        [--before 0.80] [--simulator analytical] [--refresh]

A GEMM microbenchmark (MAMF, XLA's table) runs one shape in a loop; in a training step the
GEMMs sustain less of the peak (docs/decisions/0033-h100-gemm-level-fitted.md). This script
fits the two numbers that say how much, on the rows of the ``--fit-on`` sources that ran on
``--cluster``:

1. ``matmul_efficiency`` on the bf16 rows: the value at which the median of predicted over
   measured step time is 1;
2. ``fp8_matmul_efficiency`` on the FP8 rows, the same way, with 1. in place (an FP8 step
   still runs attention, the output layer and the router in bf16).

Each is the root of a monotone function (a faster GEMM, a shorter step), found by bisection.
The result table scores the fitted values on every source's rows on that cluster: the fit
sources' in-sample, the others' out-of-sample; ``--before E`` scores beside them one
efficiency ``E`` for every GEMM (a microbenchmark's figure, the fit's starting point).
``conf/cluster/<cluster>.yaml`` carries the fitted values (rounded to 0.01) and ``fitted_on``;
``tests/benchmarks_tests/test_fit_gemm_efficiency.py`` checks that they are what this fit
gives. Writes
benchmark_results/gemm_efficiency_<cluster>.md (``--refresh``: benchmarks/results/).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from _results import add_output_options
from _results import write_result

from autotune import catalog
from autotune import dataset
from autotune.benchmark import markdown_table
from autotune.simulators import ClusterSpec
from autotune.simulators import Simulator
from autotune.simulators import UserError

FIELDS = {"bf16": "matmul_efficiency", "fp8": "fp8_matmul_efficiency"}
LOWEST, HIGHEST = 0.05, 1.0  # the bracket of an achievable fraction of peak
TOLERANCE = 1e-4


def measured_rows(cluster: str) -> pd.DataFrame:
    """Every public row that ran on ``cluster`` and breaks no layout rule.

    Raises:
        UserError: no public row ran on ``cluster`` (the message lists the clusters with rows).
    """
    table = dataset.load_public()
    ran = table[table["status"] == "ok"]
    table = ran[ran["cluster"] == cluster]
    if table.empty:
        clusters = ", ".join(sorted(ran["cluster"].unique()))
        raise UserError(
            f"no shipped row ran on cluster {cluster!r}; clusters with rows: {clusters}"
        )
    keep = [not layout.violations(job) for job, layout in dataset.table_specs(table)]
    return table[keep].reset_index(drop=True)


def with_efficiencies(cluster: ClusterSpec, efficiencies: dict[str, Any]) -> ClusterSpec:
    """``cluster`` with its device's GEMM efficiencies replaced."""
    return dataclasses.replace(cluster, device=dataclasses.replace(cluster.device, **efficiencies))


def predict(simulator: Simulator, table: pd.DataFrame, efficiencies: dict[str, Any]) -> np.ndarray:
    """Predicted step time of every row of ``table`` with the given efficiencies."""
    return np.array(
        [
            simulator.simulate(
                dataclasses.replace(job, cluster=with_efficiencies(job.cluster, efficiencies)),
                layout,
            ).step_time_s
            for job, layout in dataset.table_specs(table)
        ]
    )


def median_log_ratio(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.median(np.log(predicted / measured)))


def root(function: Callable[[float], float]) -> float:
    """The efficiency in [LOWEST, HIGHEST] where the decreasing ``function`` crosses 0 (an end
    of the bracket when it does not)."""
    low, high = LOWEST, HIGHEST
    if function(high) >= 0:
        return high
    if function(low) <= 0:
        return low
    while high - low > TOLERANCE:
        middle = (low + high) / 2
        low, high = (middle, high) if function(middle) > 0 else (low, middle)
    return (low + high) / 2


def fit_one(
    simulator: Simulator, rows: pd.DataFrame, field: str, fixed: dict[str, float]
) -> float:
    """The value of ``field`` at which the median predicted / measured step time of ``rows``
    is 1, the efficiencies in ``fixed`` held."""
    measured = rows["step_time_s"].to_numpy(float)

    def gap(value: float) -> float:
        return median_log_ratio(predict(simulator, rows, {**fixed, field: value}), measured)

    return root(gap)


def fit(simulator: Simulator, table: pd.DataFrame, fit_on: Sequence[str]) -> dict[str, float]:
    """The fitted efficiencies, bf16 first (FP8 rows depend on it), on the ``fit_on`` rows."""
    fitted: dict[str, float] = {}
    for precision, field in FIELDS.items():
        rows = table[table["source"].isin(fit_on) & (table["precision"] == precision)]
        if not rows.empty:
            fitted[field] = fit_one(simulator, rows, field, fitted)
    return fitted


def scores(
    table: pd.DataFrame, predicted: np.ndarray, fit_on: Sequence[str], label: str = ""
) -> pd.DataFrame:
    """Rows, median predicted / measured and MAPE by source and precision, in or out of fit
    (``label`` suffixes the two error columns)."""
    ratio = predicted / table["step_time_s"].to_numpy(float)
    frame = table[["source", "precision"]].assign(
        ratio=ratio,
        ape=100 * np.abs(ratio - 1),
        sample=np.where(table["source"].isin(fit_on), "in", "out"),
    )
    grouped = frame.groupby(["sample", "source", "precision"])
    return pd.DataFrame(
        {
            "rows": grouped.size(),
            f"median predicted / measured{label}": grouped["ratio"].median().round(3),
            f"MAPE %{label}": grouped["ape"].mean().round(1),
        }
    ).reset_index()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default="h100")
    parser.add_argument("--fit-on", nargs="+", default=["dgxc"], metavar="SOURCE")
    parser.add_argument("--simulator", default="analytical")
    parser.add_argument("--before", type=float, metavar="E", help="score one efficiency beside")
    add_output_options(parser)
    args = parser.parse_args()
    simulator = catalog.load_simulator(args.simulator)
    try:
        table = measured_rows(args.cluster)
    except UserError as error:
        parser.error(str(error))
    fitted = fit(simulator, table, args.fit_on)
    if not fitted:
        sources = ", ".join(sorted(table["source"].unique())) or "none"
        parser.error(
            f"no row of {', '.join(args.fit_on)} ran on {args.cluster}; sources with rows "
            f"there: {sources}"
        )
    shipped = catalog.load_cluster(args.cluster).device
    lines = [
        f"{args.cluster}, {args.simulator} simulator, fit on {', '.join(args.fit_on)}",
        "",
        "| constant | fitted | shipped |",
        "|---|---|---|",
        *(
            f"| `{field}` | {value:.3f} | {getattr(shipped, field)} |"
            for field, value in fitted.items()
        ),
        "",
    ]
    result = scores(table, predict(simulator, table, fitted), args.fit_on)
    if args.before is not None:
        before = {"matmul_efficiency": args.before, "fp8_matmul_efficiency": None}
        label = f" at {args.before}"
        keys = ["sample", "source", "precision", "rows"]
        result = scores(table, predict(simulator, table, before), args.fit_on, label).merge(
            result, on=keys
        )
    lines.append(markdown_table(result))
    write_result(args, f"gemm_efficiency_{args.cluster}.md", "\n".join(lines))
    if not all(
        math.isclose(v, getattr(shipped, f) or 0, abs_tol=0.006) for f, v in fitted.items()
    ):
        print(f"note: conf/cluster/{args.cluster}.yaml does not carry the fitted values")


if __name__ == "__main__":
    main()
