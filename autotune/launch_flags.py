"""Command-line flags that launch a layout in Megatron-LM and in MindSpeed-LLM."""

from __future__ import annotations

from simulators import Layout
from simulators import ModelSpec
from simulators import TrainSpec
from simulators.layout import LAYOUT_FIELDS
from simulators.layout import field_info

__all__ = ["megatron_flags", "mindspeed_flags"]


def megatron_flags(model: ModelSpec, train: TrainSpec, layout: Layout) -> list[str]:
    """Megatron-LM ``pretrain_gpt.py`` flags (megatron/training/arguments.py)."""
    flags = []
    for name in LAYOUT_FIELDS:  # the one-to-one flags of the layout's field table
        flag, value = field_info(name).flag, getattr(layout, name)
        if flag and isinstance(value, bool):
            flags.append(flag if value else "")
        elif flag:
            flags.append(f"{flag} {value}")
    if layout.vpp > 1:
        per_chunk = model.num_layers // (layout.pp * layout.vpp)
        flags.append(f"--num-layers-per-virtual-pipeline-stage {per_chunk}")
    flags += [
        f"--global-batch-size {train.global_batch_size}",
        f"--seq-length {train.seq_len}",
        f"--{train.precision}" if train.precision != "fp32" else "",
    ]
    if layout.recompute == "selective":
        flags.append("--recompute-granularity selective")
    elif layout.recompute == "full":
        per_stage = model.num_layers // (layout.pp * layout.vpp)
        layers = layout.recompute_layers or per_stage
        method = "uniform" if layout.recompute_layers is None else "block"
        flags += [
            "--recompute-granularity full",
            f"--recompute-method {method}",
            f"--recompute-num-layers {1 if method == 'uniform' else layers}",
        ]
    flags.append("--overlap-grad-reduce")  # the simulators assume it (overlap_grad_reduce)
    return [f for f in flags if f]


def mindspeed_flags(model: ModelSpec, train: TrainSpec, layout: Layout) -> list[str]:
    """MindSpeed-LLM flags: Megatron's plus the Ascend options its example scripts use."""
    flags = ["--use-mcore-models", "--use-flash-attn", *megatron_flags(model, train, layout)]
    if layout.cp > 1:
        flags.append("--context-parallel-algo megatron_cp_algo")
    if model.is_moe:
        flags += ["--moe-grouped-gemm", "--moe-token-dispatcher-type alltoall"]
    return flags
