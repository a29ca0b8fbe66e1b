"""What FP8 saves, predicted against measured: where the modern rows' missing time is.

    python benchmarks/bench_fp8_savings.py [--simulator analytical] [--refresh]

The published tables of today's hardware (dgxc, megatron_bridge, nemo) measure many jobs twice,
in bf16 and in FP8, with the same layout. FP8 speeds up only the linear layers' GEMMs
(docs/reference.md 7.6), so the pairs tell apart two kinds of error: a simulator that prices
the GEMMs too fast predicts FP8 saving less than it does, and time it misses outside the GEMMs
is missed alike in both precisions. For each cluster: the pairs, the median of predicted over
measured savings (step time bf16 minus FP8; 1: the GEMMs' share priced right), and the median
missing time (measured minus predicted) as a share of the measured bf16 step, in bf16 and in
FP8. Writes benchmark_results/fp8_savings_<simulator>.md (``--refresh``: benchmarks/results/).
"""

from __future__ import annotations

import argparse

import pandas as pd
from _results import add_output_options
from _results import write_result

from autotune import catalog
from autotune import dataset
from autotune.benchmark import markdown_table

SOURCES = ("dgxc", "megatron_bridge", "nemo")
# What makes two rows the same job but for the precision.
JOB = (
    "source",
    "model",
    "cluster",
    "num_devices",
    "seq_len",
    "global_batch_size",
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "vpp",
    "micro_batch",
    "recompute",
)


def predicted(table: pd.DataFrame, simulator_name: str) -> pd.Series:
    """Predicted step time of every row (NaN where its layout breaks a rule)."""
    simulator = catalog.load_simulator(simulator_name)
    times = []
    for job, layout in dataset.table_specs(table):
        if layout.violations(job):
            times.append(float("nan"))
            continue
        times.append(simulator.simulate(job, layout).step_time_s)
    return pd.Series(times, index=table.index)


def pairs(table: pd.DataFrame) -> pd.DataFrame:
    """The bf16 and FP8 rows of the same jobs, side by side (suffixes _bf16 and _fp8)."""
    keys = [k for k in JOB if k in table.columns]
    by_precision = {p: table[table["precision"] == p] for p in ("bf16", "fp8")}
    return by_precision["bf16"].merge(by_precision["fp8"], on=keys, suffixes=("_bf16", "_fp8"))


def summary(matched: pd.DataFrame) -> pd.DataFrame:
    measured = matched["step_time_s_bf16"] - matched["step_time_s_fp8"]
    priced = matched["predicted_bf16"] - matched["predicted_fp8"]
    base = matched["step_time_s_bf16"]
    rows = matched.assign(
        savings=priced / measured,
        missing_bf16=(matched["step_time_s_bf16"] - matched["predicted_bf16"]) / base,
        missing_fp8=(matched["step_time_s_fp8"] - matched["predicted_fp8"]) / base,
    )
    grouped = rows.groupby("cluster")
    return pd.DataFrame(
        {
            "pairs": grouped.size(),
            "predicted / measured FP8 savings": grouped["savings"].median(),
            "p25": grouped["savings"].quantile(0.25),
            "p75": grouped["savings"].quantile(0.75),
            "missing, bf16 (share of bf16 step)": grouped["missing_bf16"].median(),
            "missing, FP8 (same base)": grouped["missing_fp8"].median(),
        }
    ).round(3)


def markdown(frame: pd.DataFrame) -> str:
    """``frame`` as a Markdown table, its index first."""
    return markdown_table(frame.reset_index())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulator", default="analytical")
    add_output_options(parser)
    args = parser.parse_args()
    table = dataset.load_public(list(SOURCES))
    table = table[table["status"] == "ok"].copy()
    table["predicted"] = predicted(table, args.simulator)
    matched = pairs(table.dropna(subset=["predicted"]))
    text = markdown(summary(matched))
    write_result(args, f"fp8_savings_{args.simulator}.md", f"{args.simulator} simulator\n\n{text}")


if __name__ == "__main__":
    main()
