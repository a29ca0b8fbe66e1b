"""Does the tile and wave model explain SimuMax's measured B200 GEMM efficiencies?

    python benchmarks/bench_gemm_waves_b200.py PATH/b200_bf16_ceperm.json

The file is SimuMax's system config (MooreThreads/SimuMax, ``configs/system/``): its
``accelerator.op.matmul.accurate_efficient_factor`` holds the measured efficiency of each GEMM
shape on a DGX B200. Prints, by the efficiency ``simulators.gemm_waves`` predicts on 148 SMs,
the measured median: the evidence docs/reference.md 1.5 gives for leaving B200 without
``sm_count``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics

from simulators.gemm_waves import wave_efficiency

B200_SMS = 148
BINS = ((0.0, 0.7), (0.7, 0.9), (0.9, 0.97), (0.97, 1.01))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="SimuMax's b200_bf16_ceperm.json")
    args = parser.parse_args()
    with open(args.config) as handle:
        measured = json.load(handle)["accelerator"]["op"]["matmul"]["accurate_efficient_factor"]
    points = []
    for key, efficiency in measured.items():
        size = {k: int(v) for k, v in re.findall(r"\b([bmkn])=(\d+)", key)}
        predicted = wave_efficiency(size["m"], size["n"], size["k"], B200_SMS, size["b"])
        points.append((predicted, float(efficiency)))
    print(f"{len(points)} measured shapes")
    print("| predicted | shapes | measured median |")
    print("|---|---|---|")
    for low, high in BINS:
        inside = [m for p, m in points if low <= p < high]
        median = f"{statistics.median(inside):.2f}" if inside else "-"
        print(f"| {low:.2f}-{min(high, 1.0):.2f} | {len(inside)} | {median} |")


if __name__ == "__main__":
    main()
