"""Where Megatron's fused scale-mask-softmax kernel runs on the unfused attention path, and what
PyTorch's fp32 softmax costs where it does not (autotune/simulators/fused_softmax.py,
docs/reference.md 3.3). The shapes are those of BLOOM's layout search (chronicles-prequel.md)."""

from __future__ import annotations

import dataclasses

import pytest

from autotune import catalog
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import SpecError
from autotune.simulators.analytical.layer import _unfused_attention_bytes
from autotune.simulators.analytical.layer import _unfused_attention_s
from autotune.simulators.analytical.layer import host_ops
from autotune.simulators.fused_softmax import _batches_per_block
from autotune.simulators.fused_softmax import fused_softmax_runs
from autotune.simulators.hierarchical.compile import compile_layer
from autotune.simulators.hierarchical.graph import layer_shapes
from tests.simulators_tests._specs import analytical
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model

A100 = catalog.load_cluster("jean_zay_a100", ["cluster.num_nodes=1"])
# A BLOOM-prequel layer at hidden 12288 with 64 heads of 192, two layers
BLOOM = dataclasses.replace(
    model("gpt3_175b"), num_layers=2, num_attention_heads=64, num_kv_heads=64, head_dim=192
)


def test_batches_per_block_follow_the_kernel() -> None:
    """``get_batch_per_block`` of scaled_masked_softmax.h: 128 threads per block, warps of
    min(next power of two, 32) threads, 2 rows per warp up to 128 keys, else 1."""
    assert [_batches_per_block(n) for n in (1, 2, 4, 8, 12, 16, 24, 64, 128, 129, 2048)] == [
        256,
        128,
        64,
        32,
        16,
        16,
        8,
        8,
        8,
        4,
        4,
    ]


def test_megatron_runs_the_kernel_for_a_multiple_of_four_softmax_batches() -> None:
    # at 2048 keys the block holds 4 rows: micro-batch x heads per rank a multiple of 4
    assert not fused_softmax_runs("megatron", 1, 2, 2048, 4096)  # 16 heads over TP 8
    assert fused_softmax_runs("megatron", 2, 2, 2048, 4096)
    assert fused_softmax_runs("megatron", 1, 12, 2048, 4096)
    assert not fused_softmax_runs("megatron", 1, 14, 2048, 4096)
    # past the kernel's longest key, below 17 keys, or keys not a multiple of 4
    assert not fused_softmax_runs("megatron", 4, 8, 8192, 4096)
    assert not fused_softmax_runs("megatron", 4, 8, 16, 4096)
    assert not fused_softmax_runs("megatron", 4, 8, 2046, 4096)
    # at 64 keys a block holds 8 rows
    assert not fused_softmax_runs("megatron", 1, 4, 64, 4096)
    assert fused_softmax_runs("megatron", 2, 4, 64, 4096)


def test_bigscience_fork_reads_the_heads_per_rank_as_the_key_length() -> None:
    """The chronicles' tables: 64 heads over TP 8 (8 per rank, 32 rows per block) need
    micro-batch 4; 112 heads (14 per rank, 16 per block) at micro-batch 4 give 56 rows, not
    a multiple; 128 heads (16) at micro-batch 4 and 96 over TP 4 (24, 8 per block) at 2 run
    the kernel, as 64 over TP 4 (16) does at micro-batch 1."""
    runs = [fused_softmax_runs("bigscience_fork", b, np, 2048, 4096) for b, np in ((1, 8), (2, 8))]
    assert runs == [False, False]
    assert fused_softmax_runs("bigscience_fork", 4, 8, 2048, 4096)
    assert not fused_softmax_runs("bigscience_fork", 4, 14, 2048, 4096)
    assert fused_softmax_runs("bigscience_fork", 4, 16, 2048, 4096)
    assert fused_softmax_runs("bigscience_fork", 2, 24, 2048, 4096)
    assert fused_softmax_runs("bigscience_fork", 1, 16, 2048, 4096)
    # the fork's file took keys up to 2048, whatever the framework's limit
    assert not fused_softmax_runs("bigscience_fork", 4, 8, 4096, 4096)
    assert fused_softmax_runs("megatron", 4, 8, 4096, 4096)
    # where Megatron's check runs the kernel at every one of these
    assert all(fused_softmax_runs("megatron", b, 8, 2048, 4096) for b in (1, 2, 4))


def _job(rule: str | None) -> Job:
    train = make_train(
        "megatron_deepspeed",
        seq_len=2048,
        global_batch_size=16,
        precision="fp16",
        flash_attention=False,
        dropout=0.1,
        fused_softmax_rule=rule,
    )
    return Job(model=BLOOM, cluster=A100, train=train)


def test_the_analytical_simulator_prices_pytorchs_fp32_softmax_by_hand() -> None:
    """TP 8, micro-batch 2: 2 x 8 x 2048 x 2048 = 67.1M scores per layer. PyTorch's fp32
    softmax moves 36 B per score each way for the kernel's 4 (forward) and 6 (backward), and
    issues 4 more host calls in each pass (conf/simulator/analytical.yaml)."""
    layout = Layout(tp=8, micro_batch=2, recompute="full", distributed_optimizer=False)
    sim = analytical()
    c = sim.constants
    fused, fork = _job(None), _job("bigscience_fork")
    assert not fused.train.softmax_in_fp32(BLOOM, 2, 8)
    assert fork.train.softmax_in_fp32(BLOOM, 2, 8)
    tokens = 2 * 2048
    f0, b0 = _unfused_attention_s(BLOOM, tokens, fused.train, layout, A100.device, c)
    f1, b1 = _unfused_attention_s(BLOOM, tokens, fork.train, layout, A100.device, c)
    scores = 2 * 8 * 2048 * 2048
    bandwidth = A100.device.achieved_memory_bytes_per_s
    assert f1 - f0 == pytest.approx(scores * (36 - 4) / bandwidth)
    assert b1 - b0 == pytest.approx(scores * (36 - 6) / bandwidth)
    ops = c.host_ops_per_layer_forward, c.host_ops_per_layer_backward
    assert host_ops(fused, layout, c) == ops
    assert host_ops(fork, layout, c) == (ops[0] + 4, ops[1] + 4)
    # saved per score with dropout: softmax output, mask, dropout output (5); in fp32 the
    # output is 4 B and the 16-bit copy goes once dropout has read it (7, as torch keeps)
    saved = [_unfused_attention_bytes(BLOOM, j.train, layout, c)["saved"] for j in (fused, fork)]
    assert saved == [5, 7]
    # micro-batch 4: 32 rows, a multiple of the fork's 32 per block; the kernel runs again
    assert not fork.train.softmax_in_fp32(BLOOM, 4, 8)
    slow = sim.simulate(fork, layout).step_time_s
    assert slow > sim.simulate(fused, layout).step_time_s


def test_the_hierarchical_simulator_runs_pytorchs_fp32_softmax_too() -> None:
    """Autograd keeps the fp32 softmax output (4 B per score) where the kernel keeps its 16-bit
    one (2 B); dropout's mask and output follow alike; the causal mask the masked_fill keeps is
    the step's, built once per batch, not the layer's. Checked by hand in torch itself (saved
    tensor hooks on CPU: 7 against 5 B per score with dropout, 6 against 2 without)."""
    layout = Layout(tp=8, micro_batch=2, recompute="none", distributed_optimizer=False)
    fused, fork = (layer_shapes(_job(rule), layout)["dense"] for rule in (None, "bigscience_fork"))
    assert (fused.softmax_in_fp32, fork.softmax_in_fp32) == (False, True)
    extra = compile_layer(fork).saved_bytes - compile_layer(fused).saved_bytes
    assert extra == 2 * 8 * 2048 * 2048 * 2
    sim = catalog.load_simulator("hierarchical", [])
    assert sim.simulate(_job("bigscience_fork"), layout).step_time_s > (
        sim.simulate(_job(None), layout).step_time_s
    )


def test_an_unknown_rule_is_refused_naming_the_rules() -> None:
    with pytest.raises(SpecError, match="fused_softmax_rule.*megatron, bigscience_fork"):
        _job("apex")
