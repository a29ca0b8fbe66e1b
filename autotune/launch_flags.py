"""Command-line flags that launch a layout in Megatron-LM and in MindSpeed-LLM."""

from __future__ import annotations

from simulators import Layout
from simulators import ModelSpec
from simulators import TrainSpec
from simulators.layout import LAYOUT_FIELDS
from simulators.layout import field_info

__all__ = ["megatron_flags", "mindspeed_flags"]


def megatron_flags(
    model: ModelSpec, train: TrainSpec, layout: Layout, layer_list: bool = False
) -> list[str]:
    """Megatron-LM ``pretrain_gpt.py`` flags (megatron/training/arguments.py); ``layer_list``:
    spell an uneven split without virtual stages as MindSpeed's ``--num-layer-list``."""
    flags = []
    for name in LAYOUT_FIELDS:  # the one-to-one flags of the layout's field table
        flag, value = field_info(name).flag, getattr(layout, name)
        if flag and isinstance(value, bool):
            flags.append(flag if value else "")
        elif flag:
            flags.append(f"{flag} {value}")
    flags += pipeline_flags(model, train, layout, layer_list)
    flags += [
        f"--global-batch-size {train.global_batch_size}",
        f"--seq-length {train.seq_len}",
        f"--{train.compute_dtype}" if train.compute_dtype != "fp32" else "",
        "--fp8-format hybrid" if train.fp8 else "",
    ]
    if layout.recompute == "selective":
        flags.append("--recompute-granularity selective")
    elif layout.recompute == "full":
        method = "uniform" if layout.recompute_layers is None else "block"
        flags += [
            "--recompute-granularity full",
            f"--recompute-method {method}",
            f"--recompute-num-layers {layout.recompute_layers or 1}",
        ]
    framework = train.framework  # what the simulators assumed overlaps
    if framework.overlap_grad_reduce:
        flags.append("--overlap-grad-reduce")
    if framework.overlap_param_gather and layout.distributed_optimizer:
        flags.append("--overlap-param-gather")
    return [f for f in flags if f]


def pipeline_flags(
    model: ModelSpec, train: TrainSpec, layout: Layout, layer_list: bool
) -> list[str]:
    """How the layers are split over (virtual) pipeline stages (docs/reference.md 7.1).

    An even split needs only the chunk size with virtual stages. An uneven one is spelled
    out: MindSpeed's ``--num-layer-list`` (``layer_list``, no virtual stages) or Megatron's
    ``--pipeline-model-parallel-layout`` (stages vpp-major; ``E`` embedding, ``t`` layer,
    ``L`` loss), which also sets the virtual stages.
    """
    chunks = layout.chunk_layers(model, train)
    if len(set(chunks)) == 1:
        if layout.vpp > 1:
            return [f"--num-layers-per-virtual-pipeline-stage {chunks[0]}"]
        return []
    if layer_list and layout.vpp == 1:
        return ["--num-layer-list " + ",".join(map(str, chunks))]
    stages = [f"t*{count}" if count > 1 else "t" * count for count in chunks]
    stages[0], stages[-1] = f"E{stages[0]}", f"{stages[-1]}L"
    return [f'--pipeline-model-parallel-layout "{"|".join(stages)}"']


def mindspeed_flags(model: ModelSpec, train: TrainSpec, layout: Layout) -> list[str]:
    """MindSpeed-LLM flags: Megatron's plus the Ascend options its example scripts use."""
    megatron = megatron_flags(model, train, layout, layer_list=True)
    flags = ["--use-mcore-models", "--use-flash-attn", *megatron]
    if layout.cp > 1:
        flags.append("--context-parallel-algo megatron_cp_algo")
    if model.is_moe:
        flags += ["--moe-grouped-gemm", "--moe-token-dispatcher-type alltoall"]
    return flags
