"""ModelSpec, DeviceSpec and LinkSpec on hand-computed cases (docs/reference.md 1, 2, 3.1)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from autotune import catalog
from autotune.simulators import DeviceSpec
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import LinkSpec
from autotune.simulators import ModelSpec
from autotune.simulators import SpecError
from autotune.simulators.specs import CARD_FIELDS
from tests.simulators_tests._specs import analytical
from tests.simulators_tests._specs import ascend
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model


def test_llama2_7b_parameters_by_hand() -> None:
    h, layers, f, vocab = 4096, 32, 11008, 32000
    attention = 4 * h * h  # q, k, v, o: 32 heads x 128 = h each (MHA) -> 67,108,864
    mlp = 3 * h * f  # SwiGLU gate, up, down -> 135,266,304
    norms = 2 * h  # two RMSNorms -> 8,192
    per_layer = attention + mlp + norms  # 202,383,360
    total = layers * per_layer + 2 * vocab * h + h  # untied embedding + output, final norm
    assert total == 6_738_415_616  # the Llama-2-7B model card count
    spec = model("llama2_7b")
    assert spec.dense_layer_params == per_layer
    assert spec.num_params == total
    assert spec.num_active_params == total


def test_llama2_7b_flops_per_token_by_hand() -> None:
    h, f, vocab, s, layers = 4096, 11008, 32000, 4096, 32
    projections = 2 * h * (h + 2 * h + h)  # q, k+v, o -> 134,217,728
    core = 2 * s * h  # QK^T and PV: 2 * 2*s*h, halved by the causal mask -> 33,554,432
    mlp = 2 * 3 * h * f  # 270,532,608
    forward = layers * (projections + core + mlp) + 2 * h * vocab  # 14,287,896,576
    assert model("llama2_7b").flops_per_token(s) == 3 * forward  # 42,863,689,728


# Megatron-style training FLOPs per token at s = 4096, causal (docs/reference.md 3.1 [D]).
FLOPS_PER_TOKEN_G = {
    "llama2_7b": 42.9,
    "llama2_70b": 428,
    "llama3_8b": 48.2,
    "qwen2_5_72b": 445,
    "mixtral_8x7b": 79.7,
    "deepseek_v3": 250,
    "qwen3_235b_a22b": 148,
    "gpt3_175b": 1076,
}


@pytest.mark.parametrize("name", sorted(FLOPS_PER_TOKEN_G))
def test_flops_per_token_match_specs(name: str) -> None:
    flops = model(name).flops_per_token(4096)
    assert flops / 1e9 == pytest.approx(FLOPS_PER_TOKEN_G[name], rel=0.005)


def test_mixtral_8x7b_active_parameters() -> None:
    spec = model("mixtral_8x7b")
    assert spec.num_active_params / 1e9 == pytest.approx(12.9, rel=0.005)
    assert spec.num_params / 1e9 == pytest.approx(46.7, rel=0.005)
    # Each token skips 6 of the 8 experts in each of the 32 layers.
    skipped = 32 * 6 * 3 * 4096 * 14336
    assert spec.num_params - spec.num_active_params == skipped


def test_deepseek_v3_mla_and_moe() -> None:
    spec = model("deepseek_v3")
    assert spec.num_params / 1e9 == pytest.approx(671.0, rel=0.005)
    assert spec.num_active_params / 1e9 == pytest.approx(37.6, rel=0.005)
    assert spec.num_moe_layers == 58
    h, a, q_lora, kv_lora = 7168, 128, 1536, 512
    q = q_lora * (h + a * (128 + 64) + 1)  # down, up, q norm
    kv = kv_lora * (h + a * (128 + 128) + 1) + h * 64  # down, up, kv norm, shared rope key
    assert spec.attention_params == q + kv + a * 128 * h


def test_gpt3_layernorm_gelu_biases_and_tied_embedding() -> None:
    spec = model("gpt3_175b")
    h, f = 12288, 49152
    assert spec.mlp_params(f) == 2 * h * f + f + h
    assert spec.attention_params == 4 * h * h + 3 * h  # qkv bias
    assert spec.norm_params_per_layer == 4 * h
    assert spec.output_params == 0
    assert spec.num_params / 1e9 == pytest.approx(174.6, rel=0.005)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hidden_size": -4096}, "hidden_size=-4096 must be > 0"),
        ({"activation": "relu"}, "activation='relu' is not one of swiglu, gelu"),
        ({"num_kv_heads": 3}, "num_kv_heads=3 must divide num_attention_heads=32"),
        ({"norm": "batchnorm"}, "norm='batchnorm'"),
        ({"attention": "sliding"}, "attention='sliding'"),
        ({"num_experts": 8, "moe_top_k": 0, "expert_ffn_hidden_size": 1}, "moe_top_k=0"),
        ({"num_experts": 2, "moe_top_k": 4, "expert_ffn_hidden_size": 1}, "exceeds num_experts"),
        ({"ffn_hidden_size": 0}, "ffn_hidden_size=0 must be > 0"),
        ({"attention": "mla"}, "kv_lora_rank=0"),
    ],
)
def test_model_spec_errors(changes: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        model("llama2_7b", **changes)


def test_spec_error_names_every_bad_field() -> None:
    with pytest.raises(SpecError, match="num_layers=0, hidden_size=-1 must be > 0"):
        model("llama2_7b", num_layers=0, hidden_size=-1)


def test_device_without_bf16_uses_fp16_peak() -> None:
    v100 = DeviceSpec(
        name="V100",
        bf16_tflops=0.0,
        fp16_tflops=125.0,
        fp32_tflops=15.7,
        memory_gib=16.0,
        memory_gbps=900.0,
        matmul_efficiency=0.8,
        memory_efficiency=0.85,
    )
    assert v100.peak_flops("bf16") == v100.peak_flops("fp16") == 125e12
    assert v100.peak_flops("fp32") == 15.7e12


def test_full_mesh_group_uses_only_its_links() -> None:
    hccs = LinkSpec(
        topology="full_mesh",
        bandwidth_gbps=196.0,
        peer_link_gbps=28.0,
        latency_us=10.0,
        efficiency=0.7,
    )
    assert hccs.group_bandwidth_gbps(2) == pytest.approx(28.0 * 0.7)  # reference.md 1.5: (n-1)*28
    assert hccs.group_bandwidth_gbps(4) == pytest.approx(3 * 28.0 * 0.7)
    assert hccs.group_bandwidth_gbps(8) == pytest.approx(196.0 * 0.7)
    switch = LinkSpec(bandwidth_gbps=300.0, latency_us=5.0, efficiency=0.78)
    assert switch.group_bandwidth_gbps(2) == switch.group_bandwidth_gbps(8) == 300.0 * 0.78


def test_two_meshes_joined_by_pcie() -> None:
    # Ascend 910 node: 2 meshes of 4, 30 GB/s per HCCS peer link, PCIe between the meshes.
    link = LinkSpec(
        topology="full_mesh",
        bandwidth_gbps=90.0,
        peer_link_gbps=30.0,
        mesh_size=4,
        cross_mesh_gbps=32.0,
        latency_us=10.0,
        efficiency=1.0,
    )
    assert link.group_bandwidth_gbps(4) == 90.0
    assert link.group_bandwidth_gbps(8) == 64.0  # min(3 * 30, 32 * 8 / 4)


def test_link_and_train_spec_errors() -> None:
    with pytest.raises(SpecError, match="peer_link_gbps"):
        LinkSpec(topology="full_mesh", bandwidth_gbps=196.0, latency_us=1.0, efficiency=0.7)
    with pytest.raises(SpecError, match="topology='ring'"):
        LinkSpec(topology="ring", bandwidth_gbps=1.0, latency_us=1.0, efficiency=0.7)
    with pytest.raises(SpecError, match="precision='fp4'"):
        make_train(seq_len=4096, global_batch_size=8, precision="fp4")
    with pytest.raises(SpecError, match="framework 'megatron_deepspeed' has none"):
        make_train("megatron_deepspeed", seq_len=4096, global_batch_size=8, precision="fp8")
    with pytest.raises(SpecError, match="moe_dispatcher='nccl'.*alltoall, allgather, deepep"):
        make_train(seq_len=4096, global_batch_size=8, moe_dispatcher="nccl")
    with pytest.raises(SpecError, match="deepep does not run on framework 'mindspeed'; it has "):
        make_train("mindspeed", seq_len=4096, global_batch_size=8, moe_dispatcher="deepep")
    with pytest.raises(SpecError, match="allgather does not run on .*'megatron_deepspeed'"):
        make_train(
            "megatron_deepspeed", seq_len=4096, global_batch_size=8, moe_dispatcher="allgather"
        )
    with pytest.raises(SpecError, match="moe_a2a_overlap needs the alltoall or deepep"):
        make_train(
            seq_len=4096, global_batch_size=8, moe_dispatcher="allgather", moe_a2a_overlap=True
        )
    with pytest.raises(SpecError, match="moe_a2a_overlap needs .* 'mindspeed' has none"):
        make_train("mindspeed", seq_len=4096, global_batch_size=8, moe_a2a_overlap=True)
    with pytest.raises(SpecError, match="moe_a2a_overlap needs a bf16, fp16 or fp8 step"):
        make_train(seq_len=4096, global_batch_size=8, precision="fp32", moe_a2a_overlap=True)
    with pytest.raises(SpecError, match="tp_comm_overlap=2 must be true or false"):
        make_train(seq_len=4096, global_batch_size=8, tp_comm_overlap=2)
    assert make_train(seq_len=4096, global_batch_size=256).tokens_per_step == 1_048_576
    assert make_train(seq_len=4096, global_batch_size=8).token_dispatcher == "alltoall"


def test_a_training_step_describes_what_it_sets() -> None:
    plain = make_train(seq_len=4096, global_batch_size=8)
    assert plain.describe() == "megatron_core, bf16"
    nvidia = make_train(
        seq_len=4096,
        global_batch_size=8,
        precision="fp8",
        grad_reduce_in_fp32=False,
        tp_comm_overlap=True,
        moe_dispatcher="deepep",
        moe_a2a_overlap=True,
    )
    assert nvidia.describe() == (
        "megatron_core, fp8, bf16 gradients, TP overlap, deepep dispatch, EP all-to-all overlap"
    )


def test_specs_are_frozen() -> None:
    spec = model("llama2_7b")
    with pytest.raises(AttributeError):
        spec.num_layers = 1  # type: ignore[misc]
    assert isinstance(spec, ModelSpec)


# A notebook builds specs without Hydra's types: the specs check types themselves.
@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: model("llama2_7b", num_layers=1.5), "num_layers=1.5 must be an integer"),
        (lambda: model("llama2_7b", num_layers="32"), "num_layers='32' must be an integer"),
        (lambda: model("llama2_7b", hidden_size=True), "hidden_size=True must be an integer"),
        (lambda: model("llama2_7b", qkv_bias="no"), "qkv_bias='no' must be true or false"),
        (lambda: model("llama2_7b", name=""), "name='' must be a non-empty text"),
        (lambda: model("llama2_7b", num_layers=10**6), "must be <= 10,000"),
        (lambda: model("llama2_7b", hidden_size=4100), "must divide hidden_size=4100"),
        (lambda: model("llama2_7b", moe_top_k=2), "moe_top_k=2 must be 0 with num_experts=0"),
        (lambda: model("llama2_7b", kv_lora_rank=512), "kv_lora_rank=512 must be 0"),
        (lambda: model("llama2_7b", rotary_base=1e4), "rotary_base=10000.0 must be an integer"),
        (lambda: model("llama2_7b", norm_epsilon="1e-5"), "norm_epsilon='1e-5' must be a number"),
        (lambda: model("llama2_7b", norm_epsilon=float("nan")), "norm_epsilon=nan must be > 0"),
        (lambda: model("llama2_7b", qk_layernorm=1), "qk_layernorm=1 must be true or false"),
        (
            lambda: model("llama3_70b", rope_scaling_factor=float("inf")),
            "rope_scaling_factor=inf must be <= 10,000",
        ),
        (
            lambda: model("llama3_70b", rope_low_freq_factor=4.0),
            "rope_low_freq_factor=4.0 must be below rope_high_freq_factor=4.0",
        ),
        (
            lambda: model("gpt3_175b", rotary_percent=0.5),
            "rotary_percent=0.5 (default 1.0) must keep the default with "
            "position_embedding='learned_absolute'",
        ),
        (lambda: make_train(seq_len=4096.0, global_batch_size=8), "must be an integer"),
        (lambda: make_train(seq_len=4096, global_batch_size=10**9), "must be <= 100,000,000"),
        (
            lambda: make_train(seq_len=4096, global_batch_size=8, flash_attention=1),
            "flash_attention=1 must be true or false",
        ),
        (
            lambda: LinkSpec(bandwidth_gbps="fast", latency_us=1.0, efficiency=0.7),
            "bandwidth_gbps='fast' must be a number",
        ),
        (
            lambda: LinkSpec(bandwidth_gbps=100.0, latency_us=1.0, efficiency=1.2),
            "efficiency=1.2 must be from 0.01 to 1",
        ),
        (
            lambda: LinkSpec(bandwidth_gbps=0.01, latency_us=1.0, efficiency=0.7),
            "bandwidth_gbps=0.01 must be >= 0.1 (1 Gbit Ethernet gives 0.125",
        ),
        (
            lambda: LinkSpec(bandwidth_gbps=100.0, latency_us=float("nan"), efficiency=0.7),
            "latency_us=nan must be >= 0",
        ),
        (
            lambda: LinkSpec(
                bandwidth_gbps=100.0, latency_us=1.0, efficiency=0.7, step_latency_us=-1.0
            ),
            "step_latency_us=-1.0 must be >= 0",
        ),
    ],
)
def test_specs_check_types_bounds_and_relations(build: object, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()  # type: ignore[operator]


# A valid device that the tests below change one field of.
DEVICE: dict[str, object] = dict(
    name="X",
    bf16_tflops=100.0,
    fp16_tflops=100.0,
    fp32_tflops=10.0,
    memory_gib=80.0,
    memory_gbps=2000.0,
    matmul_efficiency=0.8,
    memory_efficiency=0.8,
)


def test_device_limits() -> None:
    values = DEVICE
    DeviceSpec(**values)  # type: ignore[arg-type]
    for key, bad, message in [
        ("memory_gib", float("inf"), "memory_gib=inf must be <= 100,000"),
        ("memory_gbps", 0.0, "memory_gbps=0.0 must be > 0"),
        ("bf16_tflops", 1e9, "bf16_tflops=1000000000.0 must be <= 100,000"),
        ("matmul_efficiency", 1.01, "matmul_efficiency=1.01 must be from 0.01 to 1"),
        ("memory_efficiency", "0.8", "memory_efficiency='0.8' must be a number"),
        # Below any accelerator a model is trained on: a unit slip or a typo.
        ("bf16_tflops", 1e-9, "bf16_tflops=1e-09 must be >= 1 (a V100 gives 15.7 in FP32"),
        ("fp32_tflops", 0.5, "fp32_tflops=0.5 must be >= 1"),
        ("memory_gib", 0.08, "memory_gib=0.08 must be >= 1 (a T4 has 16 GB)"),
        ("memory_gbps", 8.0, "memory_gbps=8.0 must be >= 10 (a T4 gives 320)"),
        ("matmul_efficiency", 0.005, "matmul_efficiency=0.005 must be from 0.01 to 1"),
    ]:
        with pytest.raises(SpecError, match=re.escape(message)):
            DeviceSpec(**{**values, key: bad})  # type: ignore[arg-type]


def test_fp8_gemms_have_their_own_efficiency_when_the_device_gives_one() -> None:
    values = {**DEVICE, "fp8_tflops": 200.0}
    plain = DeviceSpec(**values)  # type: ignore[arg-type]
    assert plain.gemm_efficiency("fp8") == plain.gemm_efficiency("bf16") == 0.8
    own = DeviceSpec(**values, fp8_matmul_efficiency=0.5)  # type: ignore[arg-type]
    assert (own.gemm_efficiency("fp8"), own.gemm_efficiency("bf16")) == (0.5, 0.8)
    for bad, message in [
        (1.2, "fp8_matmul_efficiency=1.2 must be from 0.01 to 1"),
        (0.0, "fp8_matmul_efficiency=0.0 must be from 0.01 to 1"),
        ("half", "fp8_matmul_efficiency='half' must be a number"),
    ]:
        with pytest.raises(SpecError, match=re.escape(message)):
            DeviceSpec(**values, fp8_matmul_efficiency=bad)  # type: ignore[arg-type]
    no_fp8 = {**values, "fp8_tflops": 0.0}
    with pytest.raises(SpecError, match="no FP8 tensor cores"):
        DeviceSpec(**no_fp8, fp8_matmul_efficiency=0.5)  # type: ignore[arg-type]


def test_a_cluster_names_the_sources_its_constants_were_fit_on() -> None:
    cluster = catalog.load_cluster("h100")
    assert cluster.fitted_on == ("dgxc",)  # a tuple, though the config gives a list
    h200 = catalog.load_cluster("h200")  # H100's fitted GEMMs, but no H200 row was in the fit
    assert h200.device.matmul_efficiency == cluster.device.matmul_efficiency
    assert h200.fitted_on == ()
    assert catalog.load_cluster("a100").fitted_on == ()
    listed = dataclasses.replace(cluster, fitted_on=["dgxc", "mine"])  # type: ignore[arg-type]
    assert listed.fitted_on == ("dgxc", "mine")
    hash(listed)  # still usable as a key
    for bad, message in [("dgxc", "must be a list of sources"), ([""], "non-empty text")]:
        with pytest.raises(SpecError, match=message):
            dataclasses.replace(cluster, fitted_on=bad)  # type: ignore[arg-type]


def test_model_card_facts_change_no_prediction() -> None:
    """The card facts (CARD_FIELDS) are launch facts: no simulator reads them, so a model
    stripped of them is priced alike."""
    defaults = {f.name: f.default for f in dataclasses.fields(ModelSpec) if f.name in CARD_FIELDS}
    sim = analytical()
    cluster = ascend(1)
    for name in ("qwen3_30b_a3b", "deepseek_v2_lite", "llama3_8b"):
        card = model(name)
        bare = dataclasses.replace(card, **defaults)
        assert bare != card
        train = make_train(seq_len=4096, global_batch_size=64)
        layout = Layout.resolve(cluster.num_devices)
        assert sim.simulate(Job(model=card, cluster=cluster, train=train), layout) == sim.simulate(
            Job(model=bare, cluster=cluster, train=train), layout
        )
    assert model("gpt3_175b").positions == "learned_absolute"  # the GPT family's default
    assert model("llama2_7b", position_embedding=None).positions == "rope"
