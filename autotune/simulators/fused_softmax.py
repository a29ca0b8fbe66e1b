"""When Megatron's fused scale-mask-softmax kernel runs on the unfused attention path.

``FusedScaleMaskSoftmax.is_kernel_available`` (Megatron-LM since 2021-08-13, Megatron-Core
``megatron/core/fusions/fused_softmax.py``, and the Megatron-DeepSpeed forks) runs the CUDA
kernel only for some shapes; otherwise ``forward_torch_softmax`` casts the scores to fp32 and
runs PyTorch's softmax (docs/reference.md 3.3). For the causal mask every model here uses, the
kernel needs ``16 < s <= max_seq``, ``s % 4 == 0`` and ``b * np`` (micro-batch times heads per
TP rank) a multiple of 4 and of the kernel's batches per CUDA block. Two versions of the check
ran:

``megatron``
    the batches per block come from the key length (``get_batch_per_block(sq, sk, b, np)``):
    4 for every key longer than 128, so the rule is ``b * np % 4 == 0`` at training lengths.
``bigscience_fork``
    BigScience's Megatron-DeepSpeed from 9f5f5d4c (2021-10-21) to 1cb76a64 (2022-03-06), where
    BLOOM's layout search ran: its ``get_batch_per_block(b, np, sq, sk)`` took the arguments in
    another order than the call passed them, so the CUDA helper read the heads per rank as the
    key length. The batches per block then grow as the heads per rank shrink (32 for 5-8 heads,
    16 for 9-16), and e.g. 8 heads per rank at micro-batch 2 falls back to PyTorch. That file
    also took keys up to 2048 only, whatever the framework's ``fused_softmax_max_seq``.
"""

from __future__ import annotations

__all__ = ["FUSED_SOFTMAX_RULES", "fused_softmax_runs"]

FUSED_SOFTMAX_RULES = ("megatron", "bigscience_fork")

_WARP = 32  # C10_WARP_SIZE
_FORK_MAX_SEQ = 2048  # the fork's check of that window: 16 < sq <= 2048 and sk <= 2048
_THREADS_PER_BLOCK = 128


def _batches_per_block(key_length: int) -> int:
    """``get_batch_per_block`` of Megatron's ``scaled_masked_softmax.h``: the softmax rows one
    CUDA block handles for keys of this length."""
    power_of_two = 1 << max(0, key_length - 1).bit_length()
    warp = min(power_of_two, _WARP)
    batches_per_warp = 2 if power_of_two <= 128 else 1
    return (_THREADS_PER_BLOCK // warp) * batches_per_warp


def fused_softmax_runs(
    rule: str, micro_batch: int, local_heads: int, seq_len: int, max_seq: int
) -> bool:
    """Whether the fused causal softmax kernel runs for one TP rank's scores
    ``[micro_batch, local_heads, seq_len, seq_len]`` under ``rule`` (:data:`FUSED_SOFTMAX_RULES`),
    with the kernel built up to ``max_seq`` keys."""
    batches = micro_batch * local_heads
    if rule == "bigscience_fork":
        max_seq = min(max_seq, _FORK_MAX_SEQ)
    if not (16 < seq_len <= max_seq and seq_len % 4 == 0 and batches % 4 == 0):
        return False
    width = local_heads if rule == "bigscience_fork" else seq_len
    return batches % _batches_per_block(width) == 0
