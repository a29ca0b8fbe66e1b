"""Megatron-LM's data-parallel launch options: the overlaps of the gradient reduction and the
parameter gather (docs/reference.md 7.2), and sharded data parallelism (7.9)."""

from __future__ import annotations

from autotune.launch._script import Flag
from autotune.launch._script import Launch
from autotune.launch._script import flag
from autotune.simulators.layout import ZERO_GRADS

__all__ = ["FSDP_STRATEGIES", "overlap_flags", "sharding_flags"]

# Megatron-FSDP's names of the ZeRO stages it runs (--data-parallel-sharding-strategy).
FSDP_STRATEGIES = {2: "optim_grads", 3: "optim_grads_params"}


def sharding_flags(launch: Launch) -> list[Flag]:
    """ZeRO-2 and -3 as Megatron-FSDP (``--use-megatron-fsdp`` with its sharding strategy and
    the ``fsdp_dtensor`` checkpoint format it asserts; every known release, core_v0.14.0 on),
    hybrid sharding as ``--num-distributed-optimizer-instances`` (the partial distributed
    optimizer, or Megatron-FSDP's HSDP); docs/reference.md 7.9. ``--use-distributed-
    optimizer``, which Megatron-FSDP needs, is the layout's own flag."""
    layout, flags = launch.layout, []
    if layout.sharding >= ZERO_GRADS:
        flags += [
            flag("--use-megatron-fsdp"),
            flag("--data-parallel-sharding-strategy", FSDP_STRATEGIES[layout.sharding]),
            flag("--ckpt-format", "fsdp_dtensor"),
        ]
    if layout.dp_replicate > 1:
        flags.append(flag("--num-distributed-optimizer-instances", layout.dp_replicate))
    return flags


def overlap_flags(launch: Launch) -> list[Flag]:
    """Bucketed gradient reduction and the parameter all-gather in the next forward, exactly
    when the run has them (docs/reference.md 7.2); the all-gather overlap needs the
    distributed optimizer and the gradient overlap (arguments.py validate_args). Interleaved
    sends run beside the next chunk by default; a stack that blocks on them turns that off
    (docs/reference.md 7.3)."""
    train, flags = launch.job.train, []
    if train.overlaps_grad_reduce:
        flags.append(flag("--overlap-grad-reduce"))
        if train.overlaps_param_gather and launch.layout.distributed_optimizer:
            flags.append(flag("--overlap-param-gather"))
    if launch.layout.vpp > 1 and not train.framework.overlap_p2p_comm:
        flags.append(flag("--no-overlap-p2p-communication"))
    return flags
