"""What fraction of peak do H100 and B200 BF16 GEMMs reach, shape by shape, in XLA's table?

    python benchmarks/bench_gemm_xla_table.py PATH/matmul_interpolator_data.h

The file is OpenXLA's default GEMM performance table (``xla/service/gpu/model/
matmul_interpolator_data.h``, Apache-2.0): measured FLOP/s of cuBLAS GEMMs of b x (m x k) @
(k x n), every dimension 256-4096, per GPU generation (``sm_90``: H100, ``sm_100...``: B200).
Prints each one's BF16 efficiency against the dense peak of ``conf/cluster/h100.yaml`` and
``b200.yaml``: the largest shapes, and how it falls as one dimension shrinks (m = 4096, b = 1).
docs/decisions/0019-gemm-shapes-from-xla-tables.md reads it against the matmul efficiencies of
those two files. With ``--csv-dir DIR`` it also writes each one's BF16 entries in the form the
devices' ``gemm_table`` ships them (``autotune/simulators/data/gemm_h100_xla.csv``,
``gemm_b200_xla.csv``).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from autotune import catalog
from autotune.simulators.files import write_atomically

BF16 = "bf16xbf16->bf16"
CLUSTERS = {"sm_90": "h100", "sm_100": "b200"}
SHIPPED = {"sm_90": "gemm_h100_xla.csv", "sm_100": "gemm_b200_xla.csv"}
SIZES = (256, 512, 1024, 2048, 4096)
_ENTRY = re.compile(r"entries \{\s*b: (\d+)\s*m: (\d+)\s*n: (\d+)\s*k: (\d+)\s*(.*?)\n\s*\}", re.S)
_FLOPS = re.compile(r'flops \{ key: "([^"]+)" value: (\d+) \}')


def read_table(text: str) -> dict[str, dict[tuple[int, int, int, int], float]]:
    """BF16 FLOP/s by (b, m, n, k), per architecture key of the table."""
    tables: dict[str, dict[tuple[int, int, int, int], float]] = {}
    parts = re.split(r'key: "(sm_[^"]+)"', text)
    for arch, body in zip(parts[1::2], parts[2::2], strict=True):
        table = tables.setdefault(arch, {})
        for b, m, n, k, values in _ENTRY.findall(body):
            flops = dict(_FLOPS.findall(values))
            if BF16 in flops:
                table[(int(b), int(m), int(n), int(k))] = float(flops[BF16])
    return tables


def write_csv(table: dict[tuple[int, int, int, int], float], path: Path) -> None:
    """The shipped form: ``b,m,n,k,bf16_tflops``, sorted, TFLOP/s to three decimals."""
    lines = ["b,m,n,k,bf16_tflops"]
    lines += [
        f"{b},{m},{n},{k},{flops / 1e12:.3f}" for (b, m, n, k), flops in sorted(table.items())
    ]
    write_atomically(path, "\n".join(lines) + "\n")  # the shipped table whole, or as it was
    print(f"wrote {path} ({len(lines) - 1} shapes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", help="XLA's matmul_interpolator_data.h")
    parser.add_argument("--csv-dir", help="write the shipped BF16 tables into this folder")
    args = parser.parse_args()
    with open(args.table) as handle:
        tables = read_table(handle.read())
    if args.csv_dir:
        for arch, table in tables.items():
            name = next((f for prefix, f in SHIPPED.items() if arch.startswith(prefix)), None)
            if name:
                write_csv(table, Path(args.csv_dir) / name)
    for arch, table in tables.items():
        cluster = next((c for prefix, c in CLUSTERS.items() if arch.startswith(prefix)), None)
        if cluster is None:
            continue
        device = catalog.load_cluster(cluster).device
        peak = device.peak_flops("bf16")
        print(f"{arch} ({device.name}, peak {peak / 1e12:.0f} TFLOP/s, {len(table)} shapes)")
        print(f"  matmul_efficiency in {cluster}.yaml: {device.matmul_efficiency:.2f}")
        for b in (1, 2, 4):
            print(f"  b={b} 4096^3: {table[(b, 4096, 4096, 4096)] / peak:.2f} of peak")
        print("  m=4096, b=1; rows n, columns k:")
        print("  " + "".join(f"{k:>7}" for k in ("n \\ k", *SIZES)))
        for n in SIZES:
            cells = "".join(f"{table[(1, 4096, n, k)] / peak:7.2f}" for k in SIZES)
            print(f"  {n:>7}{cells}")


if __name__ == "__main__":
    main()
