"""Every catalog model is launched as its model card publishes it.

Each model's published facts (Hugging Face ``config.json`` keys: rope_theta, rms_norm_eps,
rope_scaling, partial rotation, QK norms, the MoE router) are transcribed below with where they
were read. Each framework's launch file is run (bash scripts with a stand-in torchrun, the NeMo
override against stand-in modules), the options it hands the framework are read back into the
facts that framework will train with (its fixed values and defaults included), and compared
with the table: a wrong yaml value, or a launcher that drops a fact, fails. A fact a framework
cannot take must be said in the file's header instead.
"""

from __future__ import annotations

import dataclasses
import json
import runpy
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import pytest

from autotune import catalog
from autotune.launch import write_launch_files
from autotune.simulators import Job
from autotune.simulators import Layout
from tests.autotune_tests import _argrules
from tests.autotune_tests._launch_checks import deepspeed_problems
from tests.autotune_tests._launch_checks import megatron_problems
from tests.autotune_tests._launch_run import mindspeed_env
from tests.autotune_tests._launch_run import run_script
from tests.autotune_tests._nemo_stub import nemo_modules
from tests.autotune_tests._nemo_stub import recorded

Args = Mapping[str, Any]


@dataclass(frozen=True)
class Router:
    """An MoE router: ``scoring_func``, ``norm_topk_prob`` (Mixtral renormalises its top-2
    in code), group-limited top-k (``n_group``, ``topk_group``; None: no limit, as DeepSeek's
    ``topk_method`` greedy), ``routed_scaling_factor``, and the expert bias of ``topk_method``
    noaux_tc."""

    scoring_func: str = "softmax"
    norm_topk_prob: bool = True
    n_group: int | None = None
    topk_group: int | None = None
    routed_scaling_factor: float = 1.0
    expert_bias: bool = False


@dataclass(frozen=True)
class Card:
    """A model's published facts: ``rms_norm_eps`` (``layernorm_epsilon``), ``rope_theta``
    (None without RoPE), the positions, ``partial_rotary_factor``, GLM's interleaved RoPE,
    ``rope_scaling`` (its keys; empty: none), per-head QK norms, the router."""

    norm_eps: float
    rope_theta: int | None = None
    positions: str = "rope"
    partial_rotary: float = 1.0
    interleaved: bool = False
    rope_scaling: dict[str, Any] = field(default_factory=dict)
    qk_norm: bool = False
    router: Router | None = None


# huggingface.co/meta-llama/Llama-3.1-70B and -405B config.json rope_scaling, read in NVIDIA/
# NeMo@8cfedd72 llama.py Llama31Config and Ascend/MindSpeed-LLM@f35bfccc^ llama31 scripts.
LLAMA31 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
# huggingface.co/deepseek-ai/DeepSeek-V2(-Lite) config.json rope_scaling, read in NeMo's
# DeepSeekV2Config, Megatron-LM@d98e8a64's modelopt DeepSeek-V2-Lite.sh and MindSpeed-LLM's
# deepseek2 scripts; DeepSeek-V3's in aliyun/SimAI@cef83f9d deepseek_v3_config.json.
YARN_V2 = {
    "type": "yarn",
    "factor": 40,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 0.707,
    "mscale_all_dim": 0.707,
}
YARN_V3 = {**YARN_V2, "mscale": 1.0, "mscale_all_dim": 1.0}

PUBLISHED: dict[str, Card] = {
    # meta-llama/Llama-2-{7,13,70}b-hf: rope_theta 10000.0, rms_norm_eps 1e-05 (a saved copy of
    # 7b-hf: anatal/stack-llama-2; NeMo Llama2Config defaults for the family)
    "llama2_7b": Card(norm_eps=1e-5, rope_theta=10000),
    "llama2_13b": Card(norm_eps=1e-5, rope_theta=10000),
    "llama2_70b": Card(norm_eps=1e-5, rope_theta=10000),
    # meta-llama/Meta-Llama-3-8B (NeMo Llama3Config8B; MindSpeed-LLM llama3 scripts)
    "llama3_8b": Card(norm_eps=1e-5, rope_theta=500000),
    # meta-llama/Llama-3.1-70B, -405B (NeMo Llama31Config70B, 405B)
    "llama3_70b": Card(norm_eps=1e-5, rope_theta=500000, rope_scaling=LLAMA31),
    "llama3_405b": Card(norm_eps=1e-5, rope_theta=500000, rope_scaling=LLAMA31),
    # Qwen/Qwen2.5-7B: 1e-06; the 14B, 32B and 72B base models: 1e-05 (huggingface.co/Qwen/
    # Qwen2.5-32B config.json; NeMo Qwen25Config14B/32B/72B; their -Instruct releases: 1e-06)
    "qwen2_5_7b": Card(norm_eps=1e-6, rope_theta=1000000),
    "qwen2_5_14b": Card(norm_eps=1e-5, rope_theta=1000000),
    "qwen2_5_32b": Card(norm_eps=1e-5, rope_theta=1000000),
    "qwen2_5_72b": Card(norm_eps=1e-5, rope_theta=1000000),
    # mistralai/Mixtral-8x7B-v0.1, -8x22B-v0.1 (NeMo MixtralConfig; MixtralSparseMoeBlock
    # softmaxes over the experts and divides the top-2 by their sum)
    "mixtral_8x7b": Card(norm_eps=1e-5, rope_theta=1000000, router=Router()),
    "mixtral_8x22b": Card(norm_eps=1e-5, rope_theta=1000000, router=Router()),
    # Qwen/Qwen3-30B-A3B (aliyun/SimAI's copy), Qwen/Qwen3-235B-A22B (Megatron-LM's modelopt
    # conf; NeMo Qwen3Config235B_A22B): q_norm/k_norm, norm_topk_prob true
    "qwen3_30b_a3b": Card(norm_eps=1e-6, rope_theta=1000000, qk_norm=True, router=Router()),
    "qwen3_235b_a22b": Card(norm_eps=1e-6, rope_theta=1000000, qk_norm=True, router=Router()),
    # deepseek-ai/DeepSeek-V2-Lite: topk_method greedy (n_group 1, topk_group 1: no limit),
    # norm_topk_prob false, routed_scaling_factor 1.0
    "deepseek_v2_lite": Card(
        norm_eps=1e-6,
        rope_theta=10000,
        rope_scaling=YARN_V2,
        router=Router(norm_topk_prob=False),
    ),
    # deepseek-ai/DeepSeek-V2: group_limited_greedy, n_group 8, topk_group 3, scaling 16.0
    "deepseek_v2": Card(
        norm_eps=1e-6,
        rope_theta=10000,
        rope_scaling=YARN_V2,
        router=Router(norm_topk_prob=False, n_group=8, topk_group=3, routed_scaling_factor=16.0),
    ),
    # deepseek-ai/DeepSeek-V3: scoring_func sigmoid, topk_method noaux_tc, n_group 8,
    # topk_group 4, routed_scaling_factor 2.5, norm_topk_prob true
    "deepseek_v3": Card(
        norm_eps=1e-6,
        rope_theta=10000,
        rope_scaling=YARN_V3,
        router=Router(
            scoring_func="sigmoid",
            n_group=8,
            topk_group=4,
            routed_scaling_factor=2.5,
            expert_bias=True,
        ),
    ),
    # GPT-3 (no config.json): learned positions, Megatron's and GPT-2's epsilon 1e-05
    "gpt3_175b": Card(norm_eps=1e-5, positions="learned_absolute"),
    # baichuan-inc/Baichuan2-7B-Base: RoPE base 10000 in code; -13B-Base: ALiBi; both 1e-06
    # (NeMo Baichuan2Config; MindSpeed-LLM baichuan2 13B script)
    "baichuan2_7b": Card(norm_eps=1e-6, rope_theta=10000),
    "baichuan2_13b": Card(norm_eps=1e-6, positions="alibi"),
    # THUDM/chatglm3-6b, THUDM/glm-4-9b: RoPE on half of each head, adjacent pairs (NeMo
    # ChatGLMConfig; MindSpeed-LLM --use-glm-rope --rotary-percent 0.5); glm-4-9b's
    # layernorm_epsilon 1.5625e-07, rope_ratio 1 (its -chat release: 500)
    "chatglm3_6b": Card(norm_eps=1e-5, rope_theta=10000, partial_rotary=0.5, interleaved=True),
    "glm4_9b": Card(norm_eps=1.5625e-7, rope_theta=10000, partial_rotary=0.5, interleaved=True),
    # internlm/internlm2-7b, -20b: rope_theta 1000000, rms_norm_eps 1e-05 (dynamic NTK scaling
    # only past 32768 positions, at inference)
    "internlm2_7b": Card(norm_eps=1e-5, rope_theta=1000000),
    "internlm2_20b": Card(norm_eps=1e-5, rope_theta=1000000),
    # Nemotron-4 (NeMo checkpoints; NeMo NemotronConfig): RoPE on half of each head
    "nemotron4_15b": Card(norm_eps=1e-5, rope_theta=10000, partial_rotary=0.5),
    "nemotron4_340b": Card(norm_eps=1e-5, rope_theta=10000, partial_rotary=0.5),
}
MODELS = sorted(PUBLISHED)

# What Megatron-LM fixes: Llama 3.1 scaling's bands (rotary_pos_embedding.py _apply_scaling),
# YaRN's for MLA (MLATransformerConfig), and its defaults at d98e8a64 (arguments.py).
MEGATRON_LLAMA3_FIXED = {
    "low_freq_factor": 1,
    "high_freq_factor": 4,
    "original_max_position_embeddings": 8192,
}
MEGATRON_MLA_YARN_FIXED = {
    "original_max_position_embeddings": 4096,
    "beta_fast": 32,
    "beta_slow": 1,
}


def test_every_catalog_model_has_its_published_card() -> None:
    aliases = {"llama70b", "llama405b", "mixtral8x7b", "deepseekv3"}
    assert set(PUBLISHED) == set(catalog.options("model")) - aliases


def _launch(name: str, cluster: str, framework: str, out: Path) -> tuple[Job, list[Path], str]:
    """The job on one node of ``cluster``, its files in ``out`` and their header comments."""
    job = catalog.load_job(name, cluster, ["cluster.num_nodes=1", f"train.framework={framework}"])
    layout = Layout.resolve(job.cluster.num_devices)  # data parallel only: valid for all
    written = write_launch_files(job, layout, out)
    header = written[0].read_text().split("\n\n")[0]
    return job, written, header


def _router(args: Args) -> Router | None:
    """Megatron-Core's router of these options (moe_utils.py): softmax after the top-k sums
    to 1, before it (pre-softmax) not; sigmoid top-k weights are renormalised."""
    if "--num-experts" not in args:
        return None
    score = args.get("--moe-router-score-function", "softmax")
    if score == "softmax":
        normalised = "--moe-router-pre-softmax" not in args
    else:
        normalised = args["--moe-router-topk"] > 1
    return Router(
        scoring_func=score,
        norm_topk_prob=normalised,
        n_group=args.get("--moe-router-num-groups"),
        topk_group=args.get("--moe-router-group-topk"),
        routed_scaling_factor=args.get("--moe-router-topk-scaling-factor") or 1.0,
        expert_bias="--moe-router-enable-expert-bias" in args,
    )


def _megatron_scaling(args: Args) -> dict[str, Any]:
    """Megatron-LM's RoPE scaling: Llama 3.1's factor, MLA's YaRN (``--rope-type``, yarn by
    default) or a GQA model's yarn embedding, with the values it fixes and its defaults."""
    if "--use-rope-scaling" in args:
        factor = args.get("--rope-scaling-factor", 8.0)
        return {"rope_type": "llama3", "factor": factor, **MEGATRON_LLAMA3_FIXED}
    mla = "--multi-latent-attention" in args
    if mla and args.get("--rope-type", "yarn") != "yarn":
        return {}
    if not mla and args.get("--position-embedding-type") != "yarn":
        return {}
    scaling = {
        "type": "yarn",
        "factor": args.get("--rotary-scaling-factor", 1.0),
        "mscale": args.get("--mscale", 1.0),
        "mscale_all_dim": args.get("--mscale-all-dim", 0.0),
    }
    if mla:
        return {**scaling, **MEGATRON_MLA_YARN_FIXED}
    return {
        **scaling,
        "original_max_position_embeddings": args["--yarn-original-max-position-embeddings"],
        "beta_fast": args.get("--yarn-beta-fast", 32),
        "beta_slow": args.get("--yarn-beta-slow", 1),
    }


def _megatron_card(args: Args) -> Card:
    """The facts Megatron-LM trains with, read back from its options."""
    kind = args.get("--position-embedding-type", "learned_absolute")
    rope = kind in ("rope", "yarn")
    return Card(
        norm_eps=args.get("--norm-epsilon", 1e-5),
        rope_theta=args.get("--rotary-base", 10000) if rope else None,
        positions="rope" if rope else kind,
        partial_rotary=args.get("--rotary-percent", 1.0),
        interleaved="--rotary-interleaved" in args,
        rope_scaling=_megatron_scaling(args),
        qk_norm="--qk-layernorm" in args and "--multi-latent-attention" not in args,
        router=_router(args),
    )


def _as_rope(card: Card, header: str, framework: str) -> Card:
    """ALiBi, which Megatron-LM and Megatron-DeepSpeed lack, launched as RoPE and said so."""
    if card.positions != "alibi":
        return card
    assert f"{framework} has no ALiBi" in header
    return dataclasses.replace(card, positions="rope", rope_theta=10000)


@pytest.mark.parametrize("name", MODELS)
def test_megatron_flags_are_the_published_card(name: str, tmp_path: Path) -> None:
    job, written, header = _launch(name, "h100", "megatron_core", tmp_path / "out")
    table = _argrules.MEGATRON_RELEASES[job.train.framework.release]  # the default release's
    launched = run_script(written[0], tmp_path, table, MEGATRON_DIR=str(tmp_path))
    args = launched.args
    assert megatron_problems(args, launched.env, job.cluster.num_devices) == []
    expected = _as_rope(PUBLISHED[name], header, "Megatron-LM")
    assert _megatron_card(args) == expected
    if job.model.attention == "mla":  # DeepSeek's q_a/kv_a latent norms
        assert "--qk-layernorm" in args
    assert "are not launched" not in header  # every published fact has its option


def _mindspeed_scaling(args: Args) -> dict[str, Any]:
    """MindSpeed-LLM's RoPE scaling (features_manager/common/rotary.py, its defaults)."""
    kind = args.get("--rope-scaling-type")
    factor = args.get("--rope-scaling-factor", 8.0)
    if kind == "llama3":
        return {
            "rope_type": "llama3",
            "factor": factor,
            "low_freq_factor": args["--low-freq-factor"],
            "high_freq_factor": args["--high-freq-factor"],
            "original_max_position_embeddings": args["--original-max-position-embeddings"],
        }
    if kind == "yarn":
        return {
            "type": "yarn",
            "factor": factor,
            "original_max_position_embeddings": args[
                "--rope-scaling-original-max-position-embeddings"
            ],
            "beta_fast": args.get("--beta-fast", 32),
            "beta_slow": args.get("--beta-slow", 1),
            "mscale": args.get("--rope-scaling-mscale", 1.0),
            "mscale_all_dim": args.get("--rope-scaling-mscale-all-dim", 0.0),
        }
    return {}


def _mindspeed_card(args: Args) -> Card:
    """The facts MindSpeed-LLM trains with: its positions, Megatron-Core's router."""
    kind = args.get("--position-embedding-type", "learned_absolute")
    return Card(
        norm_eps=args.get("--norm-epsilon", 1e-5),
        rope_theta=args.get("--rotary-base", 10000) if kind == "rope" else None,
        positions=kind,
        partial_rotary=args.get("--rotary-percent", 1.0),
        interleaved="--use-glm-rope" in args,
        rope_scaling=_mindspeed_scaling(args),
        qk_norm="--qk-layernorm" in args and "--multi-latent-attention" not in args,
        router=_router(args),
    )


@pytest.mark.parametrize("name", MODELS)
def test_mindspeed_flags_are_the_published_card(name: str, tmp_path: Path) -> None:
    job, written, header = _launch(name, "ascend", "mindspeed", tmp_path / "out")
    table = _argrules.MINDSPEED_RELEASES[job.train.framework.release]  # the default release's
    launched = run_script(written[0], tmp_path, table, **mindspeed_env(tmp_path))
    args, world = launched.args, job.cluster.num_devices
    problems = megatron_problems(args, launched.env, world, core_0_12=True, mindspeed=True)
    assert problems == []
    card = PUBLISHED[name]
    assert _mindspeed_card(args) == card
    plain = card.positions == "rope" and card.partial_rotary == 1 and not card.interleaved
    assert ("--use-fused-rotary-pos-emb" in args) == plain  # NPU RoPE rotates whole halves
    assert "not launched" not in header and "rounded" not in header


# What Megatron-DeepSpeed cannot be told (megatron/arguments.py at f4157bea: RoPE's base and
# share only), by Card field: its value when absent and the words of the header's note.
_DEEPSPEED_LACKS = {
    "rope_scaling": ({}, "RoPE scaling"),
    "interleaved": (False, "RoPE on pairs of adjacent dimensions"),
    "qk_norm": (False, "query/key layernorm"),
}


@pytest.mark.parametrize("name", [n for n in MODELS if PUBLISHED[n].router is None])
def test_deepspeed_flags_are_the_published_card_or_say_why_not(name: str, tmp_path: Path) -> None:
    """Megatron-DeepSpeed runs the dense models (it refuses MoE and MLA)."""
    job, written, header = _launch(name, "vtrain_a100", "megatron_deepspeed", tmp_path / "out")
    env = {"MEGATRON_DEEPSPEED_DIR": str(tmp_path), "DATA_PATH": "/d", "TOKENIZER": "t"}
    table = _argrules.MEGATRON_DEEPSPEED_RELEASES[job.train.framework.release]
    launched = run_script(written[0], tmp_path, table, **env)
    args, world = launched.args, job.cluster.num_devices
    config = json.loads(written[1].read_text())
    assert deepspeed_problems(args, launched.env, world, config) == []
    rope = "--use-rotary-position-embeddings" in args
    launched_card = Card(
        norm_eps=args.get("--layernorm-epsilon", 1e-5),
        rope_theta=args.get("--rotary-position-embeddings-theta", 10000) if rope else None,
        positions="rope" if rope else "learned_absolute",
        partial_rotary=args.get("--rotary-percent", 1.0),
    )
    expected = _as_rope(PUBLISHED[name], header, "Megatron-DeepSpeed")
    notes = [line for line in header.splitlines() if "Megatron-DeepSpeed has no" in line]
    for fact, (absent, words) in _DEEPSPEED_LACKS.items():
        if getattr(expected, fact) != absent:
            assert any(words in note for note in notes), (fact, notes)
            expected = dataclasses.replace(expected, **{fact: absent})
    assert launched_card == expected


@pytest.mark.parametrize(("name", "grouped"), [("llama3_8b", True), ("llama2_7b", False)])
def test_deepspeed_header_warns_of_its_master_s_qkv_split(
    name: str, grouped: bool, tmp_path: Path
) -> None:
    """Megatron-DeepSpeed's master splits the QKV output in three equal widths
    (docs/reference.md 3.3): the header says so for grouped KV heads only."""
    _, _, header = _launch(name, "vtrain_a100", "megatron_deepspeed", tmp_path / "out")
    assert ("three equal widths" in header) is grouped


def _nemo_card(model: Mapping[str, Any]) -> Card:
    """The facts the override sets on NeMo's model config (the recipe's class's fields)."""
    mla = "rope_type" in model
    scaling: dict[str, Any] = {}
    if "scale_factor" in model:  # Llama31Config
        scaling = {
            "rope_type": "llama3",
            "factor": model["scale_factor"],
            "low_freq_factor": model["low_freq_factor"],
            "high_freq_factor": model["high_freq_factor"],
            "original_max_position_embeddings": model["old_context_len"],
        }
    if model.get("rope_type") == "yarn":  # MLATransformerConfig
        scaling = {
            "type": "yarn",
            "factor": model["rotary_scaling_factor"],
            "original_max_position_embeddings": model["original_max_position_embeddings"],
            "beta_fast": model["beta_fast"],
            "beta_slow": model["beta_slow"],
            "mscale": model["mscale"],
            "mscale_all_dim": model["mscale_all_dim"],
        }
    router = None
    if "moe_router_score_function" in model:
        score = model["moe_router_score_function"]
        pre = model["moe_router_pre_softmax"]
        router = Router(
            scoring_func=score,
            norm_topk_prob=not pre if score == "softmax" else model["moe_router_topk"] > 1,
            n_group=model["moe_router_num_groups"],
            topk_group=model["moe_router_group_topk"],
            routed_scaling_factor=model["moe_router_topk_scaling_factor"] or 1.0,
            expert_bias=model["moe_router_enable_expert_bias"],
        )
    rope = model["position_embedding_type"] == "rope"
    return Card(
        norm_eps=model["layernorm_epsilon"],
        rope_theta=model["rotary_base"] if rope else None,
        positions=model["position_embedding_type"],
        partial_rotary=model.get("rotary_percent", 1.0),
        interleaved=model.get("rotary_interleaved", False),
        rope_scaling=scaling,
        qk_norm=model["qk_layernorm"] and not mla,
        router=router,
    )


@pytest.mark.parametrize("name", MODELS)
def test_nemo_override_is_the_published_card(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, written, _ = _launch(name, "h100", "megatron_core", tmp_path)
    if len(written) == 1:
        pytest.skip(f"NeMo has no recipe of {job.model.name}")
    text = written[1].read_text()
    with nemo_modules(monkeypatch) as ran:
        runpy.run_path(str(written[1]), run_name="__main__")
    (recipe,) = ran
    model = recorded(recipe)["model"]
    assert _nemo_card(model) == PUBLISHED[name]
    assert "not set" not in text and "has none" not in text
