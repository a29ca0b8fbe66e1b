"""Which shape model explains SimuMax's measured B200 GEMM efficiencies: tiles and waves, or
XLA's measured table?

    python benchmarks/bench_gemm_waves_b200.py PATH/b200_bf16_ceperm.json

The file is SimuMax's system config (MooreThreads/SimuMax, ``configs/system/``): its
``accelerator.op.matmul.accurate_efficient_factor`` holds the measured efficiency of each GEMM
shape on a DGX B200, ``group_matmul`` that of the grouped expert GEMMs. Prints, by the
efficiency ``autotune.simulators.gemm_waves`` predicts on 148 SMs, the measured median (the
evidence docs/reference.md 1.5 gives for leaving B200 without ``sm_count``); then, by the shape
factor of ``b200.yaml``'s ``gemm_table``, the measured and the modelled medians, for plain GEMMs
and for each grouped GEMM's per-expert shape (the evidence for that table).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics

from autotune import catalog
from autotune.simulators.gemm_table import shape_efficiency
from autotune.simulators.gemm_waves import wave_efficiency

B200_SMS = 148
BINS = ((0.0, 0.7), (0.7, 0.9), (0.9, 0.97), (0.97, 1.01))
TABLE_BINS = ((0.0, 0.5), (0.5, 0.8), (0.8, 0.95), (0.95, 1.01))
EXPERT_ROWS = ((0, 200), (200, 600), (600, 1500), (1500, 5000), (5000, 10**9))


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.3f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="SimuMax's b200_bf16_ceperm.json")
    args = parser.parse_args()
    with open(args.config) as handle:
        ops = json.load(handle)["accelerator"]["op"]
    device = catalog.load_cluster("b200").device
    level = device.matmul_efficiency
    plain = []
    for key, efficiency in ops["matmul"]["accurate_efficient_factor"].items():
        size = {k: int(v) for k, v in re.findall(r"\b([bmkn])=(\d+)", key)}
        waves = wave_efficiency(size["m"], size["n"], size["k"], B200_SMS, size["b"])
        table = shape_efficiency(device, size["m"], size["n"], size["k"], size["b"])
        plain.append((waves, table, float(efficiency)))
    print(f"{len(plain)} measured shapes")
    print("| waves predict | shapes | measured median |")
    print("|---|---|---|")
    for low, high in BINS:
        inside = [m for w, _, m in plain if low <= w < high]
        print(f"| {low:.2f}-{min(high, 1.0):.2f} | {len(inside)} | {_median(inside)} |")
    print(f"\nb200.yaml's table (x matmul_efficiency {level}), plain GEMMs")
    print("| table factor | shapes | measured median | modelled median |")
    print("|---|---|---|---|")
    for low, high in TABLE_BINS:
        inside = [(t, m) for _, t, m in plain if low <= t < high]
        measured = _median([m for _, m in inside])
        modelled = _median([level * t for t, _ in inside])
        print(f"| {low:.2f}-{min(high, 1.0):.2f} | {len(inside)} | {measured} | {modelled} |")
    grouped = []
    for key, efficiency in ops["group_matmul"]["accurate_efficient_factor"].items():
        size = dict(re.findall(r"\b(M|N|K|stage)=(\w+)", key))
        m, n, k = int(size["M"]), int(size["N"]), int(size["K"])
        rows, cols, depth = {  # one expert's GEMM in each pass
            "fwd": (m, n, k),
            "bwd_grad_act": (m, k, n),
            "bwd_grad_w": (k, n, m),
        }[size["stage"]]
        grouped.append((m, level * shape_efficiency(device, rows, cols, depth), float(efficiency)))
    print(f"\n{len(grouped)} measured grouped GEMMs, by tokens per expert")
    print("| tokens per expert | GEMMs | measured median | modelled median |")
    print("|---|---|---|---|")
    for low, high in EXPERT_ROWS:
        inside = [(p, e) for m, p, e in grouped if low < m <= high]
        measured, modelled = _median([e for _, e in inside]), _median([p for p, _ in inside])
        span = f"{low}-{high}" if high < 10**9 else f"over {low}"
        print(f"| {span} | {len(inside)} | {measured} | {modelled} |")


if __name__ == "__main__":
    main()
