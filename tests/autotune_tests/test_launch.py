"""Launch files that run: every written script is executed by bash with stand-in launchers,
and the arguments it hands them are parsed by each framework's own option rules.

A stand-in ``torchrun`` on PATH records its argv, environment and working folder, so the
test sees exactly what bash expands (arrays, quoting, variables). The arguments after
``pretrain_gpt.py`` go through the framework's option table (``_argrules``) and its
cross-option rules (``_launch_checks``); the NeMo override runs against stand-in NeMo modules
(``_nemo_stub``) and its recorded settings go through NeMo's rules.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import runpy
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from autotune import catalog
from autotune.launch import layout_flags
from autotune.launch import write_launch_files
from autotune.launch._releases import ADDED_IN
from autotune.launch._releases import added_in
from autotune.launch._torchtitan_keys import V0_2_2_KEYS
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import LayoutError
from autotune.simulators import SpecError
from tests.autotune_tests import _argrules
from tests.autotune_tests._launch_checks import deepspeed_problems
from tests.autotune_tests._launch_checks import layout_stages
from tests.autotune_tests._launch_checks import megatron_problems
from tests.autotune_tests._launch_checks import nemo_problems
from tests.autotune_tests._launch_run import mindspeed_env
from tests.autotune_tests._launch_run import run_script
from tests.autotune_tests._nemo_stub import RECIPE_DDP
from tests.autotune_tests._nemo_stub import nemo_modules
from tests.autotune_tests._nemo_stub import recorded


@functools.cache
def _job(model: str, cluster: str, overrides: tuple[str, ...]) -> Job:
    return catalog.load_job(model, cluster, list(overrides))


@dataclass(frozen=True)
class Case:
    """A job and a layout to launch."""

    name: str
    model: str
    cluster: str
    overrides: tuple[str, ...]
    layout: dict[str, Any]

    def specs(self) -> tuple[Job, Layout]:
        job = _job(self.model, self.cluster, self.overrides)
        layout = Layout.resolve(job.cluster.num_devices, **self.layout)
        return job, layout

    def at(self, release: str) -> Case:
        """The same job with launch files for ``release`` of its framework."""
        overrides = (*self.overrides, f"framework.release={release}")
        return dataclasses.replace(self, overrides=overrides)


def _write(case: Case, out: Path) -> tuple[Job, Layout, list[Path]]:
    job, layout = case.specs()
    assert not layout.violations(job), case.name
    return job, layout, write_launch_files(job, layout, out)


def _check_file_form(path: Path, layout: Layout, release: str) -> None:
    """Executable, a comment first that names the release and the layout, a newline last,
    bash -n clean."""
    text = path.read_text()
    assert os.access(path, os.X_OK) and text.endswith("\n")
    lines = text.splitlines()
    assert lines[0].startswith("#!") and lines[1].startswith("# ")
    assert f"written by autotune for {release}" in lines[1], lines[1]
    assert layout.describe() in text.split("\n\n")[0]
    if path.suffix == ".sh":
        syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert syntax.returncode == 0, syntax.stderr


def _stage_layers(args: dict[str, Any]) -> tuple[tuple[int, ...], int]:
    """Layers per pipeline stage and vpp, read back from the parsed options."""
    layers, pp = args["--num-layers"], args.get("--pipeline-model-parallel-size", 1)
    if "--pipeline-model-parallel-layout" in args:
        stages = layout_stages(args["--pipeline-model-parallel-layout"])
        vpp = len(stages) // pp
        counts = [s.count("t") for s in stages]
        return tuple(sum(counts[c * pp + r] for c in range(vpp)) for r in range(pp)), vpp
    if "--num-layer-list" in args:
        return tuple(int(n) for n in args["--num-layer-list"].split(",")), 1
    per_chunk = args.get("--num-layers-per-virtual-pipeline-stage")
    vpp = layers // pp // per_chunk if per_chunk else 1
    return (layers // pp,) * pp, vpp


def _check_layout(args: dict[str, Any], job: Job, layout: Layout) -> None:
    """The options launch exactly the layout: degrees, batch, split, vpp, recompute."""
    assert args["--tensor-model-parallel-size"] == layout.tp
    assert args["--pipeline-model-parallel-size"] == layout.pp
    assert args.get("--context-parallel-size", 1) == layout.cp
    assert args.get("--expert-model-parallel-size", 1) == layout.ep
    assert args.get("--expert-tensor-parallel-size", layout.tp) == layout.expert_tp
    assert args["--micro-batch-size"] == layout.micro_batch
    assert args["--global-batch-size"] == job.train.global_batch_size
    assert ("--sequence-parallel" in args) == layout.sequence_parallel
    assert _stage_layers(args) == (layout.stage_layers(job.model, job.train), layout.vpp)
    granularity = {"none": None, "selective": "selective", "full": "full"}[layout.recompute]
    assert args.get("--recompute-granularity") == granularity
    modules = layout.recompute_modules  # None: Megatron's default, core attention
    assert args.get("--recompute-modules") == (None if modules is None else list(modules))


MEGATRON_CASES = [
    Case(
        "dense_vpp_selective",
        "llama70b",
        "h100",
        (),
        dict(tp=8, pp=4, vpp=5, recompute="selective"),
    ),
    Case("moe_ep_tp", "mixtral_8x7b", "h100", (), dict(tp=2, pp=2, ep=4)),
    Case("moe_folded_etp1", "mixtral_8x7b", "h100", (), dict(tp=4, pp=2, ep=8, etp=1)),
    Case(
        "mla_moe_uneven", "deepseek_v3", "h100", ("cluster.num_nodes=16",), dict(tp=2, pp=8, ep=8)
    ),
    Case("uneven_vpp", "llama3_8b", "h100", ("model.num_layers=30",), dict(tp=2, pp=4, vpp=2)),
    Case(  # the first stage's second chunk holds no layer: an empty stage in the layout
        "vpp_empty_chunk",
        "llama3_8b",
        "h100",
        (),
        dict(tp=2, pp=4, vpp=2, layer_split=(1, 11, 11, 9)),
    ),
    Case(
        "fp8_cp_full",
        "llama3_8b",
        "h100",
        ("train.precision=fp8",),
        dict(tp=2, cp=2, recompute="full"),
    ),
    Case(  # --fp8-param-gather needs the distributed optimizer: bf16 weights kept
        "fp8_replicated_optimizer",
        "llama3_8b",
        "h100",
        ("train.precision=fp8",),
        dict(tp=2, distributed_optimizer=False),
    ),
    Case(
        "block_recompute_vpp",
        "llama70b",
        "h100",
        (),
        dict(tp=8, pp=4, vpp=2, recompute="full", recompute_layers=5),
    ),
    Case("replicated_optimizer", "llama3_8b", "a100", (), dict(tp=4, distributed_optimizer=False)),
    Case("cp_a2a", "llama3_8b", "h100", ("train.cp_comm_type=a2a",), dict(tp=2, cp=4)),
    Case("gpt3_tied_biases", "gpt3_175b", "a100", ("cluster.num_nodes=16",), dict(tp=8, pp=8)),
    Case("legacy_v100", "llama2_7b", "v100", (), dict(tp=8, pp=2)),
    Case("bf16_grads", "llama3_8b", "h100", ("train.grad_reduce_in_fp32=false",), dict(tp=2)),
    Case("tp_overlap", "llama70b", "h100", ("train.tp_comm_overlap=true",), dict(tp=8, pp=4)),
    Case(  # recompute by module: the dense MLP beside core attention
        "recompute_mlp",
        "llama3_8b",
        "h100",
        (),
        dict(tp=2, recompute="selective", recompute_modules=("core_attn", "mlp")),
    ),
    Case(  # the output-discarding checkpoints of an MoE model, core attention kept
        "recompute_moe_act_layernorm",
        "mixtral_8x7b",
        "h100",
        (),
        dict(tp=2, pp=2, ep=4, recompute="selective", recompute_modules=("layernorm", "moe_act")),
    ),
    Case(  # MLA's up projections and the shared experts
        "recompute_mla_shared",
        "deepseek_v3",
        "h100",
        ("cluster.num_nodes=16",),
        dict(
            tp=2,
            pp=8,
            ep=8,
            recompute="selective",
            recompute_modules=("core_attn", "mla_up_proj", "shared_experts"),
        ),
    ),
    Case(  # the whole MoE layer
        "recompute_moe",
        "qwen3_30b_a3b",
        "h100",
        ("cluster.num_nodes=2",),
        dict(ep=16, recompute="selective", recompute_modules=("moe",)),
    ),
    Case(
        "deepep_across_nodes",
        "qwen3_30b_a3b",
        "h100",
        ("cluster.num_nodes=2", "train.moe_dispatcher=deepep"),
        dict(ep=16),
    ),
    Case(
        "allgather_dispatcher",
        "mixtral_8x7b",
        "h100",
        ("cluster.num_nodes=2", "train.moe_dispatcher=allgather"),
        dict(tp=2, ep=4),
    ),
    Case(  # no NeMo file: NeMo 8cfedd72's Megatron-Core predates the overlap
        "ep_a2a_overlap",
        "deepseek_v3",
        "h100",
        ("cluster.num_nodes=32", "train.moe_dispatcher=deepep", "train.moe_a2a_overlap=true"),
        dict(pp=8, vpp=2, ep=32),
    ),
    Case(  # ZeRO-3 as Megatron-FSDP, hybrid: two replicas of 4 shards
        "fsdp_zero3_hsdp",
        "llama3_8b",
        "h100",
        ("cluster.num_nodes=2",),
        dict(tp=2, zero_stage=3, dp_replicate=2),
    ),
    Case(  # ZeRO-2 as Megatron-FSDP with pipeline stages
        "fsdp_zero2_pp",
        "llama3_8b",
        "h100",
        ("cluster.num_nodes=2",),
        dict(tp=2, pp=2, zero_stage=2),
    ),
    Case(  # ZeRO-1 with replicas: Megatron's partial distributed optimizer
        "partial_distributed_optimizer",
        "llama3_8b",
        "h100",
        ("cluster.num_nodes=2",),
        dict(tp=2, dp_replicate=4),
    ),
    Case(  # fp16 on the V100, gradients accumulated in fp32 on request
        "fp16_fp32_grads", "llama2_7b", "v100", ("train.grad_reduce_in_fp32=true",), dict(tp=8)
    ),
    Case("no_nemo_recipe", "internlm2_7b", "h100", ("cluster.num_nodes=1",), dict(tp=2)),
]

_FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}


@pytest.mark.parametrize("release", _argrules.MEGATRON_RELEASES)
@pytest.mark.parametrize("case", MEGATRON_CASES, ids=lambda c: c.name)
def test_megatron_script_passes_megatron_rules(case: Case, release: str, tmp_path: Path) -> None:
    """Every case, written for each Megatron-LM release, passes that release's options."""
    job, layout, written = _write(case.at(release), tmp_path / "out")
    script = tmp_path / "out" / "launch_megatron.sh"
    assert written[0] == script
    _check_file_form(script, layout, f"release {release}")
    (tmp_path / "megatron").mkdir()
    table = _argrules.MEGATRON_RELEASES[release]
    launched = run_script(script, tmp_path, table, MEGATRON_DIR=str(tmp_path / "megatron"))
    assert launched.cwd == tmp_path / "megatron"
    cluster = job.cluster
    assert launched.launcher["--nproc-per-node"] == str(cluster.devices_per_node)
    assert launched.launcher["--nnodes"] == str(cluster.num_nodes)
    assert megatron_problems(launched.args, launched.env, cluster.num_devices) == []
    _check_layout(launched.args, job, layout)
    args, train = launched.args, job.train
    assert ("--overlap-grad-reduce" in args) == train.overlaps_grad_reduce
    gather = train.overlaps_param_gather and layout.distributed_optimizer
    assert ("--overlap-param-gather" in args) == gather
    assert "--use-flash-attn" not in args  # a no-op on Megatron-LM main
    flash = job.train.uses_flash_attention(cluster)
    assert args["--attention-backend"] == ("auto" if flash else "unfused")
    assert "--mock-data" in args  # no DATA_PATH: a smoke run on mock data
    assert ("--tp-comm-overlap" in args) == layout.hides_tp_comm(job.train)
    if job.model.is_moe and layout.tp * layout.ep > 1:  # the dispatcher as priced
        deepep = job.train.token_dispatcher == "deepep" and layout.ep > 1
        dispatcher = job.train.token_dispatcher.replace("deepep", "alltoall")
        dispatcher = "flex" if deepep else dispatcher
        assert args["--moe-token-dispatcher-type"] == dispatcher
        assert args.get("--moe-flex-dispatcher-backend") == ("deepep" if deepep else None)
        overlap = job.train.moe_a2a_overlap
        assert ("--overlap-moe-expert-parallel-comm" in args) == overlap
        assert ("--delay-wgrad-compute" in args) == overlap
        if overlap:  # NeMo's recipes cannot set it: no NeMo file
            assert [path.name for path in written] == ["launch_megatron.sh"]
    fp32_grads = job.train.reduces_grads_in_fp32  # Megatron's defaults: bf16 in fp32, fp16 not
    assert ("--grad-reduce-in-bf16" in args) == ("--bf16" in args and not fp32_grads)
    # ZeRO-2 and -3 are Megatron-FSDP, replicas the optimizer's instances (docs/reference.md 7.9)
    assert ("--use-megatron-fsdp" in args) == (layout.sharding >= 2)
    assert args.get("--data-parallel-sharding-strategy") == _FSDP_STRATEGY.get(layout.sharding)
    assert args.get("--num-distributed-optimizer-instances", 1) == layout.dp_replicate
    assert ("--use-distributed-optimizer" in args) == layout.distributed_optimizer
    assert ("--accumulate-allreduce-grads-in-fp32" in args) == ("--fp16" in args and fp32_grads)


def test_megatron_details_follow_the_job(tmp_path: Path) -> None:
    paths = {}
    for case in MEGATRON_CASES:
        _write(case, tmp_path / case.name)
        paths[case.name] = (tmp_path / case.name / "launch_megatron.sh").read_text()
    assert "--fp8-format hybrid" in paths["fp8_cp_full"]
    assert "--fp8-param-gather" in paths["fp8_cp_full"]  # as priced: no bf16 linear weights
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in paths["fp8_cp_full"]
    assert "--cp-comm-type a2a" in paths["cp_a2a"]
    assert "--cp-comm-type" not in paths["fp8_cp_full"]  # Megatron's default: the p2p ring
    assert "--moe-layer-freq '([0]*3+[1]*58)'" in paths["mla_moe_uneven"]
    assert (
        "--pipeline-model-parallel-layout 'Et*7|t*7|t*8|t*8|t*8|t*8|t*8|t*7L'"
        in (paths["mla_moe_uneven"])
    )
    assert (
        "--recompute-method block\n    --recompute-num-layers 3\n"
        in (paths["block_recompute_vpp"])
    )  # 5 layers per stage, counted per model chunk: ceil(5 / 2)
    assert "--fp16" in paths["legacy_v100"] and "--overlap-grad-reduce" not in paths["legacy_v100"]
    assert "--position-embedding-type learned_absolute" in paths["gpt3_tied_biases"]
    assert "--disable-bias-linear" not in paths["gpt3_tied_biases"]
    # Dropout as priced: Megatron's default 0.1 for the GPT family, off for the others.
    assert "dropout" not in paths["gpt3_tied_biases"]
    assert "--attention-dropout 0.0" in paths["fp8_cp_full"]
    assert "--hidden-dropout 0.0" in paths["fp8_cp_full"]
    assert "--untie-embeddings" not in paths["gpt3_tied_biases"]
    assert "--rotary-base" not in paths["gpt3_tied_biases"]  # learned positions
    replicated = paths["replicated_optimizer"]
    assert "--overlap-grad-reduce" in replicated and "--overlap-param-gather" not in replicated


def test_a_bf16_job_without_bf16_runs_and_says_fp16_as_priced(tmp_path: Path) -> None:
    """V100 has no bf16: the job runs in fp16, whose peak the simulators price, keeping the
    priced fp32 gradients; the header says so. An fp16 job needs no such sentence."""
    legacy = next(case for case in MEGATRON_CASES if case.name == "legacy_v100")
    job, layout, written = _write(legacy, tmp_path / "bf16")
    assert job.cluster.name == "v100" and job.train.precision == "bf16"
    device = job.cluster.device
    assert device.runs_as("bf16") == "fp16"
    assert device.peak_flops("bf16") == device.peak_flops("fp16")  # what the simulators price
    header = written[0].read_text().split("\n\n")[0]
    assert ", fp16; layout" in header and ", bf16" not in header
    assert "V100 SXM2 16GB has no bf16: this bf16 job runs in fp16, as the simulators" in header
    assert "fp32 gradients" in header and job.train.reduces_grads_in_fp32
    text = written[0].read_text()
    assert "--fp16" in text and "--accumulate-allreduce-grads-in-fp32" in text
    assert "--bf16" not in text
    fp16 = dataclasses.replace(job.train, precision="fp16")
    write_launch_files(
        Job(model=job.model, cluster=job.cluster, train=fp16), layout, tmp_path / "fp16"
    )
    assert "has no" not in (tmp_path / "fp16" / "launch_megatron.sh").read_text()


@pytest.mark.parametrize(
    ("model", "cluster", "overrides", "said"),
    [
        (  # Megatron-LM fixes Llama 3.1's bands (rotary_pos_embedding.py)
            "llama3_70b",
            "h100",
            ("model.rope_low_freq_factor=2.0",),
            "fixes rope_low_freq_factor=1.0, rope_high_freq_factor=4.0, "
            "rope_original_max_positions=8192: Llama-3.1-70B's rope_low_freq_factor=2.0 are "
            "not launched",
        ),
        (  # Megatron-Core renormalises sigmoid top-k weights
            "deepseek_v3",
            "h100",
            ("model.moe_router_norm_topk_prob=false",),
            "Megatron-Core renormalises sigmoid top-k weights to sum to 1",
        ),
        (  # MLA's YaRN betas are fixed in Megatron-LM, integers in MindSpeed-LLM
            "deepseek_v3",
            "h100",
            ("model.rope_beta_fast=33.5",),
            "Megatron-LM's MLA YaRN fixes rope_original_max_positions=4096",
        ),
        (
            "deepseek_v3",
            "ascend",
            ("model.rope_beta_fast=33.5",),
            "MindSpeed-LLM takes integer YaRN betas: rope_beta_fast=33.5 are launched rounded",
        ),
        (  # NeMo's Qwen2 config has no scaling fields
            "qwen2_5_7b",
            "h100",
            (
                "model.rope_scaling=yarn",
                "model.rope_scaling_factor=4",
                "model.rope_original_max_positions=32768",
            ),
            "NeMo's qwen25_7b config takes no yarn RoPE scaling",
        ),
    ],
)
def test_what_a_framework_cannot_take_is_said_in_the_header(
    model: str, cluster: str, overrides: tuple[str, ...], said: str, tmp_path: Path
) -> None:
    case = Case("card", model, cluster, ("cluster.num_nodes=1", *overrides), {})
    _, _, written = _write(case, tmp_path)
    headers = [path.read_text().split("\n\n")[0] for path in written]
    assert any(said in header for header in headers), headers


def test_a_qwen_model_gets_yarn_where_the_framework_has_it(tmp_path: Path) -> None:
    """A GQA model's YaRN: Megatron-LM's yarn position embedding with its own options,
    MindSpeed-LLM's --rope-scaling-type yarn; both pass their frameworks' rules."""
    yarn = ("model.rope_scaling=yarn", "model.rope_scaling_factor=4")
    yarn += ("model.rope_original_max_positions=32768",)
    case = Case("yarn", "qwen2_5_7b", "h100", ("cluster.num_nodes=1", *yarn), {})
    job, _, written = _write(case, tmp_path / "core")
    table = _argrules.MEGATRON_RELEASES[job.train.framework.release]
    launched = run_script(written[0], tmp_path, table, MEGATRON_DIR=str(tmp_path))
    args = launched.args
    assert megatron_problems(args, launched.env, 8) == []
    assert args["--position-embedding-type"] == "yarn" and args["--rotary-scaling-factor"] == 4
    assert args["--yarn-original-max-position-embeddings"] == 32768
    case = Case("yarn", "qwen2_5_7b", "ascend", ("cluster.num_nodes=1", *yarn), {})
    job, _, written = _write(case, tmp_path / "ascend")
    table = _argrules.MINDSPEED_RELEASES[job.train.framework.release]
    args = run_script(written[0], tmp_path, table, **mindspeed_env(tmp_path)).args
    assert args["--rope-scaling-type"] == "yarn"
    assert args["--rope-scaling-original-max-position-embeddings"] == 32768


def test_a_release_without_the_yarn_embedding_launches_rope_and_says_so(tmp_path: Path) -> None:
    """Megatron-LM core_v0.17.1 has no --yarn-* options (docs/reference.md 7.8): a GQA model's
    YaRN is launched as plain RoPE, which passes that release's options, and the header says
    what is not launched."""
    yarn = ("model.rope_scaling=yarn", "model.rope_scaling_factor=4")
    yarn += ("model.rope_original_max_positions=32768", "framework.release=core_v0.17.1")
    case = Case("yarn", "qwen2_5_7b", "h100", ("cluster.num_nodes=1", *yarn), {})
    job, layout, written = _write(case, tmp_path / "core")
    _check_file_form(written[0], layout, "release core_v0.17.1")
    table = _argrules.MEGATRON_RELEASES["core_v0.17.1"]
    launched = run_script(written[0], tmp_path, table, MEGATRON_DIR=str(tmp_path))
    args = launched.args
    assert megatron_problems(args, launched.env, 8) == []
    assert args["--position-embedding-type"] == "rope" and "--rotary-scaling-factor" not in args
    header = written[0].read_text().split("\n\n")[0]
    assert "Megatron-LM core_v0.17.1 has no YaRN position embedding options (from " in header
    assert "core_v0.19.0): Qwen2.5-7B's YaRN scaling is not launched." in header


def test_each_release_table_is_a_known_release_of_its_framework() -> None:
    """The tests' option tables cover exactly the releases conf/framework/ names, and the
    launchers' table of options added later (autotune.launch._releases) agrees with them: an
    option is in a release's table exactly from the release it names."""
    tables = {
        "megatron_core": _argrules.MEGATRON_RELEASES,
        "megatron_lm": _argrules.MEGATRON_RELEASES,
        "mindspeed": _argrules.MINDSPEED_RELEASES,
        "megatron_deepspeed": _argrules.MEGATRON_DEEPSPEED_RELEASES,
        # torchtitan's one release, its TOML keys (tests/autotune_tests/test_launch_torchtitan.py)
        "torchtitan": {"v0.2.2": V0_2_2_KEYS},
    }
    assert set(tables) == set(catalog.options("framework")) == set(ADDED_IN)
    for name, by_release in tables.items():
        framework = catalog.load_framework(name)
        assert tuple(by_release) == framework.releases and framework.release in by_release
        for option, first in ADDED_IN[name].items():
            flag, _, value = option.partition(" ")
            for release, table in by_release.items():
                known = flag in table and (not value or value in table[flag].choices)
                later = framework.releases.index(release) >= framework.releases.index(first)
                assert known == later, (name, option, release)


def test_nemotron_launches_with_rope_and_without_biases(tmp_path: Path) -> None:
    """Nemotron-4 pairs LayerNorm with a non-gated MLP like GPT-3's, but it has RoPE and no
    biases: it is not the GPT family (autotune.simulators.specs.gpt_family)."""
    case = Case("nemotron", "nemotron4_15b", "h100", (), dict(tp=8))
    _write(case, tmp_path)
    script = (tmp_path / "launch_megatron.sh").read_text()
    assert "--position-embedding-type rope" in script
    assert "--disable-bias-linear" in script and "--add-qkv-bias" not in script
    assert "--hidden-dropout 0.0" in script


@pytest.mark.parametrize(
    ("model", "dropout", "expected"),
    [("gpt3_175b", "0", "0.0"), ("llama2_7b", "0.1", "0.1"), ("gpt3_175b", "0.05", "0.05")],
)
def test_dropout_launches_as_priced(
    model: str, dropout: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's ``train.dropout`` reaches every stack's flags and NeMo's model config."""
    case = Case("dropout", model, "a100", (f"train.dropout={dropout}",), dict(tp=8))
    job, _, written = _write(case, tmp_path / "core")
    script = written[0].read_text()
    assert f"--attention-dropout {expected}" in script
    assert f"--hidden-dropout {expected}" in script
    with nemo_modules(monkeypatch) as ran:
        runpy.run_path(str(written[1]), run_name="__main__")
    (recipe,) = ran
    settings = recorded(recipe)
    assert settings["model"]["hidden_dropout"] == float(expected)
    assert settings["model"]["attention_dropout"] == float(expected)
    train = dataclasses.replace(job.train, framework=catalog.load_framework("megatron_deepspeed"))
    layout = Layout.resolve(job.cluster.num_devices, tp=8)
    write_launch_files(
        Job(model=job.model, cluster=job.cluster, train=train), layout, tmp_path / "mds"
    )
    script = (tmp_path / "mds" / "launch_megatron_deepspeed.sh").read_text()
    assert f"--attention-dropout {expected}" in script


def test_a_run_without_the_dp_overlap_launches_without_it(tmp_path: Path) -> None:
    job, layout = MEGATRON_CASES[0].specs()
    assert job.train.overlaps_grad_reduce and layout.distributed_optimizer  # the default
    for values, flags in (
        ({"overlap_grad_reduce": False}, set()),
        ({"overlap_param_gather": False}, {"--overlap-grad-reduce"}),
    ):
        train = dataclasses.replace(job.train, **values)
        out = tmp_path / str(len(flags))
        write_launch_files(Job(model=job.model, cluster=job.cluster, train=train), layout, out)
        text = (out / "launch_megatron.sh").read_text()
        found = {f for f in ("--overlap-grad-reduce", "--overlap-param-gather") if f in text}
        assert found == flags


def test_megatron_script_takes_real_data_and_refuses_half_of_it(tmp_path: Path) -> None:
    job, _, _ = _write(MEGATRON_CASES[0], tmp_path / "out")
    script = tmp_path / "out" / "launch_megatron.sh"
    launched = run_script(
        script,
        tmp_path,
        _argrules.MEGATRON_RELEASES[job.train.framework.release],
        MEGATRON_DIR=str(tmp_path),
        DATA_PATH="/data/c4_text_document",
        TOKENIZER="meta-llama/Llama-3.1-70B",
        NODE_RANK="3",
        TRAIN_ITERS="500",
    )
    args = launched.args
    assert args["--data-path"] == ["/data/c4_text_document"] and "--mock-data" not in args
    assert args["--tokenizer-model"] == "meta-llama/Llama-3.1-70B"
    assert args["--train-iters"] == 500 and args["--save-interval"] == 500
    assert launched.launcher["--node-rank"] == 3
    assert megatron_problems(args, launched.env, 64) == []
    half = subprocess.run(
        ["bash", str(script)],
        env={"PATH": os.environ["PATH"], "DATA_PATH": "/data/c4_text_document"},
        capture_output=True,
        text=True,
    )
    assert half.returncode == 1 and "set TOKENIZER" in half.stderr


MINDSPEED_CASES = [
    Case("dense_cp", "llama70b", "ascend", (), dict(tp=8, pp=2, cp=2)),
    Case(
        "moe_folded_etp1",
        "qwen3_30b_a3b",
        "ascend",
        ("cluster.num_nodes=2",),
        dict(tp=4, pp=2, ep=8, etp=1),
    ),
    Case("ulysses_cp", "llama70b", "ascend", ("train.cp_comm_type=a2a",), dict(tp=8, pp=2, cp=2)),
    Case("uneven_layer_list", "llama70b", "ascend", ("cluster.num_nodes=6",), dict(tp=8, pp=3)),
    Case(  # 96 micro-batches: the interleaved schedule runs them in groups of pp
        "uneven_vpp",
        "llama70b",
        "ascend",
        ("cluster.num_nodes=6", "train.global_batch_size=192"),
        dict(tp=8, pp=3, vpp=2),
    ),
    Case(  # an empty chunk on the first stage
        "vpp_empty_chunk",
        "llama70b",
        "ascend",
        ("cluster.num_nodes=6", "train.global_batch_size=192"),
        dict(tp=8, pp=3, vpp=2, layer_split=(1, 40, 39)),
    ),
    Case(
        "moe_ep_tp_full",
        "qwen3_30b_a3b",
        "ascend",
        ("cluster.num_nodes=2",),
        dict(tp=2, pp=2, ep=4, recompute="full"),
    ),
    Case(
        "mla_block",
        "deepseek_v2_lite",
        "ascend",
        ("train.moe_dispatcher=allgather",),
        dict(pp=2, ep=8, recompute="full", recompute_layers=4),
    ),
    Case(
        "block_vpp",
        "llama2_7b",
        "ascend",
        ("cluster.num_nodes=1",),
        dict(tp=2, pp=2, vpp=4, recompute="full", recompute_layers=6),
    ),
    Case(
        "qkv_bias_selective",
        "qwen2_5_7b",
        "ascend",
        ("cluster.num_nodes=1",),
        dict(tp=4, recompute="selective"),
    ),
    Case(  # Megatron's --recompute-modules, which MindSpeed-LLM's layers honour
        "recompute_modules",
        "qwen3_30b_a3b",
        "ascend",
        ("cluster.num_nodes=2",),
        dict(tp=2, ep=4, recompute="selective", recompute_modules=("layernorm", "moe")),
    ),
]


@pytest.mark.parametrize("release", _argrules.MINDSPEED_RELEASES)
@pytest.mark.parametrize("case", MINDSPEED_CASES, ids=lambda c: c.name)
def test_mindspeed_script_passes_mindspeed_rules(case: Case, release: str, tmp_path: Path) -> None:
    """Every case, written for each MindSpeed-LLM release, passes that release's options;
    what a release cannot express is refused, with nothing written."""
    job, layout = case.at(release).specs()
    table = _argrules.MINDSPEED_RELEASES[release]
    if layout.vpp > 1 and len(set(layout.chunk_layers(job.model, job.train))) > 1:
        if "--pipeline-model-parallel-layout" not in table:  # the only way to say it
            _check_refused_split(job, layout, tmp_path / "out")
            return
    written = write_launch_files(job, layout, tmp_path / "out")
    assert [p.name for p in written] == ["launch_mindspeed.sh"]
    _check_file_form(written[0], layout, f"release {release}")
    launched = run_script(written[0], tmp_path, table, **mindspeed_env(tmp_path))
    assert launched.cwd == tmp_path / "mindspeed_llm"
    assert launched.env["ASCEND_HOME_PATH"] and launched.env["ATB_HOME_PATH"]
    assert launched.env["HCCL_CONNECT_TIMEOUT"] == "3600"
    args, world = launched.args, job.cluster.num_devices
    problems = megatron_problems(args, launched.env, world, core_0_12=True, mindspeed=True)
    assert problems == []
    _check_layout(args, job, layout)
    assert args["--transformer-impl"] == "local" and "--use-mcore-models" in args
    assert "--use-flash-attn" in args  # the 910B has fused attention and the job asks for it
    assert ("--overlap-grad-reduce" in args) == job.train.overlaps_grad_reduce
    algo = {"p2p": "megatron_cp_algo", "a2a": "ulysses_cp_algo"}[job.train.context_exchange]
    assert args.get("--context-parallel-algo") == (algo if layout.cp > 1 else None)
    assert args["--padded-vocab-size"] == job.model.vocab_size
    # Gradients accumulate as priced: the DDP hook, the grouped experts inside their GEMM.
    assert "--no-gradient-accumulation-fusion" in args
    assert ("--gemm-gradient-accumulation-fusion" in args) == job.model.is_moe
    if layout.recompute_layers and layout.vpp > 1:
        assert args["--recompute-num-layers"] == layout.recompute_layers
        assert "--enable-recompute-layers-per-pp-rank" in args


@pytest.mark.parametrize(
    ("case", "rule"),
    [
        (  # MindSpeed's grouped MLP replaces Megatron's, which checkpoints the activation
            Case("", "qwen3_30b_a3b", "ascend", ("cluster.num_nodes=2",), dict(tp=2, ep=4)),
            "recompute module moe_act: mindspeed cannot recompute it",
        ),
        (  # Megatron-DeepSpeed's selective recompute is core attention's
            Case("", "llama2_7b", "vtrain_a100", ("cluster.num_nodes=2",), dict(tp=2, pp=2)),
            "recompute module mlp: megatron_deepspeed cannot recompute it",
        ),
        (  # Megatron's FP8 delayed scaling, the recipe the launch files keep
            Case("", "mixtral_8x7b", "h100", ("train.precision=fp8",), dict(tp=2, ep=4)),
            "recompute module moe_act does not run with FP8's delayed scaling",
        ),
    ],
    ids=["mindspeed_moe_act", "deepspeed_mlp", "fp8_moe_act"],
)
def test_recompute_modules_a_framework_cannot_run_are_refused(
    case: Case, rule: str, tmp_path: Path
) -> None:
    """A module the stack cannot checkpoint breaks a layout rule, and nothing is written."""
    module = rule.split()[2].rstrip(":")
    modules = {**case.layout, "recompute": "selective", "recompute_modules": (module,)}
    job, layout = dataclasses.replace(case, layout=modules).specs()
    assert any(rule in v for v in layout.violations(job))
    with pytest.raises(LayoutError, match=rule):
        write_launch_files(job, layout, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _check_refused_split(job: Job, layout: Layout, out: Path) -> None:
    """An uneven split with virtual stages on a MindSpeed-LLM release without the layout
    string breaks a layout rule (so the search never picks it): the writer refuses it."""
    release = job.train.framework.release
    rule = f"mindspeed {release} gives virtual stages equal layer counts only"
    assert any(rule in v for v in layout.violations(job))
    with pytest.raises(LayoutError, match=rule):
        write_launch_files(job, layout, out)
    assert not out.exists()


def test_the_release_rule_and_the_option_table_agree() -> None:
    """The layout rule's release (conf/framework/mindspeed.yaml) is the one the launcher's
    option table says first takes the layout string."""
    framework = catalog.load_framework("mindspeed")
    since = added_in(framework, "--pipeline-model-parallel-layout")
    assert framework.unequal_chunks_since == since


def test_mindspeed_flags_follow_the_run_settings(tmp_path: Path) -> None:
    """Overlaps and flash attention come from the run's settings and the job, not
    constants: turn them over and the flags follow, still passing the rules."""
    job, layout = MINDSPEED_CASES[0].specs()
    train = dataclasses.replace(
        job.train,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        flash_attention=False,
        grad_reduce_in_fp32=False,
    )
    write_launch_files(
        Job(model=job.model, cluster=job.cluster, train=train), layout, tmp_path / "out"
    )
    script = tmp_path / "out" / "launch_mindspeed.sh"
    table = _argrules.MINDSPEED_RELEASES[job.train.framework.release]
    launched = run_script(script, tmp_path, table, **mindspeed_env(tmp_path))
    args = launched.args
    assert "--overlap-grad-reduce" in args and "--overlap-param-gather" in args
    assert "--grad-reduce-in-bf16" in args and "--bf16" in args
    assert "--use-flash-attn" not in args and "--no-masked-softmax-fusion" not in args
    problems = megatron_problems(args, launched.env, 64, core_0_12=True, mindspeed=True)
    assert problems == []


def test_mindspeed_script_stops_without_a_tokenizer_folder(tmp_path: Path) -> None:
    job, layout = MINDSPEED_CASES[0].specs()
    (script,) = write_launch_files(job, layout, tmp_path)
    env = {**mindspeed_env(tmp_path), "TOKENIZER_PATH": str(tmp_path / "missing")}
    done = subprocess.run(
        ["bash", str(script)], env={"PATH": os.environ["PATH"], **env}, capture_output=True
    )
    assert done.returncode == 1 and b"TOKENIZER_PATH" in done.stderr


DEEPSPEED_CASES = [
    Case("zero1_sp", "llama2_7b", "vtrain_a100", ("cluster.num_nodes=2",), dict(tp=2, pp=2)),
    Case(
        "zero0_full",
        "llama2_13b",
        "vtrain_a100",
        ("cluster.num_nodes=4",),
        dict(tp=4, pp=4, distributed_optimizer=False, recompute="full"),
    ),
    Case(
        "uneven_fp16",
        "llama2_7b",
        "vtrain_a100",
        ("cluster.num_nodes=2", "model.num_layers=30", "train.precision=fp16"),
        dict(tp=2, pp=4),
    ),
    Case(
        "gpt3_selective",
        "gpt3_175b",
        "vtrain_a100",
        ("cluster.num_nodes=8",),
        dict(tp=8, pp=8, recompute="selective"),
    ),
    Case(
        "fp32_grads",
        "llama2_7b",
        "vtrain_a100",
        ("cluster.num_nodes=1", "train.grad_reduce_in_fp32=true"),
        dict(tp=2, pp=2),
    ),
    Case("qkv_bias", "qwen2_5_7b", "vtrain_a100", ("cluster.num_nodes=1",), dict(tp=4)),
    Case(  # ZeRO-2 and -3 run on DeepSpeed's engine, without its pipeline engine
        "zero2", "llama2_7b", "vtrain_a100", ("cluster.num_nodes=2",), dict(tp=2, zero_stage=2)
    ),
    Case("zero3", "llama2_7b", "vtrain_a100", ("cluster.num_nodes=2",), dict(zero_stage=3)),
    Case(  # DeepSpeed-Ulysses, which excludes Megatron's sequence parallelism
        "ulysses",
        "llama2_7b",
        "vtrain_a100",
        ("cluster.num_nodes=2", "train.seq_len=16384"),
        dict(tp=2, cp=4, sequence_parallel=False),
    ),
]


@pytest.mark.parametrize("case", DEEPSPEED_CASES, ids=lambda c: c.name)
def test_deepspeed_script_and_config_pass_deepspeed_rules(case: Case, tmp_path: Path) -> None:
    job, layout, written = _write(case, tmp_path / "out")
    assert [p.name for p in written] == ["launch_megatron_deepspeed.sh", "ds_config.json"]
    _check_file_form(written[0], layout, "release master")
    assert not os.access(written[1], os.X_OK)
    (tmp_path / "mds").mkdir()
    launched = run_script(
        written[0],
        tmp_path,
        _argrules.MEGATRON_DEEPSPEED_RELEASES[job.train.framework.release],
        MEGATRON_DEEPSPEED_DIR=str(tmp_path / "mds"),
        DATA_PATH="/data/c4_text_document",
        TOKENIZER="meta-llama/Llama-2-7b-hf",
    )
    args = launched.args
    config_path = Path(args["--deepspeed_config"])
    assert config_path == written[1]  # the JSON beside the script, found from any folder
    config = json.loads(config_path.read_text())
    world = job.cluster.num_devices
    assert deepspeed_problems(args, launched.env, world, config) == []
    dp = world // (layout.tp * layout.pp * layout.cp)  # DeepSpeed-Ulysses ranks are not DP
    assert args.get("--ds-sequence-parallel-size", 1) == layout.cp
    assert (
        config["train_batch_size"]
        == args["--micro-batch-size"] * dp * (config["gradient_accumulation_steps"])
    )
    assert config["zero_optimization"]["stage"] == args["--zero-stage"] == layout.sharding
    assert ("--no-pipeline-parallel" in args) == (layout.sharding >= 2)
    asked = job.train.grad_reduce_in_fp32  # DeepSpeed's own default unless the job says
    grads = "fp32" if job.train.reduces_grads_in_fp32 else job.train.precision
    assert config.get("data_types") == (None if asked is None else {"grad_accum_dtype": grads})
    assert ("--deepspeed-activation-checkpointing" in args) == (layout.recompute == "full")
    assert args["--tensor-model-parallel-size"] == layout.tp
    assert args["--pipeline-model-parallel-size"] == layout.pp
    assert ("--sequence-parallel" in args) == layout.sequence_parallel


def test_deepspeed_notes_what_it_cannot_spell(tmp_path: Path) -> None:
    qkv_bias = next(case for case in DEEPSPEED_CASES if case.name == "qkv_bias")
    job, layout, written = _write(qkv_bias, tmp_path)
    assert "QKV biases are off" in written[0].read_text()


@pytest.mark.parametrize(
    ("model", "layout", "refusal"),
    [
        ("mixtral_8x7b", dict(tp=2, ep=2), "is MoE"),
    ],
)
def test_deepspeed_refuses_what_it_cannotrun_script(
    model: str, layout: dict[str, Any], refusal: str, tmp_path: Path
) -> None:
    job = _job(model, "vtrain_a100", ("cluster.num_nodes=2",))
    lay = Layout.resolve(16, **layout)
    assert not lay.violations(job)
    with pytest.raises(LayoutError, match=refusal):
        write_launch_files(job, lay, tmp_path)
    assert any(refusal in line for line in layout_flags(job, lay).refused)


@pytest.mark.parametrize(
    ("overrides", "layout", "refusal"),
    [
        # a split of DeepSpeed before 0.12.5 (BigScience's runs), priced but not today's
        ((), dict(pp=4, layer_split=(8, 9, 8, 7)), "today's DeepSpeed splits"),
        (
            ("train.precision=fp16", "train.grad_reduce_in_fp32=true"),
            dict(tp=2, pp=4, distributed_optimizer=False),
            "DeepSpeed's engine refuses the mix",
        ),
    ],
)
def test_deepspeed_refuses_a_valid_layout_today_s_deepspeed_runs_otherwise(
    overrides: tuple[str, ...], layout: dict[str, Any], refusal: str, tmp_path: Path
) -> None:
    job = _job(
        "llama2_7b",
        "a100",
        ("cluster.num_nodes=4", "train.framework=megatron_deepspeed", *overrides),
    )
    lay = Layout.resolve(32, **layout)
    assert not lay.violations(job)
    with pytest.raises(LayoutError, match=refusal):
        write_launch_files(job, lay, tmp_path)


NEMO_CASES = [
    c
    for c in MEGATRON_CASES
    if c.cluster != "v100" and c.name not in ("no_nemo_recipe", "ep_a2a_overlap")
]


@pytest.mark.parametrize("case", NEMO_CASES, ids=lambda c: c.name)
def test_nemo_override_passes_nemo_rules(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, layout, written = _write(case, tmp_path)
    assert [p.name for p in written] == ["launch_megatron.sh", "nemo_pretrain.py"]
    _check_file_form(written[1], layout, "NeMo main at 8cfedd72")
    with nemo_modules(monkeypatch) as ran:
        runpy.run_path(str(written[1]), run_name="__main__")
    (recipe,) = ran
    settings = recorded(recipe)
    assert nemo_problems(settings, job.cluster.num_devices) == []
    strategy = settings["strategy"]
    assert (strategy["tensor_model_parallel_size"], strategy["pipeline_model_parallel_size"]) == (
        layout.tp,
        layout.pp,
    )
    assert strategy["context_parallel_size"] == layout.cp
    exchange = job.train.context_exchange if layout.cp > 1 else None  # recipes set their own
    assert settings["model"].get("cp_comm_type") == exchange
    assert strategy["expert_model_parallel_size"] == layout.ep
    assert strategy["sequence_parallel"] == layout.sequence_parallel
    assert strategy["virtual_pipeline_model_parallel_size"] == (
        layout.vpp if layout.vpp > 1 else None
    )
    assert settings["data"]["micro_batch_size"] == layout.micro_batch
    assert settings["data"]["global_batch_size"] == job.train.global_batch_size
    assert settings["ddp"]["overlap_grad_reduce"] == job.train.overlaps_grad_reduce
    assert settings["ddp"]["grad_reduce_in_fp32"] == job.train.reduces_grads_in_fp32
    assert settings["model"]["hidden_dropout"] == job.train.dropout_of(job.model)
    modules = list(layout.recomputed_modules) or None  # selective: core_attn unless named
    assert settings["model"].get("recompute_modules") == modules
    if job.model.is_moe:
        deepep = job.train.token_dispatcher == "deepep" and layout.ep > 1
        allgather = job.train.token_dispatcher == "allgather"
        assert settings["model"]["moe_enable_deepep"] == deepep
        dispatcher = "flex" if deepep else "allgather" if allgather else "alltoall"
        assert settings["model"]["moe_token_dispatcher_type"] == dispatcher
    # the plugin's gradient dtype wins over the DDP config's (NeMo's dtype overrides)
    assert settings["plugin"]["grad_reduce_in_fp32"] == job.train.reduces_grads_in_fp32
    overlap = layout.hides_tp_comm(job.train)  # on the recipe's callbacks, or one added
    callbacks = settings["tp_comm_overlap"]
    assert set(callbacks) <= {overlap} and (callbacks or not overlap)
    assert settings["optim"]["use_distributed_optimizer"] == layout.distributed_optimizer
    assert strategy.get("fsdp") == ("megatron" if layout.sharding >= 2 else None)
    if layout.sharding >= 2:  # else the recipe's own, which only FSDP reads
        assert (
            settings["ddp"]["data_parallel_sharding_strategy"] == _FSDP_STRATEGY[layout.sharding]
        )
    assert strategy.get("num_distributed_optimizer_instances", 1) == layout.dp_replicate
    plugin = "bf16_with_fp8_mixed" if job.train.fp8 else "bf16_mixed"
    assert recipe.trainer.plugins.factory == plugin
    if job.train.fp8:  # FP8 primary weights exactly when priced so (docs/reference.md 7.6)
        assert settings["plugin"]["fp8_param_gather"] == layout.distributed_optimizer
    assert (recipe.trainer.num_nodes, recipe.trainer.devices) == (
        job.cluster.num_nodes,
        job.cluster.devices_per_node,
    )


@pytest.mark.parametrize(
    ("model", "recipe"),
    [
        ("llama3_8b", "llama3_8b"),  # its DDP config also holds an FSDP field
        ("baichuan2_7b", "baichuan2_7b"),  # no average_in_collective
        ("qwen2_5_7b", "qwen25_7b"),  # none: MegatronStrategy's default, ddp="megatron"
        ("mixtral_8x7b", "mixtral_8x7b"),
    ],
)
def test_nemo_override_keeps_the_recipes_ddp_settings(
    model: str, recipe: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The override sets the DDP fields the job decides on the recipe's own config; the
    recipe's other settings (check_for_nan_in_grad, average_in_collective, ...) stay."""
    case = Case("ddp", model, "h100", ("train.overlap_param_gather=false",), dict(tp=4))
    job, layout, written = _write(case, tmp_path)
    with nemo_modules(monkeypatch) as ran:
        runpy.run_path(str(written[1]), run_name="__main__")
    (built,) = ran
    ddp = recorded(built)["ddp"]
    owned = {
        "grad_reduce_in_fp32": job.train.reduces_grads_in_fp32,
        "overlap_grad_reduce": job.train.overlaps_grad_reduce,
        "overlap_param_gather": False,
        "use_distributed_optimizer": layout.distributed_optimizer,
    }
    kept = RECIPE_DDP.get(recipe, {"check_for_nan_in_grad": True, "average_in_collective": True})
    kept = kept or {"check_for_nan_in_grad": True}  # NeMo's default config
    assert ddp == {**kept, **owned}
    assert ddp["check_for_nan_in_grad"] is True


def test_nemo_override_in_fp32_builds_its_own_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = Case("fp32", "llama3_8b", "a100", ("train.precision=fp32",), dict(tp=8))
    job, layout, written = _write(case, tmp_path)
    with nemo_modules(monkeypatch) as ran:
        runpy.run_path(str(written[1]), run_name="__main__")
    (recipe,) = ran
    settings = recorded(recipe)
    assert nemo_problems(settings, job.cluster.num_devices) == []
    assert recipe.trainer.plugins.kwargs["precision"] == "32"
    assert not settings["optim"]["bf16"] and not settings["optim"]["fp16"]
    assert "import torch" in written[1].read_text()  # for the plugin's dtypes


def test_nemo_file_is_only_for_megatron_core_models_with_a_recipe(tmp_path: Path) -> None:
    job, layout, written = _write(MEGATRON_CASES[-1], tmp_path / "internlm")
    assert [p.name for p in written] == ["launch_megatron.sh"]  # NeMo has no InternLM2 recipe
    job, layout, written = _write(MEGATRON_CASES[-2], tmp_path / "v100")
    assert job.train.framework.name == "megatron_lm"
    assert [p.name for p in written] == ["launch_megatron.sh"]


def test_invalid_layout_is_refused_with_every_rule(tmp_path: Path) -> None:
    job = _job("llama70b", "h100", ())
    bad = Layout.resolve(64, tp=3, pp=7)
    with pytest.raises(LayoutError, match="tp=3 does not divide"):
        write_launch_files(job, bad, tmp_path)
    assert not list(tmp_path.iterdir())


def test_layout_flags_are_the_jobs_framework_and_its_facts() -> None:
    """The terminal shows the job's framework only; overlaps follow its facts."""
    layout = Layout.resolve(64, tp=8, pp=4, vpp=5)
    core = _job("llama70b", "h100", ("train.precision=fp8",))
    flags = layout_flags(core, layout)
    assert flags.title == "Megatron-LM (Megatron-Core)" and not flags.refused
    assert "--num-layers-per-virtual-pipeline-stage 4" in flags.flags
    assert {"--overlap-grad-reduce", "--overlap-param-gather"} <= set(flags.flags)
    legacy = _job("llama70b", "a100", ("train.framework=megatron_lm",))
    old = layout_flags(legacy, layout)
    assert old.framework == "megatron_lm" and "--overlap-grad-reduce" not in old.flags
    # Its interleaved schedule blocked on its sends; today's Megatron-LM overlaps them.
    assert "--no-overlap-p2p-communication" in old.flags
    assert "--no-overlap-p2p-communication" not in flags.flags
    ascend = _job("llama70b", "ascend", ())
    mindspeed = layout_flags(ascend, Layout.resolve(64, pp=3))
    assert mindspeed.title == "MindSpeed-LLM" and "--overlap-grad-reduce" not in mindspeed.flags
    assert any(f.startswith("--num-layer-list ") for f in mindspeed.flags)


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (["--tensor-model-parallel", "2"], "unrecognized"),  # an abbreviation
        (["--bf16", "true"], "unexpected value"),
        (["--bf16=1"], "takes no value"),
        (["--seq-length"], "expects one value"),
        (["--seq-length", "4k"], "invalid value"),
        (["--normalization", "rmsnorm"], "not one of"),
        (["--swiglu", "--swiglu"], "twice"),
    ],
)
def test_the_option_parser_refuses_what_argparse_refuses(tokens: list[str], message: str) -> None:
    with pytest.raises(_argrules.ArgError, match=message):
        _argrules.parse(tokens, _argrules.MEGATRON)


def test_the_rules_catch_broken_launches() -> None:
    """The cross-option checks fire: a sanity check of the checker itself."""
    base = ["--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32"]
    base += [
        "--max-position-embeddings",
        "4096",
        "--seq-length",
        "4096",
        "--micro-batch-size",
        "1",
    ]
    base += ["--train-iters", "10", "--mock-data", "--tokenizer-type", "NullTokenizer"]
    base += ["--vocab-size", "32000"]
    broken = _argrules.parse(
        base
        + ["--tensor-model-parallel-size", "2", "--context-parallel-size", "3"]
        + ["--recompute-granularity", "selective", "--recompute-method", "uniform"]
        + ["--overlap-param-gather", "--num-layers-per-virtual-pipeline-stage", "4"]
        + ["--fp8-format", "hybrid", "--fp8-param-gather"],
        _argrules.MEGATRON,
    )
    found = " ".join(megatron_problems(broken, {}, 12))
    for rule in ("R18", "R22", "R11", "R10", "R25", "R30"):
        assert rule in found
    listed = _argrules.parse(
        [*base, "--pipeline-model-parallel-size", "4", "--num-layer-list", "8,8,8,9"],
        _argrules.MINDSPEED,
    )
    assert "sums to 33" in " ".join(
        megatron_problems(listed, {}, 8, core_0_12=True, mindspeed=True)
    )
    card = _argrules.parse(
        [*base, "--rope-type", "yarn", "--num-experts", "8", "--moe-router-topk", "2"]
        + ["--moe-router-enable-expert-bias", "--disable-bias-linear"]
        + ["--moe-router-num-groups", "3", "--moe-router-group-topk", "1"],
        _argrules.MEGATRON,
    )
    found = " ".join(megatron_problems(card, {}, 8))
    for rule in ("R31", "T12", "T13"):
        assert rule in found
    mla_yarn = _argrules.parse(
        [*base, "--multi-latent-attention", "--position-embedding-type", "yarn"],
        _argrules.MEGATRON,
    )
    assert "X6" in " ".join(megatron_problems(mla_yarn, {}, 8))
    fused = _argrules.parse([*base, "--rotary-interleaved"], _argrules.MINDSPEED)
    assert "R32" in " ".join(megatron_problems(fused, {}, 8, core_0_12=True, mindspeed=True))


def test_a_gb200_rack_launches_one_torchrun_per_4_gpu_tray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rack = Case(
        "gb200_rack", "llama3_70b", "gb200", ("train.global_batch_size=576",), {"tp": 4, "pp": 2}
    )
    job, layout, written = _write(rack, tmp_path)
    assert (job.cluster.num_devices, job.cluster.processes_per_host) == (72, 4)
    script = (tmp_path / "launch_megatron.sh").read_text()
    assert "--nproc-per-node 4\n" in script and "--nnodes 18\n" in script
    nemo = tmp_path / "nemo_pretrain.py"
    assert "--nproc-per-node 4 --nnodes 18 " in nemo.read_text()
    with nemo_modules(monkeypatch) as ran:
        runpy.run_path(str(nemo), run_name="__main__")
    (recipe,) = ran
    trainer = recorded(recipe)["trainer"]
    assert (trainer["num_nodes"], trainer["devices"]) == (18, 4)


def test_a_host_must_divide_its_node() -> None:
    with pytest.raises(SpecError, match="devices_per_host=5 does not divide devices_per_node=72"):
        _job("llama3_70b", "gb200", ("cluster.devices_per_host=5",))
