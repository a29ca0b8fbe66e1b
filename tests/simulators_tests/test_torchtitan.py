"""torchtitan as a framework (docs/decisions/0051): its facts load, its code's rules refuse what
it refuses, and FSDP2's bytes per parameter by hand (docs/torchtitan.md 4)."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from autotune import catalog
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import SpecError
from autotune.simulators.hierarchical import HierarchicalSimulator
from autotune.simulators.schedule import chunk_states_peak
from autotune.simulators.schedule import schedule_order
from tests.simulators_tests._specs import analytical
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model

GIB = 2**30
LLAMA = model("llama3_8b")
H100_2 = catalog.load_cluster("h100", ["cluster.num_nodes=2"])  # 16 GPUs
TITAN = make_train("torchtitan", seq_len=4096, global_batch_size=64)
JOB = Job(model=LLAMA, cluster=H100_2, train=TITAN)


def _rank_params(tp: int) -> float:
    """Every parameter of Llama-3-8B on one TP rank of a single pipeline stage."""
    layers = LLAMA.num_layers * LLAMA.dense_layer_params
    head = LLAMA.vocab_size * LLAMA.hidden_size  # its own output layer (untied)
    return (layers + LLAMA.embedding_params + head) / tp + LLAMA.hidden_size


def _rules(**values: object) -> dict[str, list[str]]:
    return Layout.resolve(16, **values).broken_rules(JOB)  # type: ignore[arg-type]


def test_the_facts_name_fsdp2_and_the_v0_2_2_release() -> None:
    framework = TITAN.framework
    assert framework.zero_stages == (0, 3) and framework.pipeline_zero_stages == (3,)
    assert framework.release == "v0.2.2" and framework.hybrid_sharding
    sharded = framework.state_bytes("bf16", 3)
    assert (sharded.sharded_weight, sharded.sharded_grad, sharded.sharded_optimizer) == (4, 4, 8)
    assert sharded.gather_bytes == 2  # the fp32 shard is gathered as bf16
    assert framework.state_bytes("fp32", 3).gather_bytes == 4


@pytest.mark.parametrize(
    ("values", "rule", "words"),
    [
        (dict(tp=2), "sharding", "runs ZeRO stages 0/3 only"),  # ZeRO-1: no such thing
        (dict(tp=2, zero_stage=0), "sharding", "(DDP) runs without tp, pp and cp only"),
        (dict(tp=8, cp=2, zero_stage=3, dp_replicate=2), "sharding", "does not divide dp=1"),
        (dict(tp=2, zero_stage=3, sequence_parallel=False), "sequence parallel", "only"),
        (dict(tp=2, zero_stage=3, recompute="selective"), "recompute", "no selective"),
        # no FSDP over more than one rank: TP and PP run in fp32, or replicated not at all
        (dict(tp=8, pp=2, zero_stage=3), "sharding", "in mixed precision only under FSDP"),
        (dict(tp=4, pp=2, zero_stage=3, dp_replicate=2), "sharding", "only under FSDP"),
    ],
)
def test_its_code_refuses(values: dict, rule: str, words: str) -> None:
    broken = _rules(**values)
    assert rule in broken, broken
    assert any(words in sentence for sentence in broken[rule]), broken[rule]


def test_it_trains_in_bf16_or_fp32_and_reduces_in_fp32_only() -> None:
    """FSDP2's mixed precision is bf16 or fp32 (no fp16: a device without bf16 cannot run a
    bf16 step) and its reduce dtype fp32 (docs/torchtitan.md 3)."""
    v100 = catalog.load_cluster("v100", [])
    with pytest.raises(SpecError, match="has no bf16, so a bf16 step runs in fp16"):
        TITAN.check_on(v100)
    make_train("torchtitan", seq_len=4096, global_batch_size=64, precision="fp32").check_on(v100)
    with pytest.raises(SpecError, match="reduces bf16 gradients in fp32 only"):
        make_train("torchtitan", seq_len=4096, global_batch_size=64, grad_reduce_in_fp32=False)
    with pytest.raises(SpecError, match="reduces bf16 gradients in fp32 only"):
        make_train("megatron_lm", seq_len=4096, global_batch_size=64, grad_reduce_in_fp32=False)
    make_train(
        "megatron_lm",
        seq_len=4096,
        global_batch_size=64,
        precision="fp16",
        grad_reduce_in_fp32=True,
    )


def test_the_sequence_divisor_is_tp_times_two_cp() -> None:
    train = make_train("torchtitan", seq_len=4100, global_batch_size=64)  # 4100 = 4 * 1025
    lay = Layout.resolve(16, tp=4, zero_stage=3)  # SP alone needs 4 | 4100: it does
    broken = lay.violations(Job(model=LLAMA, cluster=H100_2, train=train))
    assert any("tp*2*cp=8" in s for s in broken)
    assert not Layout.resolve(16, tp=4, zero_stage=3).violations(JOB)


def test_what_it_runs_passes_every_rule() -> None:
    for values in (
        dict(zero_stage=0),  # DDP alone
        dict(zero_stage=3),
        dict(tp=2, pp=2, cp=2, zero_stage=3, dp_replicate=2),
        dict(tp=2, recompute="full", zero_stage=3),
    ):
        assert not _rules(**values), values


def test_fsdp2_keeps_16_bytes_sharded_and_two_blocks_gathered_in_bf16() -> None:
    """TP 2 over 8 FSDP ranks: 4 + 4 + 8 bytes per parameter over the shard group; in flight
    the fp32 gradients of two blocks and the bf16 weights of the block in use and the next."""
    memory = analytical().simulate(JOB, Layout.resolve(16, tp=2, zero_stage=3))
    p, layer = _rank_params(tp=2), LLAMA.dense_layer_params / 2
    breakdown = memory.memory_breakdown_gib
    assert breakdown["weights"] * GIB == pytest.approx(4 * p / 8)
    assert breakdown["gradients"] * GIB == pytest.approx(4 * p / 8)
    assert breakdown["optimizer"] * GIB == pytest.approx(8 * p / 8)
    assert breakdown["unsharded"] * GIB == pytest.approx(2 * layer * 4 + 2 * layer * 2)


def test_under_pp_the_stage_stays_gathered_with_fp32_accumulators() -> None:
    """PP 2: each stage's bf16 weights and fp32 gradients stay whole all step (6 B/param)."""
    lay = Layout.resolve(16, tp=2, pp=2, zero_stage=3)
    simulators = [analytical()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hierarchical = catalog.load_simulator("hierarchical", ())
    assert isinstance(hierarchical, HierarchicalSimulator)
    simulators.append(hierarchical)  # type: ignore[arg-type]
    found = []
    for simulator in simulators:
        breakdown = simulator.simulate(JOB, lay).memory_breakdown_gib
        ratio = breakdown["unsharded"] / breakdown["weights"]
        found.append(breakdown["unsharded"])
        assert ratio == pytest.approx(6 / (4 / 4), rel=1e-6)  # 6 B whole against 4 B over d=4
    assert found[1] == pytest.approx(found[0], rel=0.02)


def test_a_chunk_frees_its_weights_and_gradients_after_its_last_backward_by_hand() -> None:
    """Rank 0 of 2, two chunks, two micro-batches (PyTorch's and Megatron's interleaved order:
    F c0 m0, F c0 m1, F c1 m0, F c1 m1, then B c1 m0, B c1 m1, B c0 m0, B c0 m1). Activations
    1 per chunk and micro-batch, weights 10 per chunk, gradients 100 per chunk: every forward
    done, chunk 1's first backward holds 4 + 20 + 100; once chunk 1 is done, chunk 0's first
    backward holds 2 + 10 + 100. Without interleaving (one chunk of both) the gradients join the
    activations of both micro-batches."""
    order = schedule_order("interleaved", 0, 2, 2, 2)
    assert order == [
        (True, 0, 0), (True, 0, 1), (True, 1, 0), (True, 1, 1),
        (False, 1, 0), (False, 1, 1), (False, 0, 0), (False, 0, 1),
    ]  # fmt: skip
    peak = chunk_states_peak("interleaved", 0, 2, 2, [1, 1], [0, 0], [10, 10], [100, 100])
    assert peak == 4 + 20 + 100
    whole = chunk_states_peak("1f1b", 0, 2, 2, [2], [0], [20], [200])
    assert whole == 4 + 20 + 200
    assert chunk_states_peak("interleaved", 0, 2, 2, [1, 1], [0.5, 0.5], [0, 0], [0, 0]) == 4.5


@pytest.mark.parametrize(("global_batch", "mixed"), [(8, False), (64, True)])
def test_interleaved_chunks_hold_only_the_last_chunks_gradients_when_their_backwards_do_not_mix(
    global_batch: int, mixed: bool
) -> None:
    """PP 2, VPP 2 (two chunks of 8 layers per rank), DP 4. With 2 micro-batches (= pp) every
    forward runs before the first backward and the last chunk's backwards all run before the
    first chunk's: at the peak the last rank holds its bf16 weights (2 B/param) and only its
    last chunk's fp32 gradients, 4 B/param times that chunk's share of its parameters (8
    layers, the final norm and the output layer, over 16 layers and those), against the
    weights' 4 B over d = 4. With 16 micro-batches the chunks' backwards alternate in groups
    of pp, both chunks' gradients are whole early, and the peak holds all 6 B as without
    interleaving. Both simulators split by each chunk's parameters (docs/decisions/0071)."""
    layer, head = LLAMA.dense_layer_params / 2, LLAMA.vocab_size * LLAMA.hidden_size / 2
    last = (8 * layer + head + LLAMA.hidden_size) / (16 * layer + head + LLAMA.hidden_size)
    ratio = 2 + 4 * (1 if mixed else last)
    train = make_train("torchtitan", seq_len=4096, global_batch_size=global_batch)
    job = Job(model=LLAMA, cluster=H100_2, train=train)
    lay = Layout.resolve(16, tp=2, pp=2, vpp=2, zero_stage=3)
    assert lay.num_microbatches(train) == global_batch // 4
    breakdown = analytical().simulate(job, lay).memory_breakdown_gib
    assert breakdown["unsharded"] / breakdown["weights"] == pytest.approx(ratio, rel=1e-6)
    batch = analytical().simulate_many(job, [lay, dataclasses.replace(lay, vpp=1)])
    assert batch.prediction(0).memory_breakdown_gib == pytest.approx(breakdown)  # batch path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hierarchical = catalog.load_simulator("hierarchical", ())
    found = hierarchical.simulate(job, lay).memory_breakdown_gib
    assert found["unsharded"] / found["weights"] == pytest.approx(ratio, rel=1e-4)
    plain = analytical().simulate(job, dataclasses.replace(lay, vpp=1)).memory_breakdown_gib
    assert plain["unsharded"] / plain["weights"] == pytest.approx(6, rel=1e-6)


def _both() -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [analytical(), catalog.load_simulator("hierarchical", ())]


@pytest.mark.parametrize(
    "values",
    [
        dict(tp=2, zero_stage=3),
        dict(tp=2, pp=2, zero_stage=3),
        dict(recompute="full", zero_stage=3),
    ],
)
def test_float8_keeps_no_fp8_tensor_so_the_peak_is_bf16s(values: dict) -> None:
    """torchao casts in every pass and saves the high-precision input and weight: no FP8
    weight copies, no quantized saved inputs (docs/decisions/0062), so an FP8 run holds what a
    BF16 run holds, as the published pairs measured (76.8 against 77.0 GiB, 61.8 against 62.0).
    Transformer Engine keeps both (Megatron-Core)."""
    lay = Layout.resolve(16, **values)  # type: ignore[arg-type]
    titan_fp8 = make_train("torchtitan", seq_len=4096, global_batch_size=64, precision="fp8")
    fp8 = Job(model=LLAMA, cluster=H100_2, train=titan_fp8)
    for simulator in _both():
        bf16_memory = simulator.simulate(JOB, lay).memory_breakdown_gib
        assert simulator.simulate(fp8, lay).memory_breakdown_gib == bf16_memory
    core = make_train("megatron_core", seq_len=4096, global_batch_size=64, precision="fp8")
    kept = analytical().simulate(Job(model=LLAMA, cluster=H100_2, train=core), Layout.resolve(16))
    assert kept.memory_breakdown_gib["fp8_weights"] > 0


@pytest.mark.parametrize(("tp", "per_logit"), [(1, 12), (2, 16)])
def test_the_loss_holds_12_bytes_per_logit_or_16_under_loss_parallelism(
    tp: int, per_logit: int
) -> None:
    """The uncompiled loss at its peak, LogSoftmaxBackward: the kept fp32 log-probabilities,
    nll_loss's dense fp32 gradient and the input gradient (12 B); under loss parallelism the
    fused nll/log_softmax backward holds four fp32 tensors at once (16 B)."""
    lay = Layout.resolve(16, tp=tp, zero_stage=3, recompute="full")
    logits = 4096 * LLAMA.vocab_size / tp  # one micro-batch of 4096 tokens, the vocabulary / tp
    breakdown = analytical().simulate(JOB, lay).memory_breakdown_gib
    assert breakdown["working"] * GIB == pytest.approx(logits * per_logit)  # above a layer's
    free = dataclasses.replace(
        TITAN.framework, logits_bytes_per_element=0, vocab_parallel_logits_bytes_per_element=0
    )
    without = Job(model=LLAMA, cluster=H100_2, train=dataclasses.replace(TITAN, framework=free))
    added = [
        s.simulate(JOB, lay).memory_gib - s.simulate(without, lay).memory_gib for s in _both()
    ]
    assert added[1] == pytest.approx(added[0], rel=0.01)  # the hierarchical peak agrees
