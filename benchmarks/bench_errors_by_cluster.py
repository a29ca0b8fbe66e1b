"""Step-time error by cluster, from the benchmark's per-row predictions.

    python -m autotune.benchmark tracking.enabled=false simulators=[analytical,hierarchical]
    python benchmarks/bench_errors_by_cluster.py [benchmark_report/predictions.csv]

The benchmark reports error per source; a change to one device
(docs/decisions/0018-b200-collective-latency-curve.md, 0019-gemm-shapes-from-xla-tables.md)
shows per cluster. Prints, per simulator and cluster, the measured rows, the median predicted /
measured ratio and the MAPE, then the same over the sources of today's hardware (dgxc,
megatron_bridge, nemo): all their rows, and those out of fit (``in_fit`` false: rows of no
source that a constant of their cluster was fit on,
docs/decisions/0033-h100-gemm-level-fitted.md).
"""

from __future__ import annotations

import argparse

import pandas as pd

MODERN_SOURCES = ("dgxc", "megatron_bridge", "nemo")


def _summary(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    ratio = rows["predicted_step_time_s"] / rows["step_time_s"]
    errors = rows.assign(ratio=ratio, ape=(ratio - 1).abs() * 100)
    table = errors.groupby(keys).agg(
        rows=("ratio", "size"), median_ratio=("ratio", "median"), mape=("ape", "mean")
    )
    return table.round({"median_ratio": 3, "mape": 1})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictions", nargs="?", default="benchmark_report/predictions.csv")
    args = parser.parse_args()
    table = pd.read_csv(args.predictions)
    ran = table[(table["status"] == "ok") & table["predicted_step_time_s"].notna()]
    print(_summary(ran, ["simulator", "cluster"]).to_string())
    modern = ran[ran["source"].isin(MODERN_SOURCES)]
    print(f"\n{', '.join(MODERN_SOURCES)} together:")
    print(_summary(modern, ["simulator"]).to_string())
    if "in_fit" in modern:
        print("\nthe same, out of fit:")
        print(_summary(modern[~modern["in_fit"]], ["simulator"]).to_string())


if __name__ == "__main__":
    main()
