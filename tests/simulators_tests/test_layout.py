"""Layout: every rule of violations() on a breaking case, resolve(), and field errors.

The rules are Megatron-LM's and MindSpeed's (docs/reference.md section 3.7).
"""

from __future__ import annotations

import dataclasses

import pytest

from simulators import Layout
from simulators import LayoutError
from simulators import ModelSpec
from simulators import SpecError
from simulators import TrainSpec
from tests.simulators_tests._specs import ascend
from tests.simulators_tests._specs import model

LLAMA2_70B = model("llama2_70b", name="Llama-2-70B")  # 80 layers, 64 heads, 8 KV heads
MIXTRAL = model("mixtral_8x7b")  # 32 layers, 32 heads, 8 KV heads, 8 experts
CLUSTER_4X8 = ascend(num_nodes=4)  # 32 NPUs
TRAIN = TrainSpec(seq_len=4096, global_batch_size=1024)


def _violations(lay: Layout, spec: ModelSpec = LLAMA2_70B, train: TrainSpec = TRAIN) -> list[str]:
    return lay.violations(spec, CLUSTER_4X8, train)


def test_megatron_reference_layout_is_valid() -> None:
    # MindSpeed-LLM Llama-2-70B on 4x8 910B: TP8 PP4, GBS 1024 (docs/reference.md 3.7).
    lay = Layout.resolve(32, tp=8, pp=4)
    assert (lay.dp, lay.sequence_parallel) == (1, True)
    assert _violations(lay) == []
    lay.check(LLAMA2_70B, CLUSTER_4X8, TRAIN)  # raises nothing
    assert lay.num_microbatches(TRAIN) == 1024


def test_valid_moe_layout() -> None:
    lay = Layout.resolve(32, tp=2, pp=2, ep=8)  # dp 8, expert grid 2*8*2 = 32
    assert _violations(lay, MIXTRAL) == []
    assert lay.expert_dp == 1


def test_world_size() -> None:
    assert _violations(Layout(dp=2, tp=8, pp=4, sequence_parallel=True)) == [
        "dp(2) * tp(8) * pp(4) * cp(1) = 64 != 32 devices of cluster ascend"
    ]


def test_tp_not_dividing_heads() -> None:
    found = _violations(Layout(dp=1, tp=3, sequence_parallel=True))
    assert "tp=3 does not divide num_attention_heads=64" in found
    assert "tp=3 and num_kv_heads=8: neither divides the other" in found


def test_kv_heads_vs_tp() -> None:
    # Mixtral-8x22B: 48 heads, 8 KV heads; tp=6 divides 48 but neither divides the other with 8.
    spec = model("mixtral_8x22b")
    found = _violations(Layout(dp=1, tp=6, pp=1, sequence_parallel=True), spec)
    assert "tp=6 and num_kv_heads=8: neither divides the other" in found
    assert not any("num_attention_heads" in s for s in found)
    # TP a multiple of the KV groups is allowed since Megatron f7dfb997 (docs/reference.md 3.7).
    assert _violations(Layout(dp=2, tp=16, pp=1, sequence_parallel=True)) == []


def test_layers_vs_pp() -> None:
    found = _violations(Layout(dp=1, tp=8, pp=3, sequence_parallel=True))
    assert "pp=3 does not divide num_layers=80" in found


def test_vpp_needs_pp() -> None:
    found = _violations(Layout(dp=4, tp=8, pp=1, vpp=2, sequence_parallel=True))
    assert found == ["vpp=2 needs pp > 1"]


def test_vpp_must_divide_layers_per_stage() -> None:
    found = _violations(Layout(dp=1, tp=8, pp=4, vpp=3, sequence_parallel=True))
    assert found == ["vpp=3 does not divide the 80/4 layers per stage"]


def test_vpp_needs_enough_microbatches() -> None:
    train = TrainSpec(seq_len=4096, global_batch_size=2)
    found = _violations(Layout(dp=1, tp=8, pp=4, vpp=2, sequence_parallel=True), train=train)
    assert found == ["vpp=2 needs micro-batches per step (2) >= pp (4)"]
    assert _violations(Layout(dp=1, tp=8, pp=4, vpp=2, sequence_parallel=True)) == []


def test_cp_needs_seq_divisible_by_2cp() -> None:
    train = TrainSpec(seq_len=4098, global_batch_size=1024)
    found = _violations(Layout(dp=1, tp=8, pp=2, cp=2, sequence_parallel=True), train=train)
    assert found == ["cp=2 needs seq_len=4098 divisible by 2*cp=4"]
    assert _violations(Layout(dp=1, tp=8, pp=2, cp=2, sequence_parallel=True)) == []


def test_ep_needs_moe() -> None:
    found = _violations(Layout(dp=4, tp=8, ep=2, sequence_parallel=True))
    assert found == ["ep=2 needs a mixture-of-experts model; Llama-2-70B is dense"]


def test_ep_must_divide_experts() -> None:
    found = _violations(Layout(dp=32, ep=16), MIXTRAL)
    assert found == ["ep=16 does not divide num_experts=8"]


def test_expert_grid_must_divide_world() -> None:
    found = _violations(Layout(dp=4, tp=2, pp=4, ep=8, sequence_parallel=True), MIXTRAL)
    assert found == ["expert grid tp(2) * ep(8) * pp(4) = 64 does not divide the world size 32"]


def test_ep_with_tp_needs_sequence_parallel() -> None:
    found = _violations(Layout(dp=16, tp=2, ep=2), MIXTRAL)
    assert found == ["ep > 1 with tp > 1 needs sequence_parallel (model_parallel_config.py)"]


def test_sequence_parallel_needs_tp() -> None:
    assert _violations(Layout(dp=32, sequence_parallel=True)) == ["sequence_parallel needs tp > 1"]


def test_global_batch_divisibility() -> None:
    found = _violations(Layout(dp=4, tp=8, micro_batch=3, sequence_parallel=True))
    assert found == ["micro_batch(3) * dp(4) = 12 does not divide global_batch_size=1024"]


def test_recompute_layers_need_full_recompute() -> None:
    lay = Layout(
        dp=1, tp=8, pp=4, recompute="selective", recompute_layers=2, sequence_parallel=True
    )
    assert _violations(lay) == ["recompute_layers=2 needs recompute=full"]


def test_recompute_layers_at_most_a_stage() -> None:
    lay = Layout(dp=1, tp=8, pp=4, recompute="full", recompute_layers=30, sequence_parallel=True)
    assert _violations(lay) == ["recompute_layers=30 exceeds the 20 layers per pipeline stage"]
    assert _violations(dataclasses.replace(lay, recompute_layers=20)) == []
    assert (
        dataclasses.replace(lay, recompute_layers=5).recomputed_layers_per_stage(LLAMA2_70B) == 5
    )
    assert (
        dataclasses.replace(lay, recompute_layers=None).recomputed_layers_per_stage(LLAMA2_70B)
        == 20
    )


def test_several_violations_at_once() -> None:
    lay = Layout(dp=3, tp=3, pp=3, micro_batch=1, sequence_parallel=False, recompute_layers=1)
    found = _violations(lay)
    assert found == [
        "dp(3) * tp(3) * pp(3) * cp(1) = 27 != 32 devices of cluster ascend",
        "tp=3 does not divide num_attention_heads=64",
        "tp=3 and num_kv_heads=8: neither divides the other",
        "pp=3 does not divide num_layers=80",
        "micro_batch(1) * dp(3) = 3 does not divide global_batch_size=1024",
        "recompute_layers=1 needs recompute=full",
    ]
    with pytest.raises(LayoutError) as info:
        lay.check(LLAMA2_70B, CLUSTER_4X8, TRAIN)
    assert all(sentence in str(info.value) for sentence in found)


def test_resolve_fills_dp() -> None:
    lay = Layout.resolve(64, tp=4, pp=2, cp=2)
    assert (lay.dp, lay.world_size, lay.sequence_parallel) == (4, 64, True)
    assert Layout.resolve(8, tp=1).sequence_parallel is False
    assert Layout.resolve(8, tp=2, sequence_parallel=False).sequence_parallel is False
    assert Layout.resolve(8, tp=2, pp=None).pp == 1  # None: not given


def test_resolve_rejects_unknown_fields() -> None:
    with pytest.raises(LayoutError, match=r"unknown layout field\(s\) tpp; allowed: .*tp"):
        Layout.resolve(8, tpp=2)


def test_resolve_leaves_a_bad_world_to_violations() -> None:
    # tp*pp*cp not dividing the world: dp rounds down and violations() reports the world rule.
    lay = Layout.resolve(32, tp=3)
    assert lay.dp == 10
    broken = "dp(10) * tp(3) * pp(1) * cp(1) = 30 != 32 devices of cluster ascend"
    assert broken in _violations(lay)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tp": 0}, "tp=0 must be > 0"),
        ({"dp": 0, "pp": -1}, "dp=0, pp=-1 must be > 0"),
        ({"micro_batch": 0}, "micro_batch=0 must be > 0"),
        ({"recompute": "partial"}, "recompute='partial' is not one of none, selective, full"),
        ({"recompute": "full", "recompute_layers": 0}, "recompute_layers=0 must be > 0"),
    ],
)
def test_meaningless_fields_raise_spec_error(fields: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        Layout(**fields)  # type: ignore[arg-type]


def test_describe() -> None:
    lay = Layout(dp=4, tp=8, pp=2, recompute="full", recompute_layers=3, sequence_parallel=True)
    assert lay.describe() == "dp4 tp8 pp2 cp1 ep1 vpp1 mbs1 rc=full:3 sp do"
