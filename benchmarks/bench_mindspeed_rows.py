"""Absolute accuracy on Ascend: predicted tokens/s per NPU against the MindSpeed-LLM README.

    python benchmarks/bench_mindspeed_rows.py [simulator]     # default: analytical
    python benchmarks/bench_mindspeed_rows.py hierarchical --refresh

One row per published configuration (autotune/dataset/data/mindspeed.csv: the README's measured
throughput with the example script's layout); no constant is fitted to these rows. Prints a
Markdown table and writes it to benchmark_results/mindspeed_rows_<simulator>.md (``--out DIR``
elsewhere; ``--refresh`` overwrites the committed one in benchmarks/results/).
"""

from __future__ import annotations

import argparse
import statistics

from _results import add_output_options
from _results import write_result

from autotune import catalog
from autotune import dataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("simulator", nargs="?", default="analytical")
    add_output_options(parser)
    args = parser.parse_args()
    name = args.simulator
    simulator = catalog.load_simulator(name)
    rows = [
        "| model | NPUs | layout | seq | measured tok/s/NPU | predicted | error |",
        "|---|---|---|---|---|---|---|",
    ]
    errors = []
    for _, row in dataset.load_public(["mindspeed"]).iterrows():
        job, layout = dataset.row_to_specs(row)
        predicted = simulator.simulate(job, layout).tokens_per_s_per_device
        measured = float(row["tokens_per_s_per_device"])
        error = predicted / measured - 1
        errors.append(abs(error))
        rows.append(
            f"| {row['model']} | {row['num_devices']} | {layout.describe()} | "
            f"{job.train.seq_len} | {measured:.0f} | {predicted:.0f} | {100 * error:+.1f}% |"
        )
    rows.append(
        f"\nMean absolute error {100 * statistics.mean(errors):.1f}%, median "
        f"{100 * statistics.median(errors):.1f}%, over {len(errors)} rows ({name})."
    )
    write_result(args, f"mindspeed_rows_{name}.md", "\n".join(rows))


if __name__ == "__main__":
    main()
