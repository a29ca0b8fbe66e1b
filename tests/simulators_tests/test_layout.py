"""Layout: every rule of violations() on a breaking case, resolve(), and field errors.

The rules are Megatron-LM's and MindSpeed's (docs/reference.md section 3.7).
"""

from __future__ import annotations

import dataclasses

import pytest

from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import LayoutError
from autotune.simulators import ModelSpec
from autotune.simulators import SpecError
from autotune.simulators import TrainSpec
from autotune.simulators.layout import RULE_NAMES
from tests.simulators_tests._specs import ascend
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model

LLAMA2_70B = model("llama2_70b", name="Llama-2-70B")  # 80 layers, 64 heads, 8 KV heads
MIXTRAL = model("mixtral_8x7b")  # 32 layers, 32 heads, 8 KV heads, 8 experts
CLUSTER_4X8 = ascend(num_nodes=4)  # 32 NPUs
TRAIN = make_train("megatron_lm", seq_len=4096, global_batch_size=1024)  # even splits only


def _violations(lay: Layout, spec: ModelSpec = LLAMA2_70B, train: TrainSpec = TRAIN) -> list[str]:
    return lay.violations(Job(model=spec, cluster=CLUSTER_4X8, train=train))


def test_megatron_reference_layout_is_valid() -> None:
    # MindSpeed-LLM Llama-2-70B on 4x8 910B: TP8 PP4, GBS 1024 (docs/reference.md 3.7).
    lay = Layout.resolve(32, tp=8, pp=4)
    assert (lay.dp, lay.sequence_parallel) == (1, True)
    assert _violations(lay) == []
    lay.check(Job(model=LLAMA2_70B, cluster=CLUSTER_4X8, train=TRAIN))  # raises nothing
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
    assert "pp=3 does not divide num_layers=80 (megatron_lm splits layers evenly only)" in found


def test_vpp_needs_pp() -> None:
    found = _violations(Layout(dp=4, tp=8, pp=1, vpp=2, sequence_parallel=True))
    assert found == ["vpp=2 needs pp > 1"]


def test_vpp_with_two_stages_needs_a_schedule_that_overlaps_its_sends() -> None:
    """Megatron's interleaved schedule without the p2p overlap (Megatron-LM of 2020-22, or
    --no-overlap-p2p-communication today) asserts pp > 2 (arguments.py)."""
    lay = Layout(dp=2, tp=8, pp=2, vpp=2, sequence_parallel=True)
    core = make_train("megatron_core", seq_len=4096, global_batch_size=1024)
    assert _violations(lay, train=core) == []
    found = _violations(lay)  # TRAIN runs megatron_lm
    assert found == [
        "vpp=2 needs pp > 2 on megatron_lm (its interleaved schedule blocks on its sends)"
    ]


def test_vpp_must_divide_layers_per_stage() -> None:
    found = _violations(Layout(dp=1, tp=8, pp=4, vpp=3, sequence_parallel=True))
    assert found == ["vpp=3 does not divide the 80/4 layers per stage"]


@pytest.mark.parametrize(("batch", "allowed"), [(2, False), (6, False), (8, True), (12, True)])
def test_vpp_needs_whole_groups_of_pp_microbatches(batch: int, allowed: bool) -> None:
    # Megatron's interleaved schedule runs the micro-batches in groups of pp and refuses a
    # short last group (schedules.py): m = 2 and 6 at pp 4 are refused, 8 and 12 run.
    train = make_train(seq_len=4096, global_batch_size=batch)
    found = _violations(Layout(dp=1, tp=8, pp=4, vpp=2, sequence_parallel=True), train=train)
    expected = (
        []
        if allowed
        else [
            f"vpp=2 needs micro-batches per step ({batch}) to be a multiple of pp (4): the "
            "interleaved schedule runs them in groups of pp"
        ]
    )
    assert found == expected


def test_cp_needs_seq_divisible_by_2cp() -> None:
    lay = Layout(dp=1, tp=8, pp=2, cp=2, sequence_parallel=False)
    train = make_train(seq_len=4098, global_batch_size=1024)
    assert _violations(lay, train=train) == ["cp=2 needs seq_len=4098 divisible by 2*cp=4"]
    assert _violations(lay, train=make_train(seq_len=4096, global_batch_size=1024)) == []


def test_cp_needs_a_framework_with_context_parallelism() -> None:
    train = make_train("megatron_lm", seq_len=4096, global_batch_size=1024)
    found = _violations(Layout(dp=1, tp=8, pp=2, cp=2, sequence_parallel=True), train=train)
    assert found == ["cp=2: megatron_lm has no context parallelism (use cp=1)"]


def test_transformer_engine_runs_context_parallelism_in_its_fused_attention_alone() -> None:
    """Megatron-Core's own attention asserts CP 1 and TE drops its unfused backend under CP;
    Megatron-DeepSpeed's Ulysses runs around its unfused attention."""
    lay = Layout(dp=1, tp=8, pp=2, cp=2, sequence_parallel=True)
    unfused = make_train(seq_len=4096, global_batch_size=1024, flash_attention=False)
    assert _violations(lay, train=unfused) == [
        "cp=2 needs fused attention: megatron_core runs context parallelism only in Transformer "
        "Engine's fused attention, which this run does not use (train.flash_attention=false, "
        "or a device without it)"
    ]
    deepspeed = make_train(
        "megatron_deepspeed", seq_len=4096, global_batch_size=1024, flash_attention=False
    )
    llama2_13b = model("llama2_13b")  # as many KV heads as heads
    assert (
        _violations(
            dataclasses.replace(lay, tp=4, pp=4, sequence_parallel=False), llama2_13b, deepspeed
        )
        == []
    )


def test_deepspeed_ulysses_takes_multi_head_attention_without_megatron_sp() -> None:
    """Megatron-DeepSpeed's context parallelism is DeepSpeed-Ulysses: its attention asserts as
    many KV heads as query heads, and it refuses Megatron's sequence parallelism."""
    train = make_train("megatron_deepspeed", seq_len=4096, global_batch_size=1024)
    assert train.context_exchange == "a2a"
    assert _violations(Layout(dp=1, tp=8, pp=2, cp=2, sequence_parallel=True), train=train) == [
        "cp=2 does not run with sequence_parallel on megatron_deepspeed",
        "cp=2: megatron_deepspeed's all-to-all needs as many KV heads as attention heads "
        "(Llama-2-70B has 8 of 64)",
    ]
    llama2_13b = model("llama2_13b")  # 40 heads, 40 KV heads
    lay = Layout(dp=1, tp=4, pp=4, cp=2, sequence_parallel=False)
    assert _violations(lay, llama2_13b, train=train) == []


def test_a2a_cp_splits_the_heads_of_a_tp_rank() -> None:
    """Llama-2-70B: 64 heads, 8 KV heads. TE splits both as they are; MindSpeed repeats the KV
    heads to the query heads first, so only the query heads must divide."""
    te = make_train(seq_len=4096, global_batch_size=1024, cp_comm_type="a2a")
    mindspeed = make_train("mindspeed", seq_len=4096, global_batch_size=1024, cp_comm_type="a2a")
    four_kv_heads = Layout(dp=1, tp=2, pp=4, cp=4, sequence_parallel=True)
    assert _violations(four_kv_heads, train=te) == []
    one_kv_head = Layout(dp=1, tp=8, pp=2, cp=2, sequence_parallel=True)
    assert _violations(one_kv_head, train=te) == [
        "cp=2 with cp_comm_type a2a needs cp to divide the 1 KV heads per TP rank "
        "(megatron_core splits them as they are)"
    ]
    assert _violations(one_kv_head, train=mindspeed) == []
    ten_heads = Layout(dp=1, tp=4, pp=2, cp=4, sequence_parallel=True)  # Llama-2-13B: 40 heads
    assert _violations(ten_heads, model("llama2_13b"), train=mindspeed) == [
        "cp=4 with cp_comm_type a2a needs cp to divide the 10 attention heads per TP rank"
    ]


def test_a2a_cp_with_mla_runs_on_mindspeed_only() -> None:
    """Transformer Engine's all-to-all has no MLA path; MindSpeed's Ulysses splits MLA's
    per-head K and V like any other heads."""
    deepseek = model("deepseek_v2_lite")
    train = make_train(seq_len=4096, global_batch_size=1024, cp_comm_type="a2a")
    found = _violations(Layout(dp=16, cp=2), deepseek, train=train)
    assert found == ["cp=2 with cp_comm_type a2a: Transformer Engine runs no MLA a2a"]
    mindspeed = make_train("mindspeed", seq_len=4096, global_batch_size=1024, cp_comm_type="a2a")
    assert _violations(Layout(dp=16, cp=2), deepseek, train=mindspeed) == []


def test_ep_needs_moe() -> None:
    found = _violations(Layout(dp=4, tp=8, ep=2, sequence_parallel=True))
    assert found == ["ep=2 needs a mixture-of-experts model; Llama-2-70B is dense"]


def test_ep_must_divide_experts() -> None:
    found = _violations(Layout(dp=32, ep=16), MIXTRAL)
    assert found == ["ep=16 does not divide num_experts=8"]


def test_expert_grid_must_divide_world() -> None:
    found = _violations(Layout(dp=4, tp=2, pp=4, ep=8, sequence_parallel=True), MIXTRAL)
    assert found == ["expert grid etp(2) * ep(8) * pp(4) = 64 does not divide the world size 32"]


CORE = make_train("megatron_core", seq_len=4096, global_batch_size=1024)


def test_expert_tp_equal_to_tp_is_the_default_spelling() -> None:
    """One layout, one spelling: ETP = TP is ``etp=None`` (Megatron's default when
    --expert-tensor-parallel-size is not given), so equal layouts compare and hash equal."""
    assert Layout(dp=8, tp=4, ep=8, etp=4) == Layout(dp=8, tp=4, ep=8)
    assert Layout(dp=8, tp=4, ep=8, etp=4).etp is None
    assert Layout(dp=8, tp=4, ep=8).expert_tp == 4
    assert Layout(dp=8, tp=4, ep=8, etp=1).expert_tp == 1


def test_expert_grid_folds_with_its_own_tp() -> None:
    """MoE parallel folding: TP 4 for attention, ETP 1 x EP 8 x expert-DP 4 for the experts
    (32 ranks), numbered ETP fastest (parallel_state.py's expert rank generator)."""
    lay = Layout(dp=8, tp=4, ep=8, etp=1, sequence_parallel=True)
    assert _violations(lay, MIXTRAL, CORE) == []
    assert lay.expert_dp == 4
    assert lay.group("etp", devices_per_node=8).size == 1
    assert (lay.group("ep", 8).size, lay.group("ep", 8).stride) == (8, 1)
    assert (lay.group("edp", 8).size, lay.group("edp", 8).stride) == (4, 8)
    assert lay.describe().startswith("dp8 tp4 pp1 cp1 ep8 etp1 vpp1")
    assert "etp" not in Layout(dp=8, tp=4, ep=8).describe()


def test_expert_grid_uses_expert_tp() -> None:
    found = _violations(Layout(dp=8, tp=4, ep=8, etp=8, sequence_parallel=True), MIXTRAL, CORE)
    assert found == ["expert grid etp(8) * ep(8) * pp(1) = 64 does not divide the world size 32"]


def test_expert_tp_needs_experts_and_a_framework_that_splits_them_alone() -> None:
    dense = _violations(Layout(dp=8, tp=4, etp=1, sequence_parallel=True), LLAMA2_70B, CORE)
    assert dense == ["etp=1 needs a mixture-of-experts model; Llama-2-70B is dense"]
    old = _violations(Layout(dp=8, tp=4, ep=8, etp=1, sequence_parallel=True), MIXTRAL)
    assert old == ["etp=1: megatron_lm splits experts over TP only (etp must equal tp=4)"]


def test_ep_with_tp_needs_sequence_parallel() -> None:
    found = _violations(Layout(dp=16, tp=2, ep=2), MIXTRAL)
    assert found == ["ep > 1 with tp > 1 needs sequence_parallel (model_parallel_config.py)"]


def test_sequence_parallel_needs_tp() -> None:
    assert _violations(Layout(dp=32, sequence_parallel=True)) == ["sequence_parallel needs tp > 1"]


@pytest.mark.parametrize(("seq_len", "cp", "broken"), [(4092, 1, True), (4096, 2, False)])
def test_sequence_parallel_splits_each_cp_ranks_sequence_evenly_over_tp(
    seq_len: int, cp: int, broken: bool
) -> None:
    """Megatron's _split_along_first_dim asserts it; the hierarchical simulator's meta tensors
    of seq / tp rows would not add up to the sequence (issue 27)."""
    lay = Layout(dp=4 // cp, tp=8, cp=cp, sequence_parallel=True)
    found = _violations(lay, train=make_train(seq_len=seq_len, global_batch_size=1024))
    expected = (
        f"sequence_parallel with tp=8 needs seq_len={seq_len} divisible by cp*tp={8 * cp} (tp "
        "splits each CP rank's sequence)"
    )
    assert found == ([expected] if broken else [])
    without = dataclasses.replace(lay, sequence_parallel=False)
    assert _violations(without, train=make_train(seq_len=seq_len, global_batch_size=1024)) == []


def test_broken_rules_name_each_rule_with_its_sentences() -> None:
    lay = Layout(dp=3, tp=3, pp=3, micro_batch=1, sequence_parallel=False)
    broken = lay.broken_rules(Job(model=LLAMA2_70B, cluster=CLUSTER_4X8, train=TRAIN))
    assert set(broken) <= set(RULE_NAMES)
    assert [s for sentences in broken.values() for s in sentences] == _violations(lay)
    assert broken["heads"] == [
        "tp=3 does not divide num_attention_heads=64",
        "tp=3 and num_kv_heads=8: neither divides the other",
    ]


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
    assert dataclasses.replace(lay, recompute_layers=5).recomputed_layers(20, TRAIN) == 5
    assert dataclasses.replace(lay, recompute_layers=None).recomputed_layers(20, TRAIN) == 20


def test_several_violations_at_once() -> None:
    lay = Layout(dp=3, tp=3, pp=3, micro_batch=1, sequence_parallel=False, recompute_layers=1)
    found = _violations(lay)
    assert found == [
        "dp(3) * tp(3) * pp(3) * cp(1) = 27 != 32 devices of cluster ascend",
        "tp=3 does not divide num_attention_heads=64",
        "tp=3 and num_kv_heads=8: neither divides the other",
        "pp=3 does not divide num_layers=80 (megatron_lm splits layers evenly only)",
        "micro_batch(1) * dp(3) = 3 does not divide global_batch_size=1024",
        "recompute_layers=1 needs recompute=full",
    ]
    with pytest.raises(LayoutError) as info:
        lay.check(Job(model=LLAMA2_70B, cluster=CLUSTER_4X8, train=TRAIN))
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


CORE = make_train("megatron_core", seq_len=4096, global_batch_size=1024)
DEEPSPEED = make_train("megatron_deepspeed", seq_len=4096, global_batch_size=1024)


@pytest.mark.parametrize(
    ("train", "split"),
    [
        (CORE, (26, 27, 27)),  # the extra layers go to the middle stages
        (DEEPSPEED, (27, 27, 26)),  # DeepSpeed's partition: the first stages take them
    ],
    ids=["megatron_core", "megatron_deepspeed"],
)
def test_default_split_when_pp_does_not_divide(train: TrainSpec, split: tuple[int, ...]) -> None:
    lay = Layout(dp=1, tp=8, pp=3, sequence_parallel=True)
    cluster = ascend(3)  # 24 NPUs
    assert lay.violations(Job(model=LLAMA2_70B, cluster=cluster, train=train)) == []
    assert lay.stage_layers(LLAMA2_70B, train) == split
    assert sum(split) == 80


def test_explicit_split_rules() -> None:
    lay = Layout(dp=1, tp=8, pp=4, sequence_parallel=True, layer_split=(19, 21, 21, 19))
    assert _violations(lay, train=CORE) == []
    assert lay.stage_layers(LLAMA2_70B, CORE) == (19, 21, 21, 19)
    assert lay.describe().endswith("split=19/21/21/19")
    short = dataclasses.replace(lay, layer_split=(20, 20, 20))
    assert _violations(short, train=CORE) == [
        "layer_split has 3 stages, expected pp=4",
        "layer_split [20, 20, 20] sums to 60, expected num_layers=80",
    ]
    assert _violations(lay, train=DEEPSPEED) == [
        "megatron_deepspeed cannot run layer_split [19, 21, 21, 19]; its only split for pp=4 "
        "is [20, 20, 20, 20]"
    ]
    with pytest.raises(SpecError, match="a stage with no layers"):
        dataclasses.replace(lay, layer_split=(40, 0, 20, 20))


def test_virtual_stages_with_an_uneven_split() -> None:
    cluster = ascend(3)
    lay = Layout(dp=1, tp=8, pp=3, vpp=2, sequence_parallel=True)
    core = make_train("megatron_core", seq_len=4096, global_batch_size=1536)  # m % pp == 0
    deepspeed = make_train("megatron_deepspeed", seq_len=4096, global_batch_size=1536)
    job = Job(model=LLAMA2_70B, cluster=cluster, train=core)
    assert lay.violations(job) == []
    # chunk (c, r) at index c * pp + r: each stage's layers dealt over its 2 chunks
    assert lay.chunk_layers(LLAMA2_70B, core) == (13, 14, 14, 13, 13, 13)
    assert lay.violations(Job(model=LLAMA2_70B, cluster=cluster, train=deepspeed)) == [
        "vpp=2: megatron_deepspeed has no virtual pipeline stages"
    ]
    # a chunk may be empty (Megatron: the embedding's or the loss's own virtual stage)
    thin = dataclasses.replace(lay, vpp=2, layer_split=(1, 40, 39))
    assert thin.violations(job) == []
    assert thin.chunk_layers(LLAMA2_70B, core) == (1, 20, 20, 0, 20, 19)


def test_resolve_and_from_dict_take_a_split_as_a_list() -> None:
    lay = Layout.resolve(32, tp=8, pp=4, layer_split=[19, 21, 21, 19])
    assert lay.layer_split == (19, 21, 21, 19)
    assert Layout.from_dict(lay.as_dict() | {"layer_split": [19, 21, 21, 19]}) == lay


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"tp": 2.0}, "tp=2.0 must be an integer"),
        ({"pp": "2"}, "pp='2' must be an integer"),
        ({"tp": 2**21}, "tp=2097152 must be <= 1,048,576"),
        ({"micro_batch": 10**9}, "micro_batch=1000000000 must be <="),
        (
            {"recompute": "full", "recompute_layers": 1.5},
            "recompute_layers=1.5 must be an integer",
        ),
    ],
)
def test_layout_checks_types_and_bounds(values: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        Layout(**values)  # type: ignore[arg-type]
