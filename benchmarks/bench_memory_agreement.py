"""Do the two simulators keep the same activations? A cross-check of their memory models.

    python benchmarks/bench_memory_agreement.py            # writes benchmark_results/
    python benchmarks/bench_memory_agreement.py --refresh  # updates benchmarks/results/

The analytical simulator counts a layer's saved tensors by formula (docs/reference.md 3.3);
the hierarchical one records what a PyTorch replica of the layer saves for its backward. For
models of each family under each training stack, in bf16 and FP8, without recompute and with
selective recompute, it prints the activations of the fullest pipeline rank (the analytical
figure with its working set, which the hierarchical figure includes) and their ratio. Where
they part, one of them misses something the framework keeps
(docs/decisions/0028-megatron-deepspeed-flash-output-copy.md,
0029-selective-recompute-keeps-core-inputs.md, 0031-moe-and-fp8-saved-activations.md).
"""

from __future__ import annotations

import argparse

from _results import add_output_options
from _results import write_result

from autotune import catalog
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import TrainSpec
from autotune.simulators.hierarchical import HierarchicalSimulator

# (model, cluster, nodes, framework, precision, sequence, layout degrees)
CASES = [
    ("llama2_13b", "a100", 2, "megatron_core", "bf16", 4096, {"tp": 2, "pp": 2, "dp": 4}),
    ("llama2_13b", "a100", 2, "megatron_deepspeed", "bf16", 4096, {"tp": 2, "pp": 2, "dp": 4}),
    ("llama2_13b", "a100", 2, "megatron_lm", "bf16", 4096, {"tp": 2, "pp": 2, "dp": 4}),
    ("llama2_70b", "h100", 4, "megatron_core", "bf16", 4096, {"tp": 8, "pp": 4, "dp": 1}),
    ("llama2_70b", "h100", 4, "megatron_core", "fp8", 4096, {"tp": 8, "pp": 4, "dp": 1}),
    ("qwen2_5_7b", "ascend", 1, "mindspeed", "bf16", 4096, {"tp": 2, "pp": 1, "dp": 4}),
    ("gpt3_175b", "a100", 16, "megatron_lm", "bf16", 2048, {"tp": 8, "pp": 16, "dp": 1}),
    ("gpt3_175b", "a100", 48, "megatron_deepspeed", "bf16", 2048, {"tp": 4, "pp": 6, "dp": 16}),
    (
        "mixtral_8x7b",
        "h100",
        4,
        "megatron_core",
        "bf16",
        4096,
        {"tp": 2, "pp": 2, "dp": 8, "ep": 8},
    ),
    (
        "mixtral_8x7b",
        "h100",
        4,
        "megatron_core",
        "bf16",
        4096,
        {"tp": 1, "pp": 4, "dp": 8, "ep": 8},
    ),
    ("mixtral_8x7b", "ascend", 4, "mindspeed", "bf16", 4096, {"tp": 2, "pp": 2, "dp": 8, "ep": 8}),
    (
        "qwen3_30b_a3b",
        "h100",
        2,
        "megatron_core",
        "fp8",
        4096,
        {"tp": 1, "pp": 2, "dp": 8, "ep": 8},
    ),
    (
        "qwen3_30b_a3b",
        "h100",
        2,
        "megatron_core",
        "fp8",
        4096,
        {"tp": 1, "pp": 2, "vpp": 6, "dp": 8, "ep": 8},
    ),
    ("deepseek_v2_lite", "h100", 1, "megatron_core", "fp8", 4096, {"tp": 1, "dp": 8, "ep": 8}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_options(parser)
    args = parser.parse_args()
    analytical = catalog.load_simulator("analytical")
    hierarchical = HierarchicalSimulator.from_config(catalog.simulator_constants("hierarchical"))
    lines = [
        "| model | cluster | framework | precision | layout | recompute | analytical GiB | "
        "hierarchical GiB | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, cluster_name, nodes, framework, precision, seq_len, degrees in CASES:
        model = catalog.load_model(name)
        cluster = catalog.load_cluster(cluster_name, [f"cluster.num_nodes={nodes}"])
        train = TrainSpec(
            framework=catalog.load_framework(framework),
            seq_len=seq_len,
            global_batch_size=64,
            precision=precision,
        )
        job = Job(model=model, cluster=cluster, train=train)
        for recompute in ("none", "selective"):
            layout = Layout.resolve(cluster.num_devices, recompute=recompute, **degrees)
            fast = analytical.simulate(job, layout).memory_breakdown_gib
            fine = hierarchical.simulate(job, layout).memory_breakdown_gib
            ours = fast["activations"] + fast.get("working", 0.0)
            theirs = fine["activations"]
            lines.append(
                f"| {name} | {cluster_name} x{nodes} | {framework} | {precision} | "
                f"{layout.describe()} | "
                f"{recompute} | {ours:.2f} | {theirs:.2f} | {theirs / ours:.3f} |"
            )
    write_result(args, "memory_agreement.md", "\n".join(lines))


if __name__ == "__main__":
    main()
