"""Megatron-LM (Megatron-Core): ``torchrun ... pretrain_gpt.py`` with every flag derived.

Flag names, types and rules are those of ``NVIDIA/Megatron-LM`` at d98e8a64 (Megatron-Core
0.20; ``megatron/training/arguments.py``, ``megatron/core/transformer/transformer_config.py``),
launched the way its ``examples/llama`` and ``examples/mixtral`` scripts launch it. The
shape, router and layout flags below also hold at tag core_v0.12.1, which MindSpeed-LLM runs
on, so :mod:`autotune.launch._mindspeed` builds on them (positions it spells its own way).
Which overlaps run is a fact of the framework (``conf/framework/<name>.yaml``,
docs/reference.md 7.2 and 7.5), never a constant. The model card's facts
(:mod:`autotune.simulators.model_card`) are written as flags, and what Megatron-LM cannot be told
of them is said in the script's header (:func:`card_notes`). The script is written for the
job's Megatron-LM release (``framework.release``), and holds only options it accepts
(:mod:`autotune.launch._releases`).
"""

from __future__ import annotations

from autotune.launch._data_parallel import overlap_flags
from autotune.launch._data_parallel import sharding_flags
from autotune.launch._releases import added_in
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
from autotune.simulators import ModelSpec
from autotune.simulators.layout import LAYOUT_FIELDS
from autotune.simulators.layout import ZERO_GRADS
from autotune.simulators.layout import field_info
from autotune.simulators.states import fp8_primary

SCRIPT_NAME = "launch_megatron.sh"
YARN_EMBEDDING = "--position-embedding-type yarn"  # with its --yarn-* options

# What Megatron-LM fixes and cannot be told (megatron/core/models/common/embeddings/
# rotary_pos_embedding.py RotaryEmbedding._apply_scaling; transformer_config.py
# MLATransformerConfig: arguments.py has no flag for these fields, which MLA reads unprefixed).
LLAMA3_SCALING_FIXED = {
    "rope_low_freq_factor": 1.0,
    "rope_high_freq_factor": 4.0,
    "rope_original_max_positions": 8192,
}
MLA_YARN_FIXED = {
    "rope_original_max_positions": 4096,
    "rope_beta_fast": 32.0,
    "rope_beta_slow": 1.0,
}


def model_flags(launch: Launch) -> tuple[Flag, ...]:
    """The architecture and the model card: shapes, positions, norms, activation, biases,
    dropout, MoE and its router, in Megatron-LM main's spelling."""
    return (*shape_flags(launch), *position_flags(launch))


def shape_flags(launch: Launch) -> tuple[Flag, ...]:
    """The architecture but its positions: sizes, attention, norm and its epsilon, query/key
    norms, activation, biases, dropout, MoE and its router (the same options on Megatron-LM
    main and core_v0.12.1).

    An all-MoE model (no dense layer, ``ffn_hidden_size`` 0) passes its expert width as
    ``--ffn-hidden-size`` too, as Megatron's Mixtral example does.
    """
    model, train = launch.job.model, launch.job.train
    flags = [
        flag("--num-layers", model.num_layers),
        flag("--hidden-size", model.hidden_size),
        flag("--ffn-hidden-size", model.ffn_hidden_size or model.expert_ffn_hidden_size),
        flag("--num-attention-heads", model.num_attention_heads),
        *_attention_flags(launch),
        flag("--seq-length", train.seq_len),
        flag("--max-position-embeddings", train.seq_len),
        flag("--normalization", "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm"),
        flag("--norm-epsilon", number(model.norm_epsilon)),
    ]
    if model.qk_layernorm or model.attention == "mla":  # MLA: its latents' norms
        flags.append(flag("--qk-layernorm"))
    if model.activation == "swiglu":
        flags.append(flag("--swiglu"))
    if not model.tied_embeddings:
        flags.append(flag("--untie-embeddings-and-output-weights"))
    if not has_linear_bias(model):
        flags.append(flag("--disable-bias-linear"))
        if model.qkv_bias:
            flags.append(flag("--add-qkv-bias"))
    return (*flags, *dropout_flags(model, train), *_moe_flags(launch), *router_flags(launch))


def _attention_flags(launch: Launch) -> list[Flag]:
    """MLA's ranks and head sizes, or the head size and GQA's query groups."""
    model = launch.job.model
    if model.attention == "mla":
        flags = [flag("--multi-latent-attention")]
        if model.q_lora_rank:
            flags.append(flag("--q-lora-rank", model.q_lora_rank))
        return [
            *flags,
            flag("--kv-lora-rank", model.kv_lora_rank),
            flag("--qk-head-dim", model.qk_nope_head_dim),
            flag("--qk-pos-emb-head-dim", model.qk_rope_head_dim),
            flag("--v-head-dim", model.v_head_dim),
        ]
    flags = [flag("--kv-channels", model.head_dim)]
    if model.num_kv_heads < model.num_attention_heads:
        flags += [flag("--group-query-attention"), flag("--num-query-groups", model.num_kv_heads)]
    return flags


def position_flags(launch: Launch) -> list[Flag]:
    """Positions as the model card gives them: RoPE (base, share of each head, pairing) and
    its Llama 3.1 or YaRN scaling, or learned absolute positions. ALiBi, which Megatron-LM
    lacks, is launched as RoPE (:func:`card_notes` says so). MLA rotates inside its
    attention, so its YaRN is ``--rope-type yarn`` with MLA's own options."""
    model = launch.job.model
    if model.positions == "learned_absolute":
        return [flag("--position-embedding-type", "learned_absolute")]
    kind = "yarn" if yarn_embedding(launch) else "rope"
    flags = [flag("--position-embedding-type", kind), flag("--rotary-base", model.rotary_base)]
    if model.rotary_percent != 1:
        flags.append(flag("--rotary-percent", number(model.rotary_percent)))
    if model.rotary_interleaved:  # the fused kernel takes it only from TE 2.3
        flags += [flag("--rotary-interleaved"), flag("--no-rope-fusion")]
    return flags + _scaling_flags(launch)


def _scaling_flags(launch: Launch) -> list[Flag]:
    """Llama 3.1's scaling (its factor; the rest is fixed), YaRN's for MLA and for GQA."""
    model = launch.job.model
    if model.attention == "mla":
        if model.rope_scaling != "yarn":
            return [flag("--rope-type", "rope")]
        return [flag("--rope-type", "yarn"), *_yarn_shared_flags(model)]
    if model.rope_scaling == "llama3":
        factor = number(model.rope_scaling_factor)
        return [flag("--use-rope-scaling"), flag("--rope-scaling-factor", factor)]
    if yarn_embedding(launch):
        return [
            *_yarn_shared_flags(model),
            flag("--yarn-original-max-position-embeddings", model.rope_original_max_positions),
            flag("--yarn-beta-fast", number(model.rope_beta_fast)),
            flag("--yarn-beta-slow", number(model.rope_beta_slow)),
        ]
    return []


def yarn_embedding(launch: Launch) -> bool:
    """YaRN of a non-MLA model, where the release has the yarn position embedding's options
    (:mod:`autotune.launch._releases`; :func:`card_notes` says when it has not)."""
    model = launch.job.model
    gqa_yarn = model.rope_scaling == "yarn" and model.attention != "mla"
    return gqa_yarn and launch.accepts(YARN_EMBEDDING)


def _yarn_shared_flags(model: ModelSpec) -> list[Flag]:
    """YaRN's factor and attention scales, which MLA and the yarn embedding both read."""
    return [
        flag("--rotary-scaling-factor", number(model.rope_scaling_factor)),
        flag("--mscale", number(model.rope_mscale)),
        flag("--mscale-all-dim", number(model.rope_mscale_all_dim)),
    ]


def router_flags(launch: Launch) -> list[Flag]:
    """The MoE router as the card gives it (Megatron-Core moe_utils.py
    topk_routing_with_score_function): the score function, softmax before the top-k
    (:func:`pre_softmax`), the aux-loss-free expert bias, group-limited top-k, the scaling of
    the weights."""
    model = launch.job.model
    if not model.is_moe:
        return []
    flags = [flag("--moe-router-score-function", model.moe_router_score_function)]
    if pre_softmax(model):
        flags.append(flag("--moe-router-pre-softmax"))
    if model.moe_router_expert_bias:
        flags.append(flag("--moe-router-enable-expert-bias"))
    if model.moe_router_num_groups:
        flags += [
            flag("--moe-router-num-groups", model.moe_router_num_groups),
            flag("--moe-router-group-topk", model.moe_router_group_topk),
        ]
    if model.moe_router_topk_scaling_factor != 1:
        scale = number(model.moe_router_topk_scaling_factor)
        flags.append(flag("--moe-router-topk-scaling-factor", scale))
    return flags


def pre_softmax(model: ModelSpec) -> bool:
    """Softmax over every expert before the top-k: the card's top-k weights are not
    renormalised (after the top-k they sum to 1), or top-1, which Megatron-Core routes only
    so (transformer_config.py: a softmax over one score has no gradient)."""
    softmax = model.moe_router_score_function == "softmax"
    return softmax and (not model.moe_router_norm_topk_prob or model.moe_top_k == 1)


def card_notes(launch: Launch) -> list[str]:
    """The model-card facts Megatron-LM cannot be told, one sentence each for the header."""
    model = launch.job.model
    notes = router_notes(model)
    if model.positions == "alibi":
        notes.append(
            f"Megatron-LM has no ALiBi: {model.name}'s ALiBi positions are launched as RoPE "
            f"(base {model.rotary_base})."
        )
    if model.rope_scaling == "llama3" and model.attention != "mla":
        notes += fixed_notes(model, "Megatron-LM's Llama 3.1 RoPE scaling", LLAMA3_SCALING_FIXED)
    if model.rope_scaling == "yarn" and model.attention == "mla":
        notes += fixed_notes(model, "Megatron-LM's MLA YaRN", MLA_YARN_FIXED)
    if model.rope_scaling == "llama3" and model.attention == "mla":
        notes.append("Megatron-LM's MLA has no Llama 3.1 RoPE scaling: it is not launched.")
    if model.rope_scaling == "yarn" and model.attention != "mla" and not yarn_embedding(launch):
        framework = launch.job.train.framework
        notes.append(
            f"Megatron-LM {framework.release} has no YaRN position embedding options (from "
            f"{added_in(framework, YARN_EMBEDDING)}): {model.name}'s YaRN scaling is not "
            "launched."
        )
    return notes


def router_notes(model: ModelSpec) -> list[str]:
    """What Megatron-Core's router cannot do of the card's: sigmoid scores it always
    renormalises over the top-k (moe_utils.py)."""
    sigmoid = model.is_moe and model.moe_router_score_function == "sigmoid"
    if sigmoid and model.moe_top_k > 1 and not model.moe_router_norm_topk_prob:
        return [
            "Megatron-Core renormalises sigmoid top-k weights to sum to 1: "
            f"{model.name}'s unnormalised weights are not launched."
        ]
    return []


def fixed_notes(model: ModelSpec, what: str, fixed: dict[str, float]) -> list[str]:
    """A sentence when the model's values differ from those a framework fixes."""
    differ = [
        f"{name}={getattr(model, name)!r}"
        for name, value in fixed.items()
        if getattr(model, name) != value
    ]
    if not differ:
        return []
    held = ", ".join(f"{name}={value!r}" for name, value in fixed.items())
    return [f"{what} fixes {held}: {model.name}'s {', '.join(differ)} are not launched."]


def _moe_flags(launch: Launch) -> list[Flag]:
    """Experts, their top-k and the dense-then-MoE layer pattern (``--moe-grouped-gemm``
    needs bf16 on core_v0.12.1)."""
    model = launch.job.model
    if not model.is_moe:
        return []
    flags = [
        flag("--num-experts", model.num_experts),
        flag("--moe-router-topk", model.moe_top_k),
        flag("--moe-ffn-hidden-size", model.expert_ffn_hidden_size),
    ]
    if model.shared_expert_ffn_hidden_size:
        size = model.shared_expert_ffn_hidden_size
        flags.append(flag("--moe-shared-expert-intermediate-size", size))
    if model.first_dense_layers:
        dense, moe = model.first_dense_layers, model.num_moe_layers
        flags.append(flag("--moe-layer-freq", f"([0]*{dense}+[1]*{moe})"))
    if uses_grouped_gemm(launch):
        flags.append(flag("--moe-grouped-gemm"))
    return flags


def uses_grouped_gemm(launch: Launch) -> bool:
    """The experts run as grouped GEMMs (``--moe-grouped-gemm``: bf16 on core_v0.12.1)."""
    return launch.job.model.is_moe and launch.job.dtype == "bf16"


def one_to_one_flags(launch: Launch, skip: frozenset[str] = frozenset()) -> list[Flag]:
    """The flags that set one layout field each (the field table's ``flag`` metadata)."""
    flags = []
    for name in LAYOUT_FIELDS:
        option, value = field_info(name).flag, getattr(launch.layout, name)
        if not option or name in skip or value is None:  # None: the framework's default
            continue
        if isinstance(value, bool):
            flags += [flag(option)] if value else []
        else:
            flags.append(flag(option, value))
    return flags


def pipeline_flags(launch: Launch, layer_list: bool) -> list[Flag]:
    """How the layers are split over (virtual) pipeline stages (docs/reference.md 7.1).

    An even split needs only the chunk size with virtual stages. An uneven one is spelled
    out: MindSpeed's ``--num-layer-list`` (``layer_list``, no virtual stages) or Megatron's
    ``--pipeline-model-parallel-layout`` (stages vpp-major; ``E`` embedding, ``t`` layer,
    ``L`` loss), which also sets the virtual stages.
    """
    chunks = launch.chunk_layers
    if not launch.uneven:
        if launch.layout.vpp > 1:
            return [flag("--num-layers-per-virtual-pipeline-stage", chunks[0])]
        return []
    if layer_list and launch.layout.vpp == 1:
        return [flag("--num-layer-list", ",".join(map(str, chunks)))]
    stages = [f"t*{count}" if count > 1 else "t" * count for count in chunks]  # "" if empty
    stages[0], stages[-1] = f"E{stages[0]}", f"{stages[-1]}L"
    return [flag("--pipeline-model-parallel-layout", "|".join(stages))]


def recompute_flags(launch: Launch, per_stage_option: str = "") -> list[Flag]:
    """Selective, or full recompute of every layer (uniform groups of one layer), or of the
    first ``recompute_layers`` of each stage (block; docs/reference.md 4.1). Selective
    recompute names its modules where they are not the default, core attention
    (``--recompute-modules``: every known release of Megatron-LM and MindSpeed-LLM's Megatron
    core_v0.12.1 takes it; the layout's rules keep to the modules each framework can run).

    The block count is :func:`recompute_num_layers`; ``per_stage_option``, the switch that
    counts it per rank with virtual stages, goes where the framework runs it so (MindSpeed).
    """
    layout = launch.layout
    if layout.recompute == "selective":
        selective = [flag("--recompute-granularity", "selective")]
        if layout.recompute_modules is not None:
            selective.append(flag("--recompute-modules", *layout.recompute_modules))
        return selective
    if layout.recompute != "full":
        return []
    full = flag("--recompute-granularity", "full")
    if layout.recompute_layers is None:
        return [full, flag("--recompute-method", "uniform"), flag("--recompute-num-layers", 1)]
    per_rank = layout.vpp > 1 and launch.job.train.framework.recompute_layers_spread == "per_rank"
    return [
        full,
        flag("--recompute-method", "block"),
        flag("--recompute-num-layers", recompute_num_layers(launch, layout.recompute_layers)),
        *([flag(per_stage_option)] if per_rank else []),
    ]


def recompute_num_layers(launch: Launch, count: int) -> int:
    """``--recompute-num-layers`` for ``count`` layers per stage as priced
    (``Layout.recomputed_chunks``): ``count`` where the framework counts per rank, else the
    most a chunk recomputes, Megatron's count per chunk (docs/reference.md 4.1)."""
    job = launch.job
    if job.train.framework.recompute_layers_spread == "per_rank":
        return count
    stages = launch.layout.stage_layers(job.model, job.train)
    return max(max(launch.layout.recomputed_chunks(layers, job.train)) for layers in stages)


def moe_layout_flags(launch: Launch) -> list[Flag]:
    """The token dispatcher as priced where tokens cross ranks (TP or EP): the all-to-all,
    the TP x EP all-gather, or with experts split over ranks the flex dispatcher with DeepEP
    (docs/reference.md 7.7)."""
    layout = launch.layout
    if not (launch.job.model.is_moe and layout.tp * layout.ep > 1):
        return []
    dispatcher = moe_dispatcher_name(launch)
    flags = [flag("--moe-token-dispatcher-type", dispatcher)]
    if dispatcher == "flex":
        flags.append(flag("--moe-flex-dispatcher-backend", "deepep"))
    if launch.job.train.moe_a2a_overlap:  # Megatron-Core's MoE README: both flags together
        flags += [flag("--overlap-moe-expert-parallel-comm"), flag("--delay-wgrad-compute")]
    return flags


def moe_dispatcher_name(launch: Launch) -> str:
    """Megatron-Core's name of the dispatcher as priced: ``flex`` for DeepEP (which only an
    EP group uses), else the setting's own name."""
    dispatcher = launch.job.train.token_dispatcher
    if dispatcher == "deepep":
        return "flex" if launch.layout.ep > 1 else "alltoall"
    return dispatcher


def layout_flags(launch: Launch) -> tuple[Flag, ...]:
    """Everything the layout decides: degrees, batch, split, recompute, overlaps."""
    layout, train = launch.layout, launch.job.train
    flags = [
        *one_to_one_flags(launch),
        flag("--global-batch-size", train.global_batch_size),
        *pipeline_flags(launch, layer_list=False),
        *recompute_flags(launch),
        *overlap_flags(launch),
        *sharding_flags(launch),
        *moe_layout_flags(launch),
    ]
    if layout.hides_tp_comm(train):
        flags.append(flag("--tp-comm-overlap"))  # docs/reference.md 7.5: needs SP
    if layout.cp > 1 and train.context_exchange == "a2a":
        flags.append(flag("--cp-comm-type", "a2a"))  # docs/reference.md 3.5; default p2p
    return tuple(flags)


def dtype_flags(launch: Launch) -> list[Flag]:
    """The training dtype and the gradient buffer's, where it is not Megatron's default for
    that dtype (bf16 reduces in fp32 unless ``--grad-reduce-in-bf16``; fp16 in fp16 unless
    ``--accumulate-allreduce-grads-in-fp32``)."""
    dtype, fp32_grads = launch.job.dtype, launch.job.train.reduces_grads_in_fp32
    if dtype == "fp32":
        return []
    flags = [flag(f"--{dtype}")]
    if dtype == "bf16" and not fp32_grads:
        flags.append(flag("--grad-reduce-in-bf16"))
    elif dtype == "fp16" and fp32_grads:
        flags.append(flag("--accumulate-allreduce-grads-in-fp32"))
    return flags


def _precision_flags(launch: Launch) -> tuple[Flag, ...]:
    """Training dtype, FP8 through Transformer Engine (the default ``--transformer-impl``;
    docs/reference.md 7.6), and the attention kernel: TransformerEngine picks flash or cuDNN
    fused attention (``auto``), or none where the device has no kernel (``unfused``)."""
    job, flags = launch.job, dtype_flags(launch)
    if job.train.fp8:
        flags.append(flag("--fp8-format", "hybrid"))
    if fp8_primary(job.train, launch.layout):  # the priced memory keeps no bf16 linear weights
        flags.append(flag("--fp8-param-gather"))
    flags.append(flag("--attention-backend", "auto" if job.flash_attention else "unfused"))
    return tuple(flags)


def _data_group(launch: Launch) -> ArgGroup:
    """A preprocessed dataset and its Hugging Face tokenizer, or mock data (a smoke run)."""
    return ArgGroup(
        "DATA_ARGS",
        "data: DATA_PATH and TOKENIZER, or mock data when DATA_PATH is empty",
        (
            flag("--data-path", Ref("DATA_PATH")),
            flag("--split", "100,0,0"),
            flag("--tokenizer-type", "HuggingFaceTokenizer"),
            flag("--tokenizer-model", Ref("TOKENIZER")),
        ),
        when="DATA_PATH",
        otherwise=(
            flag("--mock-data"),
            flag("--tokenizer-type", "NullTokenizer"),
            flag("--vocab-size", launch.job.model.vocab_size),
        ),
    )


def _variables() -> tuple[Variable, ...]:
    return (
        Variable("MEGATRON_DIR", ".", "the Megatron-LM checkout (pretrain_gpt.py is at its top)"),
        Variable("DATA_PATH", "", "prefix of a preprocessed dataset (..._text_document)"),
        Variable("TOKENIZER", "", "Hugging Face tokenizer name or folder (with DATA_PATH)"),
        *RUN_VARIABLES,
        *CLUSTER_VARIABLES,
    )


def script(launch: Launch, title: str) -> BashScript:
    """The Megatron-LM launch script of ``launch``."""
    guard = require(
        '-n "${DATA_PATH}" && -z "${TOKENIZER}"', "set TOKENIZER for the data in DATA_PATH"
    )
    header = (
        launch.written_for(f"{title} launch"),
        launch.describe(),
        *launch.precision_notes(),
        *card_notes(launch),
        RUN_HINT,
    )
    return BashScript(
        header=header,
        variables=_variables(),
        setup=(
            guard,
            *device_connections_export(launch, fsdp=launch.layout.sharding >= ZERO_GRADS),
        ),
        launcher="torchrun",
        launcher_group=distributed_group(launch.job.cluster),
        groups=(
            ArgGroup("MODEL_ARGS", "the model's architecture", model_flags(launch)),
            ArgGroup("LAYOUT_ARGS", "the parallel layout autotune picked", layout_flags(launch)),
            ArgGroup("PRECISION_ARGS", "precision and attention kernel", _precision_flags(launch)),
            _data_group(launch),
            run_group(),
        ),
        workdir="MEGATRON_DIR",
        entry="pretrain_gpt.py",
    )


def launch_files(launch: Launch, title: str) -> tuple[LaunchFile, ...]:
    """The Megatron-LM launch script."""
    return (LaunchFile(SCRIPT_NAME, script(launch, title).render(), executable=True),)
