"""What the loss holds per logit depends on the activations' dtype: an fp32 run's output layer
writes fp32 logits, and the loss's ``.float()`` returns them as they are, so the 16-bit copy the
16-bit runs price (docs/reference.md 3.3) does not exist.

Qwen2.5-7B at seq 32,768 and micro-batch 1, TP 1: 32,768 x 152,064 logits. Megatron-Core holds
the fp32 copy its cross entropy softmaxes in place, 4 B each (6 B with bf16 logits beside it):
18.56 GiB, not 27.84.
"""

from __future__ import annotations

import dataclasses

import pytest

from autotune import catalog
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import SpecError
from autotune.simulators.frameworks import FrameworkSpec

pytest.importorskip("autotune.simulators.hierarchical.compile")

GIB = 1024**3
LOGITS = 32768 * 152064  # Qwen2.5-7B: seq 32,768 x vocabulary 152,064, one micro-batch


def _job(precision: str, framework: str = "megatron_core") -> Job:
    return catalog.load_job(
        "qwen2_5_7b",
        "a100",
        [
            "cluster.num_nodes=1",
            f"train.precision={precision}",
            f"train.framework={framework}",
            "model.num_layers=2",
        ],
    )


@pytest.mark.parametrize(
    ("framework", "fp32", "fp32_vocab_parallel", "bf16", "bf16_vocab_parallel"),
    [
        ("megatron_core", 4, 4, 6, 6),  # the fp32 copy (+ the bf16 logits)
        ("megatron_lm", 4, 4, 6, 6),
        ("mindspeed", 4, 4, 6, 6),
        ("megatron_deepspeed", 12, 12, 14, 14),  # three fp32 outputs (+ the 16-bit source)
        ("torchtitan", 12, 16, 12, 16),  # peaks in the backward, fp32 tensors only
    ],
)
def test_each_stack_holds_no_16bit_logits_in_fp32(
    framework: str,
    fp32: float,
    fp32_vocab_parallel: float,
    bf16: float,
    bf16_vocab_parallel: float,
) -> None:
    spec = catalog.load_framework(framework)
    assert (spec.logits_bytes(1, "fp32"), spec.logits_bytes(2, "fp32")) == (
        fp32,
        fp32_vocab_parallel,
    )
    for dtype in ("bf16", "fp16"):  # fp8 runs' activations are bf16 (TrainSpec.compute_dtype)
        assert (spec.logits_bytes(1, dtype), spec.logits_bytes(2, dtype)) == (
            bf16,
            bf16_vocab_parallel,
        )


def test_a_16bit_share_beyond_the_loss_is_refused() -> None:
    values = dict(catalog.plain(catalog.compose(None, ["+framework=megatron_core"]).framework))
    with pytest.raises(SpecError, match="logits_16bit_bytes_per_element=7"):
        FrameworkSpec.from_mapping("x", {**values, "logits_16bit_bytes_per_element": 7})


def test_the_fp32_working_set_is_the_fp32_logits_alone() -> None:
    """The reported case, two layers: the analytical working set is the 4 B logits (one
    layer's backward is smaller), 6 B in bf16."""
    lay = Layout.resolve(8, tp=1)
    simulator = catalog.load_simulator("analytical")
    assert simulator.simulate(_job("fp32"), lay).memory_breakdown_gib["working"] == (
        pytest.approx(LOGITS * 4 / GIB)
    )
    assert simulator.simulate(_job("bf16"), lay).memory_breakdown_gib["working"] == (
        pytest.approx(LOGITS * 6 / GIB)
    )


@pytest.mark.parametrize(
    ("framework", "per_logit"), [("megatron_core", 4), ("megatron_deepspeed", 12)]
)
def test_the_hierarchical_peak_drops_the_16bit_logits_in_fp32(
    framework: str, per_logit: int
) -> None:
    """The hierarchical peak is 2 B a logit below the same fp32 job priced with the 16-bit
    logits kept (the logits outweigh a layer's backward either way): 4 B each on Megatron-Core,
    12 on Megatron-DeepSpeed; and both simulators agree within 1%."""
    job = _job("fp32", framework)
    lay = Layout.resolve(8, tp=1)
    kept = dataclasses.replace(job.train.framework, logits_16bit_bytes_per_element=0)
    as_16bit = dataclasses.replace(job, train=dataclasses.replace(job.train, framework=kept))
    assert job.train.framework.logits_bytes(1, "fp32") == per_logit
    assert kept.logits_bytes(1, "fp32") == per_logit + 2
    hierarchical = catalog.load_simulator("hierarchical")
    held = hierarchical.simulate(job, lay).memory_breakdown_gib["activations"]
    before = hierarchical.simulate(as_16bit, lay).memory_breakdown_gib["activations"]
    assert before - held == pytest.approx(LOGITS * 2 / GIB)
    gib = [
        catalog.load_simulator(n).simulate(job, lay).memory_gib
        for n in ("analytical", "hierarchical")
    ]
    assert gib[0] == pytest.approx(gib[1], rel=0.01)
