"""The optimizer step's fp32 gradient copies (docs/decisions/0053): they exist in the step
alone, so a rank's peak holds the larger of them and the activations; a device-level peak shows
them on top (``cached_gib``), whether a layout fits does not. Checked by hand on Llama-3-8B."""

from __future__ import annotations

import warnings

import pytest

from autotune import catalog
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators.states import step_excess_bytes
from tests.simulators_tests._specs import analytical
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model

GIB = 2**30
LLAMA = model("llama3_8b")
H100 = catalog.load_cluster("h100", [])  # one node of 8


def _job(framework: str, precision: str) -> Job:
    train = make_train(framework, seq_len=4096, global_batch_size=64, precision=precision)
    return Job(model=LLAMA, cluster=H100, train=train)


def _rank_params(tp: int) -> float:
    """Every parameter of Llama-3-8B on one TP rank of a single pipeline stage."""
    layers = LLAMA.num_layers * LLAMA.dense_layer_params
    head = LLAMA.vocab_size * LLAMA.hidden_size  # its own output layer (untied)
    return (layers + LLAMA.embedding_params + head) / tp + LLAMA.hidden_size


def test_the_peak_holds_the_larger_of_the_copies_and_the_activations() -> None:
    # Megatron fp16 without the distributed optimizer: 2 + 2 + 12 kept, 4 copied in the step.
    # tp 8, full recompute, micro-batch 1: activations far below the 4 B x 1.0e9 copies.
    job = _job("megatron_core", "fp16")
    p = _rank_params(tp=8)
    lay = Layout.resolve(8, tp=8, distributed_optimizer=False, recompute="full")
    prediction = analytical().simulate(job, lay)
    memory = prediction.memory_breakdown_gib
    assert memory["optimizer"] * GIB == pytest.approx(12 * p)
    held = (memory["activations"] + memory["working"]) * GIB
    assert held < 4 * p
    assert memory["step_grads"] * GIB == pytest.approx(4 * p - held)
    assert prediction.cached_gib * GIB == pytest.approx(held)  # the blocks the copies reuse
    assert prediction.peak_gib("device") == pytest.approx(
        prediction.memory_gib + prediction.cached_gib
    )


def test_activations_above_the_copies_leave_them_only_cached() -> None:
    # no recompute at micro-batch 4: the activations hold more than the copies need
    job = _job("megatron_core", "fp16")
    lay = Layout.resolve(8, tp=8, distributed_optimizer=False, recompute="none", micro_batch=4)
    prediction = analytical().simulate(job, lay)
    assert prediction.memory_breakdown_gib["step_grads"] == 0.0
    assert prediction.cached_gib * GIB == pytest.approx(4 * _rank_params(tp=8))


def test_the_distributed_optimizer_copies_its_shard_alone() -> None:
    job = _job("megatron_core", "fp16")
    lay = Layout.resolve(8, tp=2, recompute="full")  # dp 4
    prediction = analytical().simulate(job, lay)
    memory = prediction.memory_breakdown_gib
    p = _rank_params(tp=2)
    assert memory["optimizer"] * GIB == pytest.approx(12 * p / 4)
    assert (memory["step_grads"] + prediction.cached_gib) * GIB == pytest.approx(4 * p / 4)


def test_bf16_with_an_fp32_gradient_buffer_copies_nothing() -> None:
    # Megatron's bf16 main_grad is fp32: .float() returns the buffer itself
    prediction = analytical().simulate(_job("megatron_core", "bf16"), Layout.resolve(8, tp=8))
    assert prediction.memory_breakdown_gib["step_grads"] == 0.0
    assert prediction.cached_gib == 0.0


@pytest.mark.parametrize("distributed", [False, True])
def test_the_copy_follows_the_gradient_buffer_not_the_precision(distributed: bool) -> None:
    """A 16-bit buffer is copied to fp32 for the step, an fp32 one is read in place, in fp16
    and bf16 alike (``grad_reduce_in_fp32``): the copy is 4 B per parameter, or its shard's."""
    lay = Layout.resolve(8, tp=2, recompute="full", distributed_optimizer=distributed)
    p = _rank_params(tp=2) / (4 if distributed else 1)
    for precision in ("fp16", "bf16"):
        for fp32_buffer in (False, True):
            train = make_train(
                "megatron_core",
                seq_len=4096,
                global_batch_size=64,
                precision=precision,
                grad_reduce_in_fp32=fp32_buffer,
            )
            prediction = analytical().simulate(Job(model=LLAMA, cluster=H100, train=train), lay)
            memory = prediction.memory_breakdown_gib
            copied = (memory["step_grads"] + prediction.cached_gib) * GIB
            assert copied == pytest.approx(0.0 if fp32_buffer else 4 * p), (precision, fp32_buffer)
            assert memory["gradients"] * GIB == pytest.approx(
                (4 if fp32_buffer else 2) * p * (4 if distributed else 1)
            )


def test_deepspeeds_bf16_optimizer_casts_its_whole_fp32_buffer_for_the_all_reduce() -> None:
    # BF16_Optimizer (bf16 without ZeRO, decision 0066): after the last backward the pipeline
    # engine all-reduces the flat fp32 gradient buffer as one tensor cast to bf16, 2 B for every
    # parameter of the rank; with ZeRO-1 the step copies only the rank's fp32 shard, 4 B / d.
    job = _job("megatron_deepspeed", "bf16")
    p = _rank_params(tp=2)
    whole = analytical().simulate(job, Layout.resolve(8, tp=2, distributed_optimizer=False))
    copies = whole.memory_breakdown_gib["step_grads"] + whole.cached_gib
    assert copies * GIB == pytest.approx(2 * p)
    assert whole.memory_breakdown_gib["weights"] * GIB == pytest.approx(2 * p)
    zero1 = analytical().simulate(job, Layout.resolve(8, tp=2, distributed_optimizer=True))
    copies = zero1.memory_breakdown_gib["step_grads"] + zero1.cached_gib
    assert copies * GIB == pytest.approx(4 * p / 4)


def test_the_copies_do_not_decide_whether_a_layout_fits() -> None:
    job = _job("megatron_core", "fp16")
    lay = Layout.resolve(8, tp=8, distributed_optimizer=False, recompute="none", micro_batch=4)
    prediction = analytical().simulate(job, lay)
    assert prediction.cached_gib > 0
    assert prediction.fits == (prediction.memory_gib <= prediction.memory_capacity_gib)
    assert prediction.peak_gib("device") > prediction.memory_gib


@pytest.mark.parametrize("recompute", ["full", "none"])
@pytest.mark.parametrize(
    ("precision", "copied", "share"),
    [("fp16", "optimizer", 1 / 3), ("bf16", "weights", 1.0)],  # 4 B of the 12 kept; 2 B of 2
)
def test_both_simulators_book_the_copies_alike(
    recompute: str, precision: str, copied: str, share: float
) -> None:
    job = _job("megatron_deepspeed", precision)
    lay = Layout.resolve(8, tp=4, pp=2, distributed_optimizer=False, recompute=recompute)
    analytic = analytical().simulate(job, lay)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hierarchical = catalog.load_simulator("hierarchical", ()).simulate(job, lay)
    for p in (analytic, hierarchical):  # the copies, split by the peak
        copies = p.memory_breakdown_gib["step_grads"] + p.cached_gib
        assert copies == pytest.approx(p.memory_breakdown_gib[copied] * share)
    assert hierarchical.cached_gib == pytest.approx(analytic.cached_gib, rel=0.01)


def test_the_excess_by_hand() -> None:
    assert step_excess_bytes(10.0, 3.0, 2.0) == 5.0
    assert step_excess_bytes(4.0, 3.0, 2.0) == 0.0
