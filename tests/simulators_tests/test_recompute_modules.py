"""Recompute by module (Megatron-Core's ``--recompute-modules``): the layout's spelling, its
rules, and what each simulator prices, by hand."""

from __future__ import annotations

import dataclasses

import pytest

from autotune import catalog
from autotune.simulators import ClusterSpec
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import ModelSpec
from autotune.simulators import SpecError
from autotune.simulators import TrainSpec
from autotune.simulators.analytical import gemm_time_s
from autotune.simulators.hierarchical.graph import layer_shapes
from autotune.simulators.recompute_modules import RECOMPUTE_MODULES
from tests.simulators_tests._specs import analytical
from tests.simulators_tests._specs import make_train
from tests.simulators_tests.test_analytical import DEVICE
from tests.simulators_tests.test_analytical import TINY
from tests.simulators_tests.test_analytical import cluster
from tests.simulators_tests.test_analytical_batch import assert_same

compile_mod = pytest.importorskip("autotune.simulators.hierarchical.compile")

GIB = 1024**3
TINY_MOE = dataclasses.replace(
    TINY, name="tiny-moe", num_experts=4, moe_top_k=2, expert_ffn_hidden_size=128
)
SELECTIVE = dict(recompute="selective")


# ---- the layout's spelling -----------------------------------------------------------------


def test_a_layout_spells_its_modules_once() -> None:
    """Sorted, each module once, and the default set (core attention) spelt None: equal
    layouts compare, hash and describe alike; a config's list becomes the tuple."""
    given = Layout(**SELECTIVE, recompute_modules=["mlp", "core_attn", "mlp"])  # type: ignore[arg-type]
    assert given.recompute_modules == ("core_attn", "mlp")
    assert given == Layout(**SELECTIVE, recompute_modules=("core_attn", "mlp"))
    assert hash(given) == hash(Layout(**SELECTIVE, recompute_modules=("mlp", "core_attn")))
    default = Layout(**SELECTIVE, recompute_modules=("core_attn",))
    assert default.recompute_modules is None and default == Layout(**SELECTIVE)
    assert default.recomputed_modules == ("core_attn",)
    assert Layout().recomputed_modules == ()  # no selective recompute, no modules
    assert given.describe().endswith("rc=selective:core_attn+mlp do")
    assert given.as_cells()["recompute_modules"] == "core_attn/mlp"
    assert (
        Layout.from_dict({**given.as_dict(), "recompute_modules": ["mlp", "core_attn"]}) == given
    )


@pytest.mark.parametrize("value", [["attention"], [], "mlp", ["core_attn", "moe_layer"]])
def test_a_module_name_that_is_not_one_is_refused_with_the_allowed_ones(value: object) -> None:
    with pytest.raises(SpecError, match=", ".join(RECOMPUTE_MODULES)):
        Layout(**SELECTIVE, recompute_modules=value)  # type: ignore[arg-type]


# ---- rules ---------------------------------------------------------------------------------


def _broken(
    model: ModelSpec,
    modules: tuple[str, ...],
    framework: str = "megatron_core",
    cluster_spec: ClusterSpec | None = None,
    recompute: str = "selective",
    **train: object,
) -> list[str]:
    spec = cluster_spec or cluster()
    layout = Layout.resolve(spec.num_devices, recompute=recompute, recompute_modules=modules)
    found = layout.broken_rules(
        Job(
            model=model,
            cluster=spec,
            train=make_train(framework, seq_len=32, global_batch_size=8, **train),
        )
    )
    return [sentence for sentences in found.values() for sentence in sentences]


def test_modules_the_model_lacks_are_refused() -> None:
    moe = catalog.load_model("mixtral_8x7b")  # no dense layer, no shared experts, GQA
    assert _broken(TINY, ("moe",)) == [
        "recompute module moe needs a mixture-of-experts model; tiny is dense"
    ]
    assert _broken(moe, ("mla_up_proj",)) == [
        "recompute module mla_up_proj needs multi-latent attention; Mixtral-8x7B has gqa"
    ]
    assert _broken(moe, ("shared_experts",)) == [
        "recompute module shared_experts: Mixtral-8x7B has no shared experts"
    ]
    assert _broken(moe, ("mlp",))[0].startswith("recompute module mlp recomputes dense MLPs")
    assert _broken(TINY, ("mlp",), recompute="full") == [
        "recompute_modules=[mlp] needs recompute=selective"
    ]


def test_modules_the_framework_cannot_checkpoint_are_refused() -> None:
    """Megatron-Core fuses a GQA layer's norms into its linear layers (no norm to recompute),
    MindSpeed-LLM runs its own; MindSpeed's grouped MLP has no Megatron moe_act checkpoint;
    Megatron-DeepSpeed checkpoints core attention only."""
    assert _broken(TINY, ("layernorm",))[0].startswith("recompute module layernorm: megatron_core")
    assert _broken(TINY, ("layernorm",), "mindspeed") == []
    assert _broken(TINY_MOE, ("layernorm",)) == []  # the router's norm runs on its own
    assert _broken(TINY_MOE, ("moe_act",), "mindspeed") == [
        "recompute module moe_act: mindspeed cannot recompute it (its modules: core_attn, "
        "layernorm, mlp, moe)"
    ]
    assert _broken(TINY, ("mlp",), "megatron_deepspeed")[0].startswith(
        "recompute module mlp: megatron_deepspeed cannot"
    )


def test_megatron_cores_own_refusals() -> None:
    """transformer_config.py: no moe_act or layernorm under FP8's delayed scaling, moe_act
    with grouped GEMMs (bf16 runs), no moe with the EP all-to-all overlap."""
    fp8 = _broken(TINY_MOE, ("layernorm", "moe_act"), precision="fp8")
    assert [s.split(" does")[0] for s in fp8] == [
        "recompute module layernorm",
        "recompute module moe_act",
    ]
    v100 = dataclasses.replace(cluster(), device=dataclasses.replace(DEVICE, bf16_tflops=0.0))
    assert "(this one runs fp16)" in _broken(TINY_MOE, ("moe_act",), cluster_spec=v100)[0]
    overlap = Layout(dp=8, ep=8, recompute="selective", recompute_modules=("moe",))
    train = make_train(seq_len=32, global_batch_size=8, moe_a2a_overlap=True)
    broken = overlap.broken_rules(Job(model=TINY_MOE, cluster=cluster(), train=train))
    assert broken["expert overlap"] == ["moe_a2a_overlap does not run with recompute module moe"]


# ---- the analytical simulator --------------------------------------------------------------


def _price(
    model: ModelSpec, train: TrainSpec, modules: tuple[str, ...] | None, *overrides: str
) -> tuple[float, float, float]:
    """(recompute seconds, TP seconds, activation bytes) of one layout of ``model``."""
    layout = Layout(recompute="selective", recompute_modules=modules)
    pred = analytical(*overrides).simulate(
        Job(model=model, cluster=cluster(), train=train), layout
    )
    activations = pred.memory_breakdown_gib["activations"] * GIB
    return pred.breakdown["recompute"], pred.breakdown["tp_comm"], activations


def test_analytical_mlp_recompute_by_hand() -> None:
    """TINY (h 64, SwiGLU f 256) at tp 1, 32 tokens, 2 layers, on Megatron-Core, whose
    pre-MLP norm runs inside linear_fc1: the MLP checkpoint keeps the layer's residual
    stream and frees, per token, the norm output (2 x 64), gate and up (2 x 2 x 256) and
    their product (2 x 256); its forward runs again in the backward (two GEMMs, the SwiGLU
    reading 2f and writing f, the norm reading and writing h)."""
    train = make_train(seq_len=32, global_batch_size=1)
    free_host = "simulator.host_op_overhead_us=0"  # no host bound: no checkpoint call costs
    core_s, core_tp, core_bytes = _price(TINY, train, None, free_host)
    mlp_s, mlp_tp, mlp_bytes = _price(TINY, train, ("core_attn", "mlp"), free_host)
    assert core_bytes - mlp_bytes == pytest.approx(2 * 32 * (128 + 1024 + 512))
    bandwidth = DEVICE.achieved_memory_bytes_per_s
    forward = gemm_time_s(32, 64, 512, DEVICE, "bf16") + gemm_time_s(32, 256, 64, DEVICE, "bf16")
    forward += 32 * (3 * 2 * 256 + 2 * 2 * 64) / bandwidth
    assert mlp_s - core_s == pytest.approx(2 * forward)  # 2 layers, 1 micro-batch
    assert mlp_tp == core_tp == 0.0  # tp 1
    # Without core attention the log-sum-exp (4 heads x 4 B per token) stays.
    _, _, alone = _price(TINY, train, ("mlp",), free_host)
    assert alone - mlp_bytes == pytest.approx(2 * 32 * 16)


def test_analytical_moe_act_frees_the_activation_output() -> None:
    """The routed experts' activation output (linear_fc2's input) of each of the top-2
    copies, 128 wide, is discarded and rebuilt: its SwiGLU traffic runs again."""
    train = make_train(seq_len=32, global_batch_size=1)
    free_host = "simulator.host_op_overhead_us=0"
    core_s, _, core_bytes = _price(TINY_MOE, train, None, free_host)
    act_s, _, act_bytes = _price(TINY_MOE, train, ("core_attn", "moe_act"), free_host)
    assert core_bytes - act_bytes == pytest.approx(2 * 32 * 2 * 2 * 128)
    swiglu = 32 * 2 * 3 * 2 * 128 / DEVICE.achieved_memory_bytes_per_s
    assert act_s - core_s == pytest.approx(2 * swiglu)


def test_analytical_checkpoints_add_their_host_calls() -> None:
    """A host-bound tiny layer pays each further checkpoint's calls: the layer norm's two
    on MindSpeed-LLM's local layers cost more than the one MLP checkpoint."""
    train = make_train("mindspeed", seq_len=32, global_batch_size=1)
    core_s, _, _ = _price(TINY, train, None)
    norms_s, _, _ = _price(TINY, train, ("core_attn", "layernorm"))
    assert norms_s > core_s


# ---- the hierarchical simulator ------------------------------------------------------------


def _graph(model: ModelSpec, layout: Layout, train: TrainSpec, kind: str = "dense") -> object:
    return compile_mod.compile_layer(
        layer_shapes(Job(model=model, cluster=cluster(), train=train), layout)[kind]
    )


def test_hierarchical_mlp_recompute_by_hand() -> None:
    """The same layer as the analytical case: the MLP scope holds the norm (inside
    linear_fc1 on Megatron-Core), both GEMMs and the SwiGLU; its checkpoint frees their
    saved tensors but the residual stream (the norm's fp32 mean and 1/rms too, 8 B per
    token, which the analytical formulas leave out); one more checkpoint."""
    train = make_train(seq_len=32, global_batch_size=1)
    core = _graph(TINY, Layout(**SELECTIVE), train)
    mlp = _graph(TINY, Layout(**SELECTIVE, recompute_modules=("core_attn", "mlp")), train)
    freed = core.selective_saved_bytes - mlp.selective_saved_bytes
    assert freed == 32 * (128 + 1024 + 512 + 8)
    assert mlp.saved_bytes == core.saved_bytes  # without recompute nothing changes
    scoped = [op for op in mlp.selective_forward if op.scope]
    assert [op.gemm[2:] for op in scoped if op.gemm] == [(64, 512), (256, 64)]  # depth, cols
    assert len(mlp.selective_forward) == len(core.selective_forward) + len(scoped)
    assert (mlp.selective_checkpoints, core.selective_checkpoints) == (2, 1)
    assert mlp.host_selective > core.host_selective


def test_hierarchical_moe_act_frees_the_activation_output() -> None:
    """The experts' activation output, [4 experts x 16 copies each, 128] in bf16 (2 x 32
    balanced copies over 4 experts), is freed: the grouped GEMM after it saved it."""
    train = make_train(seq_len=32, global_batch_size=1)
    core = _graph(TINY_MOE, Layout(**SELECTIVE), train, "moe")
    act = _graph(
        TINY_MOE, Layout(**SELECTIVE, recompute_modules=("core_attn", "moe_act")), train, "moe"
    )
    assert core.selective_saved_bytes - act.selective_saved_bytes == 4 * 16 * 128 * 2
    assert act.module_checkpoints == 1


@pytest.mark.parametrize(
    ("model", "modules", "framework"),
    [
        ("llama2_7b", ("core_attn", "mlp"), "megatron_core"),
        ("llama2_7b", ("layernorm", "mlp"), "mindspeed"),
        ("mixtral_8x7b", ("core_attn", "moe_act"), "megatron_core"),
        ("mixtral_8x7b", ("core_attn", "layernorm"), "megatron_core"),
        ("mixtral_8x7b", ("moe",), "megatron_core"),
        ("deepseek_v2_lite", ("core_attn", "mla_up_proj", "shared_experts"), "megatron_core"),
    ],
)
def test_both_simulators_free_the_same_bytes(
    model: str, modules: tuple[str, ...], framework: str
) -> None:
    """What the module checkpoints free, against selective recompute of core attention, is
    the same in both simulators to 1%: the formulas and the recorded layer agree."""
    spec = catalog.load_model(model)
    train = make_train(framework, seq_len=4096, global_batch_size=64)
    devices = 16 if spec.is_moe else 8
    node = dataclasses.replace(
        cluster(devices // 8), device=dataclasses.replace(DEVICE, memory_gib=1e4)
    )
    ep = 8 if spec.is_moe else 1
    base = Layout.resolve(devices, tp=2, ep=ep, **SELECTIVE)
    named = dataclasses.replace(base, recompute_modules=modules)
    job = Job(model=spec, cluster=node, train=train)
    assert not named.violations(job)
    freed = {}
    for name in ("analytical", "hierarchical"):
        simulator = catalog.load_simulator(name, ())
        held = [
            simulator.simulate(job, lay).memory_breakdown_gib["activations"]
            for lay in (base, named)
        ]
        freed[name] = held[0] - held[1]
    assert freed["analytical"] > 0
    assert freed["hierarchical"] == pytest.approx(freed["analytical"], rel=0.01)


def test_a_batch_mixing_module_sets_prices_each_as_alone() -> None:
    """The vectorized path tells the layouts' module sets apart (core attention or not, other
    modules or not) as the scalar path does."""
    train = make_train(seq_len=32, global_batch_size=8)
    layouts = [
        Layout.resolve(8, ep=4, recompute=recompute, recompute_modules=modules)
        for recompute, modules in (
            ("none", None),
            ("selective", None),
            ("selective", ("moe_act",)),
            ("selective", ("core_attn", "layernorm", "moe")),
            ("full", None),
        )
    ]
    simulator = analytical()
    job = Job(model=TINY_MOE, cluster=cluster(), train=train)
    batch = simulator.simulate_many(job, layouts)
    for index, layout in enumerate(layouts):
        assert_same(
            batch.prediction(index),
            analytical().simulate(job, layout),
        )
