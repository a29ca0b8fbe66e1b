"""The frameworks' facts (conf/framework/) and what they change in the simulators."""

from __future__ import annotations

import dataclasses

import pytest

from autotune import catalog
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import ModelSpec
from autotune.simulators import SpecError
from autotune.simulators import TrainSpec
from autotune.simulators.frameworks import FrameworkSpec
from autotune.simulators.frameworks import deepspeed_split
from autotune.simulators.frameworks import deepspeed_splits
from tests.simulators_tests._specs import analytical
from tests.simulators_tests._specs import ascend
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model

CORE = catalog.load_framework("megatron_core")
DEEPSPEED = catalog.load_framework("megatron_deepspeed")
LEGACY = catalog.load_framework("megatron_lm")


def test_every_framework_loads() -> None:
    for name in catalog.options("framework"):
        framework = catalog.load_framework(name)
        assert framework.name == name
        sharded = max(framework.zero_stages)  # every framework shards its optimizer states
        assert framework.state_bytes("bf16", sharded).sharded_optimizer > 0


def test_default_splits_follow_each_framework() -> None:
    assert CORE.default_split(80, 4) == (20, 20, 20, 20)
    assert CORE.default_split(30, 4) == (7, 8, 8, 7)  # the extra layers to the middle
    assert DEEPSPEED.default_split(30, 4) == (8, 8, 7, 7)  # DeepSpeed: the first stages
    assert DEEPSPEED.default_split(61, 8) == (8, 8, 8, 8, 8, 7, 7, 7)
    assert sum(CORE.default_split(61, 16)) == 61


def test_which_splits_a_framework_can_run() -> None:
    assert CORE.can_split((19, 21, 21, 19), 80)
    assert DEEPSPEED.can_split((8, 8, 7, 7), 30) and not DEEPSPEED.can_split((6, 8, 8, 8), 30)
    assert LEGACY.can_split((20, 20, 20, 20), 80) and not LEGACY.can_split((8, 8, 7, 7), 30)


def test_deepspeed_splits_as_each_release_and_partition_method_run_them() -> None:
    # docs/reference.md 7.1: DeepSpeed >= 0.12.5 puts the extra layers first; before it,
    # partition_balanced fills stages up to ceil(L / pp) and leaves the rest to the last one;
    # BigScience's 'type:transformer|embedding' counts the two embedding copies as layers.
    assert deepspeed_split(30, 4, balanced=False, embedding_slots=False) == (8, 8, 7, 7)
    assert deepspeed_split(30, 4, balanced=True, embedding_slots=False) == (8, 8, 8, 6)
    assert deepspeed_split(78, 12, balanced=True, embedding_slots=False) == (7,) * 11 + (1,)
    assert deepspeed_split(70, 12, balanced=True, embedding_slots=False) == (6,) * 11 + (4,)
    assert deepspeed_split(70, 12, balanced=True, embedding_slots=True) == (5,) + (6,) * 10 + (5,)
    assert deepspeed_split(30, 4, balanced=False, embedding_slots=True) == (7, 8, 8, 7)
    assert deepspeed_splits(30, 4) == ((8, 8, 7, 7), (8, 8, 8, 6), (7, 8, 8, 7))
    assert deepspeed_splits(8, 1) == ((8,),)  # one stage holds both embeddings and every layer
    assert deepspeed_splits(12, 12) == ((1,) * 12,)  # an end stage of 0 layers is left out
    for layers, pp in ((78, 12), (106, 12), (61, 8), (7, 4)):
        for split in deepspeed_splits(layers, pp):
            assert sum(split) == layers and len(split) == pp and min(split) >= 1
            assert DEEPSPEED.can_split(split, layers)


def test_light_ends_variant_counts_the_embedding_and_the_loss() -> None:
    # Megatron --account-for-embedding/loss-in-pipeline-split: 30 + 2 slots over 4 stages of
    # 8, the end stages one layer short: 7, 8, 8, 7 (docs/reference.md 7.1).
    assert CORE.split_variants(30, 4) == {"default": (7, 8, 8, 7)}  # the default already is
    assert CORE.split_variants(80, 4) == {"default": (20,) * 4, "light_ends": (19, 21, 21, 19)}
    assert DEEPSPEED.split_variants(80, 4) == {"default": (20,) * 4}  # no other split
    assert CORE.split_variants(32, 2) == {"default": (16, 16)}


def test_gradient_reduction_sizes() -> None:
    assert CORE.grad_reduce_bytes("bf16") == 4  # Megatron reduces bf16 grads in fp32
    assert DEEPSPEED.grad_reduce_bytes("bf16") == 2  # DeepSpeed in the model's dtype
    assert CORE.grad_reduce_bytes("fp16") == DEEPSPEED.grad_reduce_bytes("fp16") == 2
    assert CORE.grad_buckets(100e6, dp=8, overlapped=True) == 3  # buckets of max(40M, 8M)
    assert CORE.grad_buckets(100e6, dp=64, overlapped=True) == 2  # buckets of 64M
    assert CORE.grad_buckets(100e6, dp=8, overlapped=False) == 1  # after the pipeline, at once


def _step(framework: str = "megatron_core", **values: object) -> TrainSpec:
    return make_train(framework, seq_len=2048, global_batch_size=16, **values)


def test_unset_dp_overlap_follows_the_framework() -> None:
    assert _step().overlaps_grad_reduce and _step().overlaps_param_gather
    assert not _step("megatron_deepspeed").overlaps_grad_reduce
    assert not _step("mindspeed").overlaps_grad_reduce  # most of its scripts leave it off
    assert _step("mindspeed", overlap_grad_reduce=True).overlaps_grad_reduce
    # Megatron runs the parameter all-gather overlap only with the gradient overlap.
    quiet = _step(overlap_grad_reduce=False)
    assert not quiet.overlaps_grad_reduce and not quiet.overlaps_param_gather
    assert not _step(overlap_param_gather=False).overlaps_param_gather


def test_a_dp_overlap_the_stack_cannot_run_is_refused() -> None:
    with pytest.raises(SpecError, match="framework 'megatron_deepspeed' reduces them after"):
        _step("megatron_deepspeed", overlap_grad_reduce=True)
    with pytest.raises(SpecError, match="overlap_param_gather needs overlap_grad_reduce"):
        _step(overlap_grad_reduce=False, overlap_param_gather=True)
    with pytest.raises(SpecError, match="overlap_param_gather needs overlap_grad_reduce"):
        _step("mindspeed", overlap_param_gather=True)  # MindSpeed's default leaves it off
    with pytest.raises(SpecError, match="overlap_grad_reduce needs can_overlap_grad_reduce"):
        FrameworkSpec.from_mapping("x", {**_values(DEEPSPEED), "overlap_grad_reduce": True})
    with pytest.raises(SpecError, match="train: overlap_grad_reduce=.yes. must be true or false"):
        _step(overlap_grad_reduce="yes")


@pytest.mark.parametrize("name", ["analytical", "hierarchical"])
def test_a_run_without_the_dp_overlap_waits_for_its_reduction(name: str) -> None:
    """Same job and layout: without --overlap-grad-reduce the reduce-scatter runs after the
    pipeline, without --overlap-param-gather the all-gather before the next step."""
    llama = model("llama2_7b", num_layers=4)
    layout = Layout.resolve(8, tp=1, pp=1, dp=8, distributed_optimizer=True)
    runs = [
        catalog.load_simulator(name).simulate(
            Job(
                model=llama,
                cluster=ascend(1),
                train=make_train(seq_len=2048, global_batch_size=16, **values),
            ),
            layout,
        )
        for values in (
            {},
            {"overlap_param_gather": False},
            {"overlap_grad_reduce": False},
        )
    ]
    dp = [run.breakdown["dp_comm"] for run in runs]
    assert dp[0] < dp[1] < dp[2]
    assert runs[0].step_time_s < runs[1].step_time_s < runs[2].step_time_s


def test_a_release_is_one_the_framework_file_knows() -> None:
    """framework.release picks one of the file's releases; another is refused with the list."""
    assert catalog.load_framework("mindspeed").release == "26.0.0"  # the maintained release
    assert catalog.load_framework("mindspeed", "26.1.0").release == "26.1.0"
    assert catalog.load_framework("megatron_core", "main").releases[-1] == "main"
    with pytest.raises(SpecError, match="supported: 26.0.0, 26.1.0, master$"):
        catalog.load_framework("mindspeed", "2.3.0")
    with pytest.raises(SpecError, match="release='x' is not a release of x"):
        FrameworkSpec.from_mapping("x", {**_values(CORE), "release": "x"})
    with pytest.raises(SpecError, match="releases=.1. must be a list of texts"):
        FrameworkSpec.from_mapping("x", {**_values(CORE), "releases": [1]})


def test_a_framework_file_with_a_typo_is_refused() -> None:
    values = {"layer_split": "any"}
    with pytest.raises(SpecError, match="framework 'x': missing key"):
        FrameworkSpec.from_mapping("x", values)
    with pytest.raises(SpecError, match="layer_split='ragged' is not one of even, any, deepspeed"):
        FrameworkSpec.from_mapping("x", {**_values(CORE), "layer_split": "ragged"})
    with pytest.raises(SpecError, match="logged_peak_memory='max' is not one of allocated, res"):
        FrameworkSpec.from_mapping("x", {**_values(CORE), "logged_peak_memory": "max"})


def _values(framework: FrameworkSpec) -> dict[str, object]:
    return catalog.plain(catalog.compose(None, [f"+framework={framework.name}"]).framework)


def test_deepspeed_reduces_gradients_after_the_pipeline() -> None:
    """Same job and layout: Megatron-Core hides the reduction behind the last backward,
    DeepSpeed's pipeline runs it after every micro-batch (docs/reference.md 7.2)."""
    llama = model("llama2_7b", num_layers=8)
    layout = Layout.resolve(16, tp=1, pp=1, distributed_optimizer=False)
    core = analytical().simulate(
        Job(model=llama, cluster=ascend(2), train=make_train(seq_len=2048, global_batch_size=16)),
        layout,
    )
    train = make_train("megatron_deepspeed", seq_len=2048, global_batch_size=16, precision="bf16")
    deepspeed = analytical().simulate(Job(model=llama, cluster=ascend(2), train=train), layout)
    assert deepspeed.breakdown["dp_comm"] > core.breakdown["dp_comm"]
    # DeepSpeed's bf16 optimizer keeps fp32 grads (4) and bf16 grads (2); shards the rest
    assert deepspeed.memory_breakdown_gib["gradients"] == pytest.approx(
        1.5 * core.memory_breakdown_gib["gradients"]
    )
    assert deepspeed.memory_breakdown_gib["optimizer"] == pytest.approx(
        core.memory_breakdown_gib["optimizer"] / 16
    )


def test_unset_cp_exchange_follows_the_framework() -> None:
    assert _step().context_exchange == _step("mindspeed").context_exchange == "p2p"
    assert _step(cp_comm_type="a2a").context_exchange == "a2a"
    assert CORE.cp_comm_types == ("p2p", "a2a") and LEGACY.cp_comm_types == ()
    assert _step("megatron_deepspeed").context_exchange == "a2a"  # DeepSpeed-Ulysses only


def test_a_cp_exchange_the_stack_cannot_run_is_refused() -> None:
    with pytest.raises(SpecError, match="cp_comm_type='ring' is not one of p2p, a2a"):
        _step(cp_comm_type="ring")
    with pytest.raises(SpecError, match="'megatron_lm' .it has no context parallelism"):
        _step("megatron_lm", cp_comm_type="a2a")
    with pytest.raises(SpecError, match="'megatron_deepspeed' .use a2a"):
        _step("megatron_deepspeed", cp_comm_type="p2p")
    with pytest.raises(SpecError, match="cp_comm_types='all_gather' is not one of p2p, a2a"):
        FrameworkSpec.from_mapping("x", {**_values(CORE), "cp_comm_types": ["all_gather"]})
    with pytest.raises(SpecError, match="cp_a2a_style='ulysses' is not one of te, deepspeed"):
        FrameworkSpec.from_mapping("x", {**_values(CORE), "cp_a2a_style": "ulysses"})


def test_a_moe_dispatcher_the_stack_cannot_run_is_refused() -> None:
    """Each stack lists its dispatchers, its default first (every one's is alltoall)."""
    assert _step().token_dispatcher == "alltoall"
    assert _step("mindspeed", moe_dispatcher="allgather").token_dispatcher == "allgather"
    with pytest.raises(SpecError, match="allgather does not run on .*'megatron_lm'"):
        _step("megatron_lm", moe_dispatcher="allgather")
    with pytest.raises(SpecError, match="moe_dispatchers='flex' is not one of alltoall"):
        FrameworkSpec.from_mapping("x", {**_values(CORE), "moe_dispatchers": ["flex"]})
    with pytest.raises(SpecError, match="moe_dispatchers lists none; it needs its default"):
        FrameworkSpec.from_mapping("x", {**_values(CORE), "moe_dispatchers": []})
    allgather_first = {**_values(CORE), "moe_dispatchers": ["allgather", "alltoall"]}
    assert FrameworkSpec.from_mapping("x", allgather_first).moe_dispatchers[0] == "allgather"


def _cp_runs(framework: str, layout: Layout) -> dict[tuple[str, str], object]:
    """Both simulators, the ring and the all-to-all, on Llama-3-8B (32 heads, 8 KV heads) at
    a 32K sequence on one Atlas node."""
    llama = model("llama3_8b", num_layers=4)
    return {
        (name, exchange): catalog.load_simulator(name).simulate(
            Job(
                model=llama,
                cluster=ascend(1),
                train=make_train(
                    framework, seq_len=32768, global_batch_size=4, cp_comm_type=exchange
                ),
            ),
            layout,
        )
        for name in ("analytical", "hierarchical")
        for exchange in ("p2p", "a2a")
    }


@pytest.mark.parametrize("framework", ["megatron_core", "mindspeed"])
def test_both_simulators_price_the_ulysses_all_to_alls_alike(framework: str) -> None:
    """The all-to-alls block the step where the ring hides partly under attention; the two
    simulators, one by formula and one by recorded ops, agree on them and on memory."""
    runs = _cp_runs(framework, Layout.resolve(8, tp=2, cp=4, sequence_parallel=True))
    for name in ("analytical", "hierarchical"):
        assert runs[name, "a2a"].breakdown["cp_comm"] > 0
        assert runs[name, "a2a"].step_time_s != runs[name, "p2p"].step_time_s
    a2a = [runs[name, "a2a"] for name in ("analytical", "hierarchical")]
    assert a2a[0].breakdown["cp_comm"] == pytest.approx(a2a[1].breakdown["cp_comm"], rel=0.03)
    assert a2a[0].memory_gib == pytest.approx(a2a[1].memory_gib, rel=0.01)


def test_deepspeed_style_ulysses_keeps_more_than_transformer_engine() -> None:
    """Per layer, MindSpeed's Ulysses keeps K and V repeated to the 16 query heads of a TP
    rank (not its 4 KV heads) and the kernel's own output (TE keeps only the exchanged one):
    (2 * 16 - 2 * 4 + 16) * 128 bf16 values per token more (docs/reference.md 3.5)."""
    layout = Layout.resolve(8, tp=2, cp=4, sequence_parallel=True)
    te, deepspeed = (_cp_runs(framework, layout) for framework in ("megatron_core", "mindspeed"))
    tokens = 32768 // 4
    extra_gib = 4 * tokens * (2 * 16 - 2 * 4 + 16) * 128 * 2 / 2**30
    for name in ("analytical", "hierarchical"):
        grown = {
            style: runs[name, "a2a"].memory_breakdown_gib["activations"]
            - runs[name, "p2p"].memory_breakdown_gib["activations"]
            for style, runs in (("te", te), ("deepspeed", deepspeed))
        }
        assert grown["deepspeed"] - grown["te"] == pytest.approx(extra_gib, rel=0.02)


def test_ring_attention_keeps_only_the_local_kv_chunks() -> None:
    """Transformer Engine's ring keeps this rank's K and V and passes them round again in
    backward: the hierarchical simulator's recorded saves match the analytical count, which
    never held the gathered sequence (Llama-2-7B: as many KV heads as query heads)."""
    llama = model("llama2_7b", num_layers=4)
    train = make_train(seq_len=32768, global_batch_size=4)
    layout = Layout.resolve(8, tp=2, cp=4, sequence_parallel=True)
    memory = [
        catalog.load_simulator(name)
        .simulate(Job(model=llama, cluster=ascend(1), train=train), layout)
        .memory_gib
        for name in ("analytical", "hierarchical")
    ]
    assert memory[1] == pytest.approx(memory[0], rel=0.005)


def test_the_ring_hides_under_attention_in_both_passes_alike() -> None:
    """The CP ring's steps cross one peer link each (a full mesh gives a pair one HCCS link,
    not the node's aggregate), and run beside the attention kernels of the forward and of the
    backward: both simulators expose about the same part of it."""
    llama = model("llama2_7b", num_layers=4)
    train = make_train(seq_len=32768, global_batch_size=4)
    layout = Layout.resolve(8, tp=2, cp=4, sequence_parallel=True)
    exposed = [
        catalog.load_simulator(name)
        .simulate(Job(model=llama, cluster=ascend(1), train=train), layout)
        .breakdown["cp_comm"]
        for name in ("analytical", "hierarchical")
    ]
    assert exposed[0] > 0
    assert exposed[1] == pytest.approx(exposed[0], rel=0.2)


def test_the_ring_hides_under_the_unfused_attention_backward_as_it_runs() -> None:
    """Without flash attention the backward's kernels are not 2.5 times the forward's (the
    flash kernel's ratio): the ring hides under the unfused backward's own time, in both
    simulators (Llama-2-13B on V100, seq 4096 over CP 4: the exposed ring agrees to 3%)."""
    job = catalog.load_job(
        "llama2_13b",
        "v100",
        ["cluster.num_nodes=2", "train.framework=mindspeed", "model.num_layers=4"],
    )
    assert not job.flash_attention
    layout = Layout.resolve(16, tp=4, cp=4, micro_batch=1)
    exposed = [
        catalog.load_simulator(name).simulate(job, layout).breakdown["cp_comm"]
        for name in ("analytical", "hierarchical")
    ]
    assert exposed[0] == pytest.approx(exposed[1], rel=0.03)


def test_each_stack_accumulates_weight_gradients_its_own_way() -> None:
    """Bytes moved per parameter and micro-batch to accumulate weight gradients, beyond the
    weight-gradient GEMM (docs/reference.md 7.2), worked out by hand."""
    from autotune.simulators.states import grad_accumulation_bytes

    def per_param(framework: str, distributed: bool = False, **values: object) -> float:
        train = make_train(framework, **{"seq_len": 2048, "global_batch_size": 32, **values})
        layout = Layout(dp=8, micro_batch=1, distributed_optimizer=distributed)  # m = 4
        return grad_accumulation_bytes(train, layout)

    assert per_param("megatron_core") == per_param("megatron_lm") == 0.0  # in the GEMM
    # MindSpeed's DDP hook: main_grad.add_(grad) reads 2 + 4, writes 4; a bf16 buffer 2 + 2 + 2.
    assert per_param("mindspeed") == 10.0
    assert per_param("mindspeed", grad_reduce_in_fp32=False) == 6.0
    # DeepSpeed: param.grad += grad (2 + 2 + 2) in 3 of the 4 micro-batches; the first one's
    # gradient becomes param.grad. BF16_Optimizer (bf16 without ZeRO) sets param.grad to None
    # before every backward, casts the gradient (2 + 4) and adds it into its fp32 buffer
    # (4 + 4 + 4): 18.
    assert per_param("megatron_deepspeed", distributed=True) == pytest.approx(6 * 3 / 4)
    assert per_param("megatron_deepspeed", precision="fp16") == pytest.approx(6 * 3 / 4)
    assert per_param("megatron_deepspeed") == 18.0
    # One micro-batch: autograd's gradient is the gradient, nothing to add.
    one = make_train("megatron_deepspeed", seq_len=2048, global_batch_size=8, precision="fp16")
    assert grad_accumulation_bytes(one, Layout(dp=8, micro_batch=1)) == 0.0
    # Grouped-GEMM experts accumulate inside their GEMM on MindSpeed.
    ascend_train = make_train("mindspeed", seq_len=2048, global_batch_size=32)
    assert grad_accumulation_bytes(ascend_train, Layout(dp=8), expert=True) == 0.0


def test_gradient_accumulation_adds_to_the_backward_in_both_simulators() -> None:
    """One pipeline rank holding every parameter: the step's compute grows by m x bytes x
    parameters / achieved HBM bandwidth when the framework accumulates outside the GEMM."""
    import dataclasses

    from autotune.simulators.hierarchical import HierarchicalSimulator

    spec = dataclasses.replace(model("llama2_7b"), num_layers=2)
    cluster = ascend(1)
    fused = dataclasses.replace(catalog.load_framework("mindspeed"), grad_accumulation="fused")
    train = make_train("mindspeed", seq_len=1024, global_batch_size=16)
    layout = Layout.resolve(8, tp=8)  # m = 16
    hierarchical = HierarchicalSimulator.from_config(catalog.simulator_constants("hierarchical"))
    for simulator in (analytical(), hierarchical):
        hooked = simulator.simulate(Job(model=spec, cluster=cluster, train=train), layout)
        in_gemm = simulator.simulate(
            Job(model=spec, cluster=cluster, train=dataclasses.replace(train, framework=fused)),
            layout,
        )
        params = spec.num_params / 8  # split over TP 8 (the replicated norms: a rounding error)
        expected = 16 * 10 * params / cluster.device.achieved_memory_bytes_per_s
        extra = hooked.breakdown["compute"] - in_gemm.breakdown["compute"]
        assert extra == pytest.approx(expected, rel=0.02), type(simulator).__name__


def test_megatron_deepspeed_keeps_flash_attention_s_output_twice() -> None:
    """Its FlashSelfAttention's output is saved by flash-attn and, rearranged, by the output
    projection: one attention output more per layer than Megatron-Core keeps, unless selective
    recompute reruns the kernel or the path is unfused (docs/reference.md 3.3)."""
    from autotune.simulators.analytical.layer import layer_bytes

    spec = model("llama2_7b")
    cluster = ascend(1)
    c = analytical().constants

    def saved(framework: str, recompute: str = "none", flash: bool = True) -> float:
        train = make_train(framework, seq_len=2048, global_batch_size=8, flash_attention=flash)
        layout = Layout(dp=4, tp=2, recompute=recompute, sequence_parallel=False)
        return layer_bytes(Job(model=spec, cluster=cluster, train=train), False, layout, c)[0]

    copy = 2048 * spec.attn_out_width / 2 * 2  # tokens x width / tp x 2 bytes
    # Its SwiGLU also keeps SiLU's output (docs/reference.md 3.3), whatever the attention.
    silu = 2048 * spec.ffn_hidden_size / 2 * 2
    assert saved("megatron_deepspeed") - saved("megatron_core") == pytest.approx(copy + silu)
    # The hierarchical simulator records the copy (a clone the projection saves).
    from autotune.simulators.hierarchical.compile import compile_layer
    from autotune.simulators.hierarchical.graph import layer_shapes

    def recorded(framework: str) -> float:
        train = make_train(framework, seq_len=2048, global_batch_size=8)
        layout = Layout(dp=4, tp=2, sequence_parallel=False)
        return compile_layer(
            layer_shapes(Job(model=spec, cluster=cluster, train=train), layout)["dense"]
        ).saved_bytes

    assert recorded("megatron_deepspeed") - recorded("megatron_core") == pytest.approx(copy + silu)
    assert saved("megatron_deepspeed", "selective") - saved(
        "megatron_core", "selective"
    ) == pytest.approx(silu)
    assert saved("megatron_deepspeed", flash=False) - saved(
        "megatron_core", flash=False
    ) == pytest.approx(silu)


def test_a_stack_without_flash_attention_runs_the_unfused_path() -> None:
    """Megatron-LM of 2020-22 predates FlashAttention in Megatron (2022-12): its jobs run the
    unfused path on any device, and say so (docs/reference.md 3.3)."""
    a100 = catalog.load_cluster("a100")
    legacy = make_train("megatron_lm", seq_len=2048, global_batch_size=8)
    core = make_train("megatron_core", seq_len=2048, global_batch_size=8)
    assert legacy.flash_attention and not legacy.uses_flash_attention(a100)
    assert core.uses_flash_attention(a100)
    assert "unfused attention" in legacy.describe()
    assert "unfused attention" not in core.describe()


def test_dropout_is_a_setting_of_the_run_in_both_simulators() -> None:
    """Dropout follows the run: by hand, the unfused path keeps 5 bytes per score with it
    (Korthikanti's 5as/h: softmax output, 1-byte mask, dropout output) and the softmax output
    alone without it, and each residual add keeps a 1-byte hidden mask; unset, the model's
    recipe decides (GPT family 0.1, the others 0). Both simulators keep the same bytes."""
    from autotune.simulators.analytical.layer import layer_bytes
    from autotune.simulators.hierarchical.compile import compile_layer
    from autotune.simulators.hierarchical.graph import layer_shapes

    gpt, llama = model("gpt3_175b"), model("llama2_7b")
    cluster = ascend(1)
    c = analytical().constants
    layout = Layout(dp=4, tp=2, sequence_parallel=False)
    tokens = 1024

    def saved(spec: ModelSpec, dropout: float | None, flash: bool) -> tuple[float, float]:
        train = make_train(
            "megatron_core",
            seq_len=tokens,
            global_batch_size=8,
            flash_attention=flash,
            dropout=dropout,
        )
        job = Job(model=spec, cluster=cluster, train=train)
        analytical_bytes = layer_bytes(job, False, layout, c)[0]
        shape = layer_shapes(job, layout)["dense"]
        return analytical_bytes, compile_layer(shape).saved_bytes

    for spec in (gpt, llama):
        heads = spec.num_attention_heads / layout.tp
        scores = tokens * heads * tokens
        masks = 2 * tokens * spec.hidden_size  # two 1-byte hidden masks, no SP
        for flash, attention in ((True, 0.0), (False, 3 * scores)):
            off, on = saved(spec, 0.0, flash), saved(spec, 0.1, flash)
            for a, b in zip(on, off, strict=True):
                assert a - b == pytest.approx(masks + attention), (spec.name, flash)
            assert off[0] == pytest.approx(off[1], rel=1e-3)
            assert on[0] == pytest.approx(on[1], rel=1e-3)
            default = saved(spec, None, flash)
            assert default == (on if spec.is_gpt_family else off)


def test_dropout_probability_is_checked_and_described() -> None:
    gpt, llama = model("gpt3_175b"), model("llama2_7b")
    unset = make_train(seq_len=2048, global_batch_size=8)
    assert unset.dropout_of(gpt) == 0.1 and unset.drops_out(gpt)
    assert unset.dropout_of(llama) == 0.0 and not unset.drops_out(llama)
    assert "dropout" not in unset.describe()
    off = make_train(seq_len=2048, global_batch_size=8, dropout=0)
    assert not off.drops_out(gpt) and "no dropout" in off.describe()
    on = make_train(seq_len=2048, global_batch_size=8, dropout=0.05)
    assert on.drops_out(llama) and "dropout 0.05" in on.describe()
    for bad in (1.0, -0.1, float("nan"), True, "0.1"):
        with pytest.raises(SpecError, match="dropout"):
            make_train(seq_len=2048, global_batch_size=8, dropout=bad)


def _moe_saved(framework: str, precision: str = "bf16", tp: int = 1) -> tuple[float, float]:
    """Bytes one Mixtral-shaped MoE layer keeps for backward (analytical, hierarchical)."""
    from autotune.simulators.analytical.layer import layer_bytes
    from autotune.simulators.hierarchical.compile import compile_layer
    from autotune.simulators.hierarchical.graph import layer_shapes

    spec = dataclasses.replace(model("mixtral_8x7b"), num_layers=2)
    cluster = catalog.load_cluster("h100", ["cluster.num_nodes=1"])
    fw = catalog.load_framework(framework)
    train = TrainSpec(framework=fw, seq_len=1024, global_batch_size=8, precision=precision)
    layout = Layout.resolve(8, tp=tp, ep=8 // tp, sequence_parallel=tp > 1)
    job = Job(model=spec, cluster=cluster, train=train)
    analytical_bytes = layer_bytes(job, True, layout, analytical().constants)[0]
    shape = layer_shapes(job, layout)["moe"]
    return analytical_bytes, compile_layer(shape).saved_bytes


def test_the_combine_keeps_the_experts_outputs_unless_they_weight_their_activation() -> None:
    """Megatron-Core since core_v0.13.0 multiplies the router's probabilities into the experts'
    SwiGLU, and the combine only sums; the older combine multiplies the outputs by them and
    keeps the top-k outputs for the probabilities' gradient: k x h x 2 bytes per token more.
    Both simulators, and they agree (benchmarks/bench_memory_agreement.py)."""
    weighted, combined = _moe_saved("megatron_core"), _moe_saved("mindspeed")
    spec = model("mixtral_8x7b")
    outputs = 1024 * spec.moe_top_k * spec.hidden_size * 2
    for a, b in zip(combined, weighted, strict=True):
        assert a - b == pytest.approx(outputs, rel=1e-3)
    for pair in (weighted, combined, _moe_saved("megatron_core", tp=2)):
        assert pair[0] == pytest.approx(pair[1], rel=2e-3)


def test_fp8_layers_keep_their_own_copies_and_attention_its_bf16_output() -> None:
    """Under FP8 each Transformer Engine linear layer keeps a 1-byte copy of its input, while
    flash attention keeps its bf16 output and the router the MoE block's bf16 norm output: the
    simulators agree on an FP8 MoE layer, and FP8 saves less than bf16 but not half."""
    bf16, fp8 = _moe_saved("megatron_core"), _moe_saved("megatron_core", "fp8")
    assert fp8[0] == pytest.approx(fp8[1], rel=2e-3)
    assert 0.5 * bf16[0] < fp8[0] < bf16[0]
