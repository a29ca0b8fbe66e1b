"""MindSpeed-LLM on Ascend: ``torchrun ... pretrain_gpt.py`` from the MindSpeed-LLM checkout.

MindSpeed-LLM (``Ascend/MindSpeed-LLM`` at c77308a1) runs Megatron-LM core_v0.12.1 with
MindSpeed's NPU features, so the architecture and layout flags are Megatron's
(:mod:`autotune.launch._megatron`) plus what its example pretraining scripts
(``examples/mcore/*/pretrain_*.sh``) pass on top: MindSpeed's local transformer with NPU flash
attention and fused RMSNorm, SwiGLU and RoPE kernels, the tokenizer as a Hugging Face folder,
the CANN environment and the HCCL and allocator settings most of those scripts export
(docs/reference.md 7.4). An uneven split without virtual stages is ``--num-layer-list``; with
them, the layout string MindSpeed back-ports from Megatron
(``mindspeed/features_manager/pipeline_parallel/pipeline_model_parallel_layout_feature.py``),
which MindSpeed-LLM 26.0.0 lacks: on that release such a split breaks a layout rule
(``FrameworkSpec.unequal_chunks``), so the search never picks it.
The script is written for the job's release (``framework.release``) and holds only options it
accepts (:mod:`autotune.launch._releases`).
Context parallelism is named explicitly: the ring (``megatron_cp_algo``) or Ulysses
(``ulysses_cp_algo``), as the run's ``cp_comm_type`` says (docs/reference.md 3.5). Positions
are MindSpeed-LLM's own options (``mindspeed_llm/features_manager/common/rotary.py``: RoPE
scaling, GLM's interleaved partial RoPE; ``.../flash_attention/alibi_feature.py``: ALiBi), as
its example scripts pass them; the router is Megatron-Core's (``--norm-topk-prob``, which
renormalises after the scaling, is not needed: Megatron-Core's softmax after the top-k and its
sigmoid top-k already sum to 1).
"""

from __future__ import annotations

from autotune.launch._data_parallel import overlap_flags
from autotune.launch._megatron import dtype_flags
from autotune.launch._megatron import moe_layout_flags
from autotune.launch._megatron import one_to_one_flags
from autotune.launch._megatron import pipeline_flags
from autotune.launch._megatron import recompute_flags
from autotune.launch._megatron import router_notes
from autotune.launch._megatron import shape_flags
from autotune.launch._megatron import uses_grouped_gemm
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
from autotune.launch._script import flag
from autotune.launch._script import number
from autotune.launch._script import require
from autotune.launch._script import run_group
from autotune.simulators import ModelSpec

SCRIPT_NAME = "launch_mindspeed.sh"
LAYOUT_OPTION = "--pipeline-model-parallel-layout"

# What most example pretraining scripts export (counts over MindSpeed-LLM's 48
# examples/mcore/*/pretrain_*.sh at c77308a1: the connect timeout in 33, the execution timeout
# in 30, expandable segments in 29, the task queue and CPU affinity in 20 each); exported
# values win. Meanings: docs/en/pytorch/features/mcore/environment_variable.md.
_ASCEND_EXPORTS = (
    'export HCCL_CONNECT_TIMEOUT="${HCCL_CONNECT_TIMEOUT:-3600}"',
    'export HCCL_EXEC_TIMEOUT="${HCCL_EXEC_TIMEOUT:-3600}"',
    'export PYTORCH_NPU_ALLOC_CONF="${PYTORCH_NPU_ALLOC_CONF:-expandable_segments:True}"',
    'export TASK_QUEUE_ENABLE="${TASK_QUEUE_ENABLE:-2}"',
    'export CPU_AFFINITY_CONF="${CPU_AFFINITY_CONF:-1}"',
)


def model_flags(launch: Launch) -> tuple[Flag, ...]:
    """The architecture and the model card: Megatron's shapes and router, MindSpeed-LLM's
    positions."""
    return (*shape_flags(launch), *position_flags(launch.job.model))


def position_flags(model: ModelSpec) -> list[Flag]:
    """Positions as its example scripts spell them: ALiBi (baichuan2 13B), learned, or RoPE
    with its base, share of each head, GLM's pairing (chatglm3, glm4: ``--use-glm-rope`` and
    no fused RoPE) and its scaling (llama31: llama3; deepseek2, deepseek3: yarn)."""
    if model.positions != "rope":
        return [flag("--position-embedding-type", model.positions)]
    flags = [flag("--position-embedding-type", "rope"), flag("--rotary-base", model.rotary_base)]
    if model.rotary_percent != 1:
        flags.append(flag("--rotary-percent", number(model.rotary_percent)))
    if model.rotary_interleaved:
        flags += [flag("--use-glm-rope"), flag("--no-rope-fusion")]
    return flags + _scaling_flags(model)


def _scaling_flags(model: ModelSpec) -> list[Flag]:
    """``--rope-scaling-type`` and the scaling's options (YaRN's betas are integers)."""
    if model.rope_scaling == "none":
        return []
    flags = [
        flag("--rope-scaling-type", model.rope_scaling),
        flag("--rope-scaling-factor", number(model.rope_scaling_factor)),
    ]
    if model.rope_scaling == "llama3":
        return [
            *flags,
            flag("--low-freq-factor", number(model.rope_low_freq_factor)),
            flag("--high-freq-factor", number(model.rope_high_freq_factor)),
            flag("--original-max-position-embeddings", model.rope_original_max_positions),
        ]
    return [
        *flags,
        flag("--rope-scaling-original-max-position-embeddings", model.rope_original_max_positions),
        flag("--beta-fast", round(model.rope_beta_fast)),
        flag("--beta-slow", round(model.rope_beta_slow)),
        flag("--rope-scaling-mscale", number(model.rope_mscale)),
        flag("--rope-scaling-mscale-all-dim", number(model.rope_mscale_all_dim)),
    ]


def card_notes(model: ModelSpec) -> list[str]:
    """The model-card facts MindSpeed-LLM cannot be told, one sentence each."""
    notes = router_notes(model)
    betas = {"rope_beta_fast": model.rope_beta_fast, "rope_beta_slow": model.rope_beta_slow}
    fractional = [f"{name}={value!r}" for name, value in betas.items() if value != round(value)]
    if model.rope_scaling == "yarn" and fractional:
        notes.append(
            f"MindSpeed-LLM takes integer YaRN betas: {', '.join(fractional)} are launched "
            "rounded."
        )
    return notes


def layout_flags(launch: Launch) -> tuple[Flag, ...]:
    """Everything the layout decides, in MindSpeed-LLM's spelling.

    With virtual stages a block recompute count means layers per chunk unless
    ``--enable-recompute-layers-per-pp-rank`` is given (MindSpeed
    ``docs/zh/features/recomputation.md``), which keeps the layout's per-stage count. The
    framework's TP overlap is MindSpeed's ``--use-ascend-coc`` (docs/reference.md 7.4).
    """
    job = launch.job
    flags = [
        *one_to_one_flags(launch),
        flag("--global-batch-size", job.train.global_batch_size),
        *pipeline_flags(launch, layer_list=True),
        *recompute_flags(launch, per_stage_option="--enable-recompute-layers-per-pp-rank"),
        *overlap_flags(launch),
        *moe_layout_flags(launch),
    ]
    if launch.layout.cp > 1:
        algo = "ulysses_cp_algo" if job.train.context_exchange == "a2a" else "megatron_cp_algo"
        flags.append(flag("--context-parallel-algo", algo))
    if launch.layout.hides_tp_comm(job.train):
        flags.append(flag("--use-ascend-coc"))
    return tuple(flags)


def _implementation_flags(launch: Launch) -> tuple[Flag, ...]:
    """Megatron-Core models on MindSpeed's local transformer, the NPU kernels that apply to
    this model, and the dtype (no FP8: it needs Transformer Engine, docs/reference.md 7.4)."""
    job = launch.job
    model = job.model
    flags = [flag("--use-mcore-models"), flag("--transformer-impl", "local")]
    if job.flash_attention:  # the softmax runs inside the fused attention kernel
        flags += [flag("--use-flash-attn"), flag("--no-masked-softmax-fusion")]
    if model.norm == "rmsnorm":
        flags.append(flag("--use-fused-rmsnorm"))
    if model.activation == "swiglu":
        flags.append(flag("--use-fused-swiglu"))
    if model.positions == "rope":
        flags.append(flag("--use-rotary-position-embeddings"))
    if _plain_rope(model):  # the fused kernel rotates whole heads, by halves
        flags.append(flag("--use-fused-rotary-pos-emb"))
    # The weight gradients are accumulated as priced (docs/reference.md 7.2): through the DDP
    # hook, as most example scripts run them, and the grouped experts' inside their GEMM.
    framework = job.train.framework
    if framework.grad_accumulation != "fused":
        flags.append(flag("--no-gradient-accumulation-fusion"))
    if uses_grouped_gemm(launch) and framework.expert_grad_accumulation == "fused":
        flags.append(flag("--gemm-gradient-accumulation-fusion"))
    return (*flags, *dtype_flags(launch))


def _plain_rope(model: ModelSpec) -> bool:
    """RoPE over whole heads, rotating halves (not GLM's pairs)."""
    return model.positions == "rope" and model.rotary_percent == 1 and not model.rotary_interleaved


def _data_group(launch: Launch) -> ArgGroup:
    """The dataset prefix and the Hugging Face tokenizer folder; the embedding keeps the
    model's vocabulary (``--padded-vocab-size`` with divisor 1, as the example scripts do)."""
    return ArgGroup(
        "DATA_ARGS",
        "data and tokenizer (variables above)",
        (
            flag("--data-path", Ref("DATA_PATH")),
            flag("--split", "100,0,0"),
            flag("--tokenizer-type", "PretrainedFromHF"),
            flag("--tokenizer-name-or-path", Ref("TOKENIZER_PATH")),
            flag("--make-vocab-size-divisible-by", 1),
            flag("--padded-vocab-size", launch.job.model.vocab_size),
        ),
    )


def _variables() -> tuple[Variable, ...]:
    return (
        Variable("MINDSPEED_LLM_DIR", ".", "the MindSpeed-LLM checkout (pretrain_gpt.py at top)"),
        Variable("CANN_SET_ENV", "/usr/local/Ascend/cann/set_env.sh", "CANN's environment"),
        Variable("ATB_SET_ENV", "/usr/local/Ascend/nnal/atb/set_env.sh", "NNAL ATB's environment"),
        Variable("DATA_PATH", "", "prefix of a preprocessed dataset (..._text_document)"),
        Variable("TOKENIZER_PATH", "", "folder of the Hugging Face tokenizer"),
        *RUN_VARIABLES,
        *CLUSTER_VARIABLES,
    )


def _setup(launch: Launch) -> tuple[str, ...]:
    """Check the inputs MindSpeed validates (the tokenizer folder must exist), source the
    CANN and ATB environments (docs/en/pytorch/training/quick_start.md), export the rest."""
    return (
        require('-z "${DATA_PATH}"', "set DATA_PATH to a preprocessed dataset prefix"),
        require('! -d "${TOKENIZER_PATH}"', "set TOKENIZER_PATH to a tokenizer folder"),
        'source "${CANN_SET_ENV}"',
        'source "${ATB_SET_ENV}"',
        *device_connections_export(launch),
        *_ASCEND_EXPORTS,
    )


def script(launch: Launch, title: str) -> BashScript:
    """The MindSpeed-LLM launch script of ``launch``."""
    job = launch.job
    header = (
        launch.written_for(f"{title} launch"),
        launch.describe(),
        *launch.precision_notes(),
        *card_notes(job.model),
        RUN_HINT,
    )
    return BashScript(
        header=header,
        variables=_variables(),
        setup=_setup(launch),
        launcher="torchrun",
        launcher_group=distributed_group(job.cluster),
        groups=(
            ArgGroup("MODEL_ARGS", "the model's architecture", model_flags(launch)),
            ArgGroup("LAYOUT_ARGS", "the parallel layout autotune picked", layout_flags(launch)),
            ArgGroup(
                "IMPL_ARGS", "MindSpeed's kernels and the dtype", _implementation_flags(launch)
            ),
            _data_group(launch),
            run_group(),
        ),
        workdir="MINDSPEED_LLM_DIR",
        entry="pretrain_gpt.py",
    )


def launch_files(launch: Launch, title: str) -> tuple[LaunchFile, ...]:
    """The MindSpeed-LLM launch script."""
    return (LaunchFile(SCRIPT_NAME, script(launch, title).render(), executable=True),)
