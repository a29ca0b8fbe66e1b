"""Absolute accuracy on Ascend: predicted tokens/s per NPU against the MindSpeed-LLM README.

    python benchmarks/bench_mindspeed_rows.py [simulator]     # default: analytical

One row per published configuration (dataset/data/mindspeed.csv: the README's measured
throughput with the example script's layout); no constant is fitted to these rows. Writes
benchmarks/results/mindspeed_rows_<simulator>.md and prints it.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import catalog
import dataset

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "analytical"
    simulator = catalog.load_simulator(name)
    rows = [
        "| model | NPUs | layout | seq | measured tok/s/NPU | predicted | error |",
        "|---|---|---|---|---|---|---|",
    ]
    errors = []
    for _, row in dataset.load_public(["mindspeed"]).iterrows():
        model, cluster, train, layout = dataset.row_to_specs(row)
        predicted = simulator.simulate(model, cluster, train, layout).tokens_per_s_per_device
        measured = float(row["tokens_per_s_per_device"])
        error = predicted / measured - 1
        errors.append(abs(error))
        rows.append(
            f"| {row['model']} | {row['num_devices']} | {layout.describe()} | {train.seq_len} | "
            f"{measured:.0f} | {predicted:.0f} | {100 * error:+.1f}% |"
        )
    rows.append(
        f"\nMean absolute error {100 * statistics.mean(errors):.1f}%, median "
        f"{100 * statistics.median(errors):.1f}%, over {len(errors)} rows ({name})."
    )
    table = "\n".join(rows)
    out = REPO / "benchmarks" / "results" / f"mindspeed_rows_{name}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
