"""Megatron-DeepSpeed: ``torchrun ... pretrain_gpt.py --deepspeed`` and its ``ds_config.json``.

Flags are those of ``microsoft/Megatron-DeepSpeed`` at f4157bea (``megatron/arguments.py``,
with DeepSpeed's own ``--deepspeed``/``--deepspeed_config``), launched with torchrun as its
``examples_deepspeed/pretrain_llama2_distributed.sh`` does. DeepSpeed's pipeline engine runs
the model (plain 1F1B, its own layer split, docs/reference.md 7.1); ZeRO stage 1 shards the
optimizer states when the layout's ``distributed_optimizer`` is set (docs/reference.md 7.2).
DeepSpeed requires ``train_batch_size = micro batch * gradient accumulation * data-parallel
size`` (``deepspeed/runtime/config.py``), and Megatron-DeepSpeed resets DeepSpeed's batch from
its own flags every step, so the JSON repeats the flags' batch exactly.

Context parallelism is DeepSpeed-Ulysses (``--ds-sequence-parallel-size``), the stack's only
one. What this stack cannot launch is refused: Megatron's MoE and MLA layers, and a block
recompute count (its pipeline recomputes uniformly only).
"""

from __future__ import annotations

import json

from autotune.launch._script import CLUSTER_VARIABLES
from autotune.launch._script import RUN_HINT
from autotune.launch._script import RUN_VARIABLES
from autotune.launch._script import ArgGroup
from autotune.launch._script import BashScript
from autotune.launch._script import Flag
from autotune.launch._script import Launch
from autotune.launch._script import LaunchFile
from autotune.launch._script import Ref
from autotune.launch._script import Variable
from autotune.launch._script import device_connections_export
from autotune.launch._script import distributed_group
from autotune.launch._script import dropout_flags
from autotune.launch._script import flag
from autotune.launch._script import has_linear_bias
from autotune.launch._script import number
from autotune.launch._script import require
from autotune.launch._script import run_group
from autotune.simulators.layout import ZERO_GRADS

SCRIPT_NAME = "launch_megatron_deepspeed.sh"
CONFIG_NAME = "ds_config.json"

# The gradient-norm clip Megatron applies by default (--clip-grad 1.0, arguments.py); under
# DeepSpeed the engine clips, with the value in the JSON.
_GRADIENT_CLIPPING = 1.0


def refusals(launch: Launch) -> list[str]:
    """What Megatron-DeepSpeed cannot run of this job, one sentence each."""
    job = launch.job
    found = []
    if job.model.is_moe:
        found.append(f"{job.model.name} is MoE: Megatron-DeepSpeed runs DeepSpeed-MoE, not these")
    if job.model.attention == "mla":
        found.append(f"{job.model.name} uses MLA, which Megatron-DeepSpeed does not implement")
    if launch.layout.recompute_layers is not None:
        found.append(
            f"recompute_layers={launch.layout.recompute_layers}: DeepSpeed's pipeline recomputes "
            "uniformly only (no block method)"
        )
    if job.dtype == "fp16" and job.train.reduces_grads_in_fp32 and zero_stage(launch) == 0:
        found.append(
            "fp16 with fp32 gradients and no ZeRO: DeepSpeed's engine refuses the mix of model "
            "dtype and gradient accumulation type (its optimizer sanity check; use "
            "distributed_optimizer=true or train.grad_reduce_in_fp32=false)"
        )
    split = launch.layout.stage_layers(job.model, job.train)
    today = job.train.framework.default_split(job.model.num_layers, launch.layout.pp)
    if split != today:  # the splits of DeepSpeed before 0.12.5 and of BigScience's fork
        found.append(
            f"layers per stage {'/'.join(map(str, split))}: today's DeepSpeed splits "
            f"'type:transformer' as {'/'.join(map(str, today))}; the other splits ran on "
            "DeepSpeed before 0.12.5 or BigScience's fork (docs/reference.md 7.1)"
        )
    return found


def model_flags(launch: Launch) -> tuple[Flag, ...]:
    """The architecture in Megatron-DeepSpeed's spelling (``--num-key-value-heads``,
    lower-case norms, ``--layernorm-epsilon``; rotary positions, with their base and share of
    each head, replace learned ones; ALiBi, which it lacks, is launched as RoPE:
    :func:`card_notes`)."""
    job = launch.job
    model = job.model
    flags = [
        flag("--num-layers", model.num_layers),
        flag("--hidden-size", model.hidden_size),
        flag("--ffn-hidden-size", model.ffn_hidden_size),
        flag("--num-attention-heads", model.num_attention_heads),
        flag("--kv-channels", model.head_dim),
        flag("--seq-length", job.train.seq_len),
        flag("--max-position-embeddings", job.train.seq_len),
        flag("--normalization", model.norm),
        flag("--layernorm-epsilon", number(model.norm_epsilon)),
    ]
    if model.num_kv_heads < model.num_attention_heads:
        flags.append(flag("--num-key-value-heads", model.num_kv_heads))
    if model.positions != "learned_absolute":
        flags += [
            flag("--use-rotary-position-embeddings"),
            flag("--rotary-position-embeddings-theta", model.rotary_base),
        ]
        if model.rotary_percent != 1:
            flags.append(flag("--rotary-percent", number(model.rotary_percent)))
    if model.activation == "swiglu":
        flags.append(flag("--swiglu"))
    if not model.tied_embeddings:
        flags.append(flag("--untie-embeddings-and-output-weights"))
    if not has_linear_bias(model):
        flags.append(flag("--disable-bias-linear"))
    return (*flags, *dropout_flags(model, job.train))


def card_notes(launch: Launch) -> list[str]:
    """The model-card facts Megatron-DeepSpeed has no option for (megatron/arguments.py:
    RoPE's base and share only), and grouped KV heads, which its master splits wrongly, one
    sentence each for the header."""
    model, notes = launch.job.model, []
    if model.positions == "alibi":
        notes.append(
            f"Megatron-DeepSpeed has no ALiBi: {model.name}'s ALiBi positions are launched as "
            f"RoPE (base {model.rotary_base})."
        )
    unsaid = {
        f"{model.rope_scaling} RoPE scaling": model.rope_scaling != "none",
        "RoPE on pairs of adjacent dimensions (GLM)": model.rotary_interleaved,
        "query/key layernorm": model.qk_layernorm,
    }
    notes += [
        f"Megatron-DeepSpeed has no {what}: {model.name}'s is not launched."
        for what, present in unsaid.items()
        if present
    ]
    if model.num_kv_heads < model.num_attention_heads:
        notes.append(
            f"Megatron-DeepSpeed's master cuts the QKV output into three equal widths (since "
            f"0d6e3793, 2024-09-04), which fits multi-head attention only: {model.name}'s "
            f"{model.num_kv_heads} KV heads need the grouped split of an earlier commit "
            "(docs/reference.md 3.3)."
        )
    return notes


def layout_flags(launch: Launch) -> tuple[Flag, ...]:
    """Degrees, batch, sequence parallelism (Megatron's, or DeepSpeed-Ulysses for context
    parallelism), recompute (uniform, one layer per group). ZeRO-2 and -3 (pp 1, the rules
    see to it) run on DeepSpeed's engine without the pipeline module
    (``--no-pipeline-parallel``: ``pretrain_gpt.py`` builds ``GPTModel``, not
    ``GPTModelPipe``), since the pipeline engine refuses them (docs/reference.md 7.9)."""
    layout = launch.layout
    flags = [
        flag("--tensor-model-parallel-size", layout.tp),
        flag("--pipeline-model-parallel-size", layout.pp),
        flag("--micro-batch-size", layout.micro_batch),
        flag("--global-batch-size", launch.job.train.global_batch_size),
    ]
    if layout.sharding >= ZERO_GRADS:  # DeepSpeed's engine, not its pipeline engine
        flags.append(flag("--no-pipeline-parallel"))
    if layout.cp > 1:
        flags.append(flag("--ds-sequence-parallel-size", layout.cp))
    if layout.sequence_parallel:
        flags.append(flag("--sequence-parallel"))
    if layout.recompute == "selective":
        flags.append(flag("--recompute-granularity", "selective"))
    elif layout.recompute == "full":
        flags += [
            flag("--recompute-granularity", "full"),
            flag("--recompute-method", "uniform"),
            flag("--recompute-num-layers", 1),
        ]
    return tuple(flags)


def _precision_flags(launch: Launch) -> tuple[Flag, ...]:
    """The dtype and FlashAttention-2, which Megatron-DeepSpeed leaves off unless asked."""
    job = launch.job
    flags = [flag(f"--{job.dtype}")] if job.dtype != "fp32" else []
    if job.flash_attention:
        flags.append(flag("--use-flash-attn-v2"))
    return tuple(flags)


def _deepspeed_flags(launch: Launch) -> tuple[Flag, ...]:
    """DeepSpeed on, its JSON, the ZeRO stage (kept equal to the JSON's by hand: Megatron-
    DeepSpeed does not compare them), and DeepSpeed's activation checkpointing with full
    recompute (as the example script pairs them)."""
    flags = [
        flag("--deepspeed"),
        flag("--deepspeed_config", Ref("DS_CONFIG")),
        flag("--zero-stage", zero_stage(launch)),
    ]
    if launch.layout.recompute == "full":
        flags.append(flag("--deepspeed-activation-checkpointing"))
    return tuple(flags)


def zero_stage(launch: Launch) -> int:
    """The layout's ZeRO stage: 1 for a distributed optimizer, else 0, or 2 or 3 (which the
    pipeline engine refuses: those run without it, :func:`layout_flags`)."""
    return launch.layout.sharding


def ds_config(launch: Launch) -> dict[str, object]:
    """DeepSpeed's JSON: the batch exactly as the flags give it, ZeRO, dtype, clipping."""
    job = launch.job
    layout, train = launch.layout, job.train
    config: dict[str, object] = {
        "train_batch_size": train.global_batch_size,
        "train_micro_batch_size_per_gpu": layout.micro_batch,
        "gradient_accumulation_steps": layout.num_microbatches(train),
        "gradient_clipping": _GRADIENT_CLIPPING,
        "zero_optimization": {"stage": zero_stage(launch)},
    }
    if job.dtype == "bf16":
        config["bf16"] = {"enabled": True}
    elif job.dtype == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0}  # 0: dynamic loss scaling
    if train.grad_reduce_in_fp32 is not None and job.dtype != "fp32":  # else DeepSpeed's own
        accumulate = "fp32" if train.reduces_grads_in_fp32 else job.dtype
        config["data_types"] = {"grad_accum_dtype": accumulate}
    return config


def _data_group() -> ArgGroup:
    return ArgGroup(
        "DATA_ARGS",
        "data and tokenizer (variables above)",
        (
            flag("--data-path", Ref("DATA_PATH")),
            flag("--data-impl", "mmap"),
            flag("--split", "100,0,0"),
            flag("--tokenizer-type", "HFTokenizer"),
            flag("--tokenizer-model", Ref("TOKENIZER")),
        ),
    )


def _variables() -> tuple[Variable, ...]:
    return (
        Variable("MEGATRON_DEEPSPEED_DIR", ".", "the Megatron-DeepSpeed checkout"),
        Variable("DS_CONFIG", f"${{SCRIPT_DIR}}/{CONFIG_NAME}", "DeepSpeed's JSON, beside this"),
        Variable("DATA_PATH", "", "prefix of a preprocessed dataset (..._text_document)"),
        Variable("TOKENIZER", "", "Hugging Face tokenizer name or folder"),
        *RUN_VARIABLES,
        *CLUSTER_VARIABLES,
    )


def script(launch: Launch, title: str) -> BashScript:
    """The Megatron-DeepSpeed launch script of ``launch``."""
    job = launch.job
    header = [launch.written_for(f"{title} launch"), launch.describe(), *launch.precision_notes()]
    if job.model.qkv_bias and not has_linear_bias(job.model):
        header.append(
            "Megatron-DeepSpeed has no QKV-bias-only flag: this model's QKV biases are off."
        )
    header += [*card_notes(launch), RUN_HINT]
    return BashScript(
        header=tuple(header),
        variables=_variables(),
        setup=(
            require('-z "${DATA_PATH}"', "set DATA_PATH to a preprocessed dataset prefix"),
            require('-z "${TOKENIZER}"', "set TOKENIZER to a Hugging Face tokenizer"),
            *device_connections_export(launch),
        ),
        launcher="torchrun",
        launcher_group=distributed_group(job.cluster),
        groups=(
            ArgGroup("MODEL_ARGS", "the model's architecture", model_flags(launch)),
            ArgGroup("LAYOUT_ARGS", "the parallel layout autotune picked", layout_flags(launch)),
            ArgGroup("PRECISION_ARGS", "precision and attention kernel", _precision_flags(launch)),
            ArgGroup(
                "DEEPSPEED_ARGS",
                f"DeepSpeed, configured by {CONFIG_NAME}",
                _deepspeed_flags(launch),
            ),
            _data_group(),
            run_group(),
        ),
        workdir="MEGATRON_DEEPSPEED_DIR",
        entry="pretrain_gpt.py",
    )


def launch_files(launch: Launch, title: str) -> tuple[LaunchFile, ...]:
    """The launch script and DeepSpeed's JSON beside it (for a job :func:`refusals` passes)."""
    config = json.dumps(ds_config(launch), indent=2) + "\n"
    return (
        LaunchFile(SCRIPT_NAME, script(launch, title).render(), executable=True),
        LaunchFile(CONFIG_NAME, config, executable=False),
    )
