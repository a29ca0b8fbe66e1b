"""A Llama layer as each stack writes it (docs/reference.md 3.3, docs/decisions/0067): RoPE and
SwiGLU as PyTorch operators or fused kernels, grouped KV heads repeated or not, the flash path's
input copies. Every figure below is worked out by hand for Llama-3-8B (h 4096, 32 query heads
and 8 KV heads of 128, FFN 14336) at TP 2 and 2,048 tokens of bf16."""

from __future__ import annotations

import pytest
import torch

from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators.analytical.layer import _elementwise_bytes_per_token
from autotune.simulators.analytical.layer import layer_bytes
from autotune.simulators.hierarchical.compile import compile_layer
from autotune.simulators.hierarchical.graph import layer_shapes
from autotune.simulators.hierarchical.modules import _rope
from autotune.simulators.hierarchical.record import Recorder
from tests.simulators_tests._specs import analytical
from tests.simulators_tests._specs import ascend
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model

TOKENS = 2048
Q = 4096 // 2  # query width per TP rank
KV = 2 * 1024 // 2  # K and V widths per TP rank: 4 of the 8 KV heads each
F = 14336 // 2  # FFN width per TP rank


def _job(framework: str) -> Job:
    train = make_train(framework, seq_len=TOKENS, global_batch_size=8)
    return Job(model=model("llama3_8b"), cluster=ascend(1), train=train)


LAYOUT = Layout(dp=4, tp=2, sequence_parallel=True)


def _saved(framework: str) -> tuple[float, float]:
    """(analytical, hierarchical) bytes one layer keeps for its backward, no recompute."""
    job = _job(framework)
    analytical_bytes = layer_bytes(job, False, LAYOUT, analytical().constants)[0]
    recorded = compile_layer(layer_shapes(job, LAYOUT)["dense"]).saved_bytes
    return analytical_bytes, recorded


def test_megatron_deepspeed_keeps_silu_repeated_kv_and_the_output_copy() -> None:
    """Against Megatron-Core: SwiGLU's SiLU output (F), K and V at the query heads (2 Q
    instead of KV) and the flash output's rearranged copy (Q), 2 bytes each per token; the
    input copies replace tensors nothing else keeps."""
    extra = TOKENS * 2 * (F + (2 * Q - KV) + Q)
    core = _saved("megatron_core")
    deepspeed = _saved("megatron_deepspeed")
    for simulator in range(2):
        assert deepspeed[simulator] - core[simulator] == pytest.approx(extra)


def test_torchtitan_keeps_silu_only() -> None:
    """Its feed-forward keeps SiLU's output; SDPA takes the KV heads and Q, K, V as they are."""
    core = _saved("megatron_core")
    titan = _saved("torchtitan")
    for simulator in range(2):
        assert titan[simulator] - core[simulator] == pytest.approx(TOKENS * 2 * F)


def test_forward_traffic_of_the_elementwise_kernels_by_hand() -> None:
    """Per token, against Megatron-Core's fused kernels (analytical simulator):
    - RoPE as five operators: 10 passes of Q and K instead of 2: 8 x 2 x (Q + KV / 2);
    - SwiGLU as two: SiLU's output written and read, 2 x 2 x F;
    - repeat_kv: K and V read (KV) and written at the query heads (2 Q), 2 bytes each;
    - the flash path's copies of Q, K and V (repeated): read and written, 2 x 2 x 3 Q."""

    def traffic(framework: str) -> float:
        job = _job(framework)
        return _elementwise_bytes_per_token(job.model, False, LAYOUT, 2, job.train, True)

    rope = 8 * 2 * (Q + KV / 2)
    swiglu = 2 * 2 * F
    repeat = 2 * (KV + 2 * Q)
    copies = 2 * 2 * (Q + 2 * Q)
    core = traffic("megatron_core")
    assert traffic("megatron_deepspeed") - core == pytest.approx(rope + swiglu + repeat + copies)
    assert traffic("torchtitan") - core == pytest.approx(rope + swiglu)


@pytest.mark.parametrize(("kernel", "passes"), [("halves", 10), ("complex", 10)])
def test_the_recorded_rope_moves_what_the_stack_s_kernels_move(kernel: str, passes: int) -> None:
    """The hierarchical simulator's RoPE records the operators of the stacks that run it as
    PyTorch operators: their bytes are the passes of the rotated tensor, and a read of the
    (small) table per multiplication."""
    x = torch.empty(1, TOKENS, 16, 128, dtype=torch.bfloat16, device="meta")
    table = torch.empty(TOKENS, 1, 128, dtype=torch.bfloat16, device="meta")
    recorder = Recorder()
    with recorder:
        _rope(x, table, kernel)
    moved = sum(op.bytes for op in recorder.ops)
    tensor = x.numel() * x.element_size()
    table_bytes = table.numel() * 4  # at most an fp32 copy of it, read or written twice
    assert passes * tensor <= moved <= passes * tensor + 4 * table_bytes
