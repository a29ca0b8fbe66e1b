"""The launch frameworks' command-line options, as tables, and a strict parser of them.

Written for the tests from the frameworks' documented options (names, kinds, types, nargs,
choices), not from their code: torchrun (torch.distributed.run), Megatron-LM at d98e8a64
(``megatron/training/arguments.py`` and the config dataclasses it generates options from),
MindSpeed-LLM at c77308a1 (Megatron core_v0.12.1 plus MindSpeed's feature options) and
Megatron-DeepSpeed at f4157bea. Every table also holds documented options autotune does not
write, so an option is refused only when the framework would refuse it. ``*_RELEASES`` give
the table of each release autotune writes launch files for (``framework.release``; docs/
reference.md 7.8), derived from these where the releases differ.

The parser follows argparse with ``allow_abbrev=False``, as these frameworks build theirs:
an unknown or abbreviated option is an error, a switch (store_true / store_false) takes no
value, an option with one value takes exactly one, ``+`` one or more, ``*`` any number; values
are converted by type and checked against the choices. It is stricter in one way: an option
given twice is an error (a writer that repeats itself has a bug).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass


class ArgError(ValueError):
    """An argument list the framework's parser would refuse."""


@dataclass(frozen=True)
class Opt:
    """One option: ``switch`` (no value) or a value of ``type``, with nargs and choices."""

    switch: bool = False
    type: Callable[[str], object] = str
    nargs: str | None = None
    choices: tuple[object, ...] = ()

    def convert(self, name: str, raw: str) -> object:
        try:
            value = self.type(raw)
        except ValueError:
            raise ArgError(f"{name}: invalid value {raw!r}") from None
        if self.choices and value not in self.choices:
            raise ArgError(f"{name}: {raw!r} is not one of {self.choices}")
        return value


SWITCH = Opt(switch=True)
INT = Opt(type=int)
FLOAT = Opt(type=float)
STR = Opt()


def choice(*choices: str, nargs: str | None = None) -> Opt:
    return Opt(choices=choices, nargs=nargs)


_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _is_option(token: str) -> bool:
    return token.startswith("-") and not _NEGATIVE_NUMBER.match(token)


def parse(tokens: list[str], table: Mapping[str, Opt]) -> dict[str, object]:
    """The options of ``tokens`` by name (switches True), or ArgError on the first refusal."""
    parsed: dict[str, object] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not _is_option(token):
            raise ArgError(f"unexpected value {token!r} (no positional arguments)")
        name, eq, inline = token.partition("=")
        if name not in table:
            raise ArgError(f"unrecognized option {name}")
        if name in parsed:
            raise ArgError(f"{name} given twice")
        opt = table[name]
        i += 1
        if opt.switch:
            if eq:
                raise ArgError(f"{name} takes no value")
            parsed[name] = True
            continue
        values = [inline] if eq else []
        while not eq and i < len(tokens) and not _is_option(tokens[i]):
            values.append(tokens[i])
            i += 1
            if opt.nargs is None:
                break
        if (opt.nargs is None and len(values) != 1) or (opt.nargs == "+" and not values):
            raise ArgError(f"{name} expects {'one value' if opt.nargs is None else 'values'}")
        converted = [opt.convert(name, raw) for raw in values]
        parsed[name] = converted[0] if opt.nargs is None else converted
    return parsed


def moe_freq(raw: str) -> object:
    """Megatron's ``--moe-layer-freq``: an int, or a list pattern of 0s and 1s written with
    ``[ ] * + ( ) ,`` and digits only, e.g. ``([0]*3+[1]*58)``."""
    if re.fullmatch(r"-?\d+", raw):
        return int(raw)
    if not re.fullmatch(r"[\d\[\]\*\+\(\), ]+", raw):
        raise ValueError(raw)
    pattern = eval(raw, {"__builtins__": {}})  # noqa: S307 - whitelisted characters only
    if not isinstance(pattern, list) or not set(pattern) <= {0, 1}:
        raise ValueError(raw)
    return pattern


TORCHRUN = {
    name: opt
    for spellings, opt in (
        (("--nproc-per-node", "--nproc_per_node"), STR),
        (("--nnodes",), STR),
        (("--node-rank", "--node_rank"), INT),
        (("--master-addr", "--master_addr"), STR),
        (("--master-port", "--master_port"), INT),
        (("--rdzv-backend", "--rdzv_backend"), STR),
        (("--rdzv-endpoint", "--rdzv_endpoint"), STR),
        (("--rdzv-id", "--rdzv_id"), STR),
        (("--standalone",), SWITCH),
    )
    for name in spellings
}

_TOKENIZERS = (
    "BertWordPieceLowerCase",
    "BertWordPieceCase",
    "GPT2BPETokenizer",
    "SentencePieceTokenizer",
    "GPTSentencePieceTokenizer",
    "HuggingFaceTokenizer",
    "Llama2Tokenizer",
    "TikTokenizer",
    "MultimodalTokenizer",
    "NullTokenizer",
    "NullMultimodalTokenizer",
)

# Options that Megatron-LM main and core_v0.12.1 spell, type and choose alike.
_MEGATRON_COMMON: dict[str, Opt] = {
    # layout
    "--tensor-model-parallel-size": INT,
    "--pipeline-model-parallel-size": INT,
    "--context-parallel-size": INT,
    "--expert-model-parallel-size": INT,
    "--expert-tensor-parallel-size": INT,
    "--num-layers-per-virtual-pipeline-stage": INT,
    "--num-virtual-stages-per-pipeline-rank": INT,
    "--decoder-first-pipeline-num-layers": INT,
    "--decoder-last-pipeline-num-layers": INT,
    "--account-for-embedding-in-pipeline-split": SWITCH,
    "--account-for-loss-in-pipeline-split": SWITCH,
    "--no-overlap-p2p-communication": SWITCH,
    "--micro-batch-size": INT,
    "--global-batch-size": INT,
    "--sequence-parallel": SWITCH,
    "--use-distributed-optimizer": SWITCH,
    # sharded data parallelism: arguments.py at d98e8a64 and core_v0.12.1 (L2136-2149)
    "--data-parallel-sharding-strategy": choice(
        "no_shard", "optim", "optim_grads", "optim_grads_params"
    ),
    "--num-distributed-optimizer-instances": INT,
    "--overlap-grad-reduce": SWITCH,
    "--overlap-param-gather": SWITCH,
    "--recompute-granularity": choice("full", "selective"),
    "--recompute-method": choice("uniform", "block"),
    "--recompute-num-layers": INT,
    "--recompute-activations": SWITCH,
    "--tp-comm-overlap": SWITCH,
    # model
    "--num-layers": INT,
    "--hidden-size": INT,
    "--ffn-hidden-size": INT,
    "--num-attention-heads": INT,
    "--group-query-attention": SWITCH,
    "--num-query-groups": INT,
    "--kv-channels": INT,
    "--seq-length": INT,
    "--max-position-embeddings": INT,
    "--swiglu": SWITCH,
    "--normalization": choice("LayerNorm", "RMSNorm"),
    "--norm-epsilon": FLOAT,
    "--rotary-base": INT,
    "--untie-embeddings-and-output-weights": SWITCH,
    "--disable-bias-linear": SWITCH,
    "--add-qkv-bias": SWITCH,
    "--qk-layernorm": SWITCH,
    "--make-vocab-size-divisible-by": INT,
    "--use-rotary-position-embeddings": SWITCH,
    # RoPE: arguments.py at d98e8a64 (L2418-2428, L2902; --rotary-interleaved from
    # TransformerConfig.rotary_interleaved) and core_v0.12.1 (L1260-1271, L1693)
    "--rotary-percent": FLOAT,
    "--rotary-interleaved": SWITCH,
    "--no-rope-fusion": SWITCH,
    "--use-rope-scaling": SWITCH,
    "--rope-scaling-factor": FLOAT,
    # MoE
    "--num-experts": INT,
    "--moe-router-topk": INT,
    "--moe-ffn-hidden-size": INT,
    "--moe-shared-expert-intermediate-size": INT,
    "--moe-layer-freq": Opt(type=moe_freq),
    "--moe-grouped-gemm": SWITCH,
    "--moe-router-pre-softmax": SWITCH,
    # the router: TransformerConfig's moe_router_* fields at d98e8a64 (L780-821), arguments.py
    # at core_v0.12.1 (L2519-2533)
    "--moe-router-num-groups": INT,
    "--moe-router-group-topk": INT,
    "--moe-router-topk-scaling-factor": FLOAT,
    "--moe-router-enable-expert-bias": SWITCH,
    "--moe-router-bias-update-rate": FLOAT,
    # MLA, with its YaRN: _add_mla_args at d98e8a64 (L3558-3563) and core_v0.12.1 (L2576-2581)
    "--multi-latent-attention": SWITCH,
    "--q-lora-rank": INT,
    "--kv-lora-rank": INT,
    "--qk-head-dim": INT,
    "--qk-pos-emb-head-dim": INT,
    "--v-head-dim": INT,
    "--rotary-scaling-factor": FLOAT,
    "--mscale": FLOAT,
    "--mscale-all-dim": FLOAT,
    # precision, attention, implementation
    "--bf16": SWITCH,
    "--fp16": SWITCH,
    "--grad-reduce-in-bf16": SWITCH,
    "--accumulate-allreduce-grads-in-fp32": SWITCH,
    "--fp8-param-gather": SWITCH,
    "--use-flash-attn": SWITCH,
    "--attention-backend": choice("flash", "fused", "unfused", "local", "auto"),
    "--spec": Opt(nargs="*"),
    "--no-gradient-accumulation-fusion": SWITCH,
    "--no-masked-softmax-fusion": SWITCH,
    "--use-mcore-models": SWITCH,
    # data, tokenizer, training, checkpoints, logging
    "--data-path": Opt(nargs="*"),
    "--split": STR,
    "--mock-data": SWITCH,
    "--tokenizer-model": STR,
    "--vocab-file": STR,
    "--merge-file": STR,
    "--vocab-size": INT,
    "--train-iters": INT,
    "--train-samples": INT,
    "--lr": FLOAT,
    "--min-lr": FLOAT,
    "--lr-warmup-iters": INT,
    "--lr-warmup-fraction": FLOAT,
    "--weight-decay": FLOAT,
    "--clip-grad": FLOAT,
    "--init-method-std": FLOAT,
    "--attention-dropout": FLOAT,
    "--hidden-dropout": FLOAT,
    "--seed": INT,
    "--save": STR,
    "--load": STR,
    "--save-interval": INT,
    "--no-load-optim": SWITCH,
    "--no-load-rng": SWITCH,
    "--log-interval": INT,
    "--eval-interval": INT,
    "--eval-iters": INT,
    "--tensorboard-dir": STR,
    "--distributed-backend": choice("nccl", "gloo"),
}

# Megatron-LM main (d98e8a64, Megatron-Core 0.20).
MEGATRON: dict[str, Opt] = {
    **_MEGATRON_COMMON,
    "--pipeline-model-parallel-layout": STR,
    "--recompute-modules": Opt(nargs="+"),
    "--distribute-saved-activations": SWITCH,
    # Megatron-FSDP (common_config.py's use_megatron_fsdp, from core_v0.14.0)
    "--use-megatron-fsdp": SWITCH,
    "--cp-comm-type": Opt(nargs="+"),
    "--position-embedding-type": choice(
        "learned_absolute", "rope", "yarn", "mrope", "relative", "none"
    ),
    "--moe-token-dispatcher-type": choice("allgather", "alltoall", "flex"),
    "--moe-flex-dispatcher-backend": choice("deepep", "hybridep", "ncclep"),
    "--overlap-moe-expert-parallel-comm": SWITCH,
    "--delay-wgrad-compute": SWITCH,
    "--moe-router-load-balancing-type": choice(
        "aux_loss",
        "seq_aux_loss",
        "global_aux_loss",
        "sinkhorn",
        "quantile_balancing",
        "none",
        nargs="+",
    ),
    "--moe-aux-loss-coeff": Opt(type=float, nargs="+"),
    "--rope-type": choice("rope", "yarn"),
    # YaRN of a non-MLA model (arguments.py L2400-2405)
    "--yarn-original-max-position-embeddings": INT,
    "--yarn-beta-fast": FLOAT,
    "--yarn-beta-slow": FLOAT,
    # TransformerConfig.moe_router_score_function's Literal (L808)
    "--moe-router-score-function": choice("softmax", "sigmoid", "sqrtsoftplus"),
    "--fp8-format": choice("e4m3", "hybrid"),
    "--fp8-recipe": choice("tensorwise", "delayed", "mxfp8", "blockwise", "custom"),
    "--fp8-param-gather": SWITCH,
    "--transformer-impl": choice("local", "transformer_engine", "inference_optimized"),
    "--tokenizer-type": choice(*_TOKENIZERS, "SFTTokenizer"),
    "--data-cache-path": STR,
    "--lr-decay-style": choice("constant", "linear", "cosine", "inverse-square-root", "WSD"),
    "--ckpt-format": choice("torch", "torch_dist", "torch_dcp", "fsdp_dtensor"),
}

# MindSpeed-LLM (c77308a1): Megatron core_v0.12.1 with MindSpeed's and MindSpeed-LLM's options.
MINDSPEED: dict[str, Opt] = {
    **_MEGATRON_COMMON,
    "--use-legacy-models": SWITCH,
    "--recompute-modules": Opt(nargs="*"),
    "--position-embedding-type": choice(
        "learned_absolute", "rope", "mrope", "relative", "none", "alibi", "deepseek4"
    ),
    "--moe-token-dispatcher-type": choice("allgather", "alltoall", "flex", "alltoall_seq"),
    "--moe-router-load-balancing-type": choice(
        "aux_loss",
        "seq_aux_loss",
        "sinkhorn",
        "none",
        "group_limited_greedy",
        "softmax_topk",
        "pai_megatron_aux_loss",
        "sparsemixer_topk",
    ),
    "--moe-aux-loss-coeff": FLOAT,
    # core_v0.12.1 arguments.py L2513 plus MindSpeed-LLM's features_manager/moe/moe_router.py
    "--moe-router-score-function": choice("softmax", "sigmoid", "sqrtsoftplus"),
    "--fp8-format": choice("e4m3", "hybrid", "hif8"),
    "--fp8-recipe": choice(
        "tensorwise", "delayed", "mxfp8", "groupwise", "blockwise", "mxfp8-32x32"
    ),
    "--transformer-impl": choice("local", "transformer_engine"),
    "--tokenizer-type": choice(*_TOKENIZERS, "PretrainedFromHF", "MagistralTokenizer"),
    # MindSpeed and MindSpeed-LLM features
    "--pipeline-model-parallel-layout": STR,
    "--num-layer-list": STR,
    "--noop-layers": STR,
    "--enable-recompute-layers-per-pp-rank": SWITCH,
    "--shape-order": choice("SBH", "BSH", "BSND", "BNSD"),
    "--sparse-mode": INT,
    "--use-fused-rmsnorm": SWITCH,
    "--use-fused-swiglu": SWITCH,
    "--use-fused-rotary-pos-emb": SWITCH,
    # RoPE scaling and GLM's RoPE: mindspeed_llm/features_manager/common/rotary.py
    "--rope-scaling-type": choice("llama3", "yarn", "longrope", "plm"),
    "--original-max-position-embeddings": FLOAT,
    "--low-freq-factor": FLOAT,
    "--high-freq-factor": FLOAT,
    "--beta-fast": INT,
    "--beta-slow": INT,
    "--rope-scaling-mscale": FLOAT,
    "--rope-scaling-mscale-all-dim": FLOAT,
    "--rope-scaling-original-max-position-embeddings": INT,
    "--use-glm-rope": SWITCH,
    "--context-parallel-algo": choice(
        "megatron_cp_algo",
        "hybrid_cp_algo",
        "kvallgather_cp_algo",
        "ulysses_cp_algo",
        "mamba_cp_algo",
    ),
    "--ulysses-degree-in-cp": INT,
    "--cp-window-size": INT,
    "--attention-mask-type": choice("causal", "general"),
    "--use-cp-send-recv-overlap": SWITCH,
    "--gemm-gradient-accumulation-fusion": SWITCH,
    "--moe-permutation-async-comm": SWITCH,
    "--moe-tp-extend-ep": SWITCH,
    "--moe-alltoall-overlap-comm": SWITCH,
    "--first-k-dense-replace": INT,
    "--norm-topk-prob": SWITCH,
    "--swap-attention": SWITCH,
    "--swap-modules": STR,
    "--reuse-fp32-param": SWITCH,
    "--recompute-activation-function": SWITCH,
    "--recompute-activation-function-num-layers": INT,
    "--recompute-norm": SWITCH,
    "--recompute-norm-num-layers": INT,
    "--use-ascend-coc": SWITCH,
    "--use-ascend-mc2": SWITCH,
    "--attention-softmax-in-fp32": SWITCH,
    "--tokenizer-name-or-path": STR,
    "--tokenizer-not-use-fast": SWITCH,
    "--padded-vocab-size": INT,
    "--optimization-level": Opt(type=int, choices=(0, 1, 2)),
    "--distributed-timeout-minutes": INT,
    "--no-shared-storage": SWITCH,
    "--handler-name": STR,
    "--workers": INT,
}

# Each release autotune knows (conf/framework/<name>.yaml ``releases``) with its option table,
# read from the release's own parser (docs/reference.md 7.8). Megatron-LM core_v0.19.0 takes
# every option of main's table above, alike; core_v0.17.1 has no --yarn-* options and fewer
# choices (no yarn embedding, ncclep backend, quantile_balancing or sqrtsoftplus).
_CORE_V0_17: dict[str, Opt] = {
    **{name: opt for name, opt in MEGATRON.items() if not name.startswith("--yarn-")},
    "--position-embedding-type": choice("learned_absolute", "rope", "mrope", "relative", "none"),
    "--moe-flex-dispatcher-backend": choice("deepep", "hybridep"),
    "--moe-router-load-balancing-type": choice(
        "aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none", nargs="+"
    ),
    "--moe-router-score-function": choice("softmax", "sigmoid"),
}
MEGATRON_RELEASES: dict[str, dict[str, Opt]] = {
    "core_v0.17.1": _CORE_V0_17,
    "core_v0.19.0": MEGATRON,
    "main": MEGATRON,
}
# MindSpeed-LLM 26.1.0 (v26.1.0 with MindSpeed 26.1.0_core_r0.12.1) takes every option of the
# master table above, alike; 26.0.0 (v26.0.0 with MindSpeed 26.0.0_core_r0.12.1) all but the
# layout string, which MindSpeed back-ported in 94e8ac1c.
MINDSPEED_RELEASES: dict[str, dict[str, Opt]] = {
    "26.0.0": {k: v for k, v in MINDSPEED.items() if k != "--pipeline-model-parallel-layout"},
    "26.1.0": MINDSPEED,
    "master": MINDSPEED,
}

# Megatron-DeepSpeed (f4157bea) with DeepSpeed's own two options.
MEGATRON_DEEPSPEED: dict[str, Opt] = {
    "--num-layers": INT,
    "--hidden-size": INT,
    "--ffn-hidden-size": INT,
    "--num-attention-heads": INT,
    "--num-key-value-heads": INT,
    "--kv-channels": INT,
    "--max-position-embeddings": INT,
    "--use-rotary-position-embeddings": SWITCH,
    "--rotary-position-embeddings-theta": INT,
    "--rotary-percent": FLOAT,
    "--no-position-embedding": SWITCH,
    "--make-vocab-size-divisible-by": INT,
    "--normalization": choice("layernorm", "rmsnorm"),
    "--layernorm-epsilon": FLOAT,
    "--swiglu": SWITCH,
    "--untie-embeddings-and-output-weights": SWITCH,
    "--disable-bias-linear": SWITCH,
    "--attention-dropout": FLOAT,
    "--hidden-dropout": FLOAT,
    "--num-experts": Opt(type=int, nargs="+"),
    "--topk": INT,
    "--moe-expert-parallel-size": INT,
    "--tensor-model-parallel-size": INT,
    "--pipeline-model-parallel-size": INT,
    "--num-layers-per-virtual-pipeline-stage": INT,
    "--micro-batch-size": INT,
    "--global-batch-size": INT,
    "--sequence-parallel": SWITCH,
    "--ds-sequence-parallel-size": INT,
    "--no-pipeline-parallel": SWITCH,
    "--recompute-activations": SWITCH,
    "--recompute-granularity": choice("full", "selective"),
    "--recompute-method": choice("uniform", "block"),
    "--recompute-num-layers": INT,
    "--distribute-saved-activations": SWITCH,
    "--checkpoint-activations": SWITCH,
    "--checkpoint-num-layers": INT,
    "--deepspeed-activation-checkpointing": SWITCH,
    "--partition-activations": SWITCH,
    "--use-flash-attn": SWITCH,
    "--use-flash-attn-v1": SWITCH,
    "--use-flash-attn-v2": SWITCH,
    "--use-flash-attn-triton": SWITCH,
    "--bf16": SWITCH,
    "--fp16": SWITCH,
    "--fp8-hybrid": SWITCH,
    "--fp8-e4m3": SWITCH,
    "--transformer-impl": choice("local", "transformer_engine"),
    "--use-distributed-optimizer": SWITCH,
    "--DDP-impl": choice("local", "torch", "FSDP"),
    "--zero-stage": INT,
    "--deepspeed": SWITCH,
    "--deepspeed_config": STR,
    "--data-path": Opt(nargs="*"),
    "--data-impl": choice("mmap", "infer"),
    "--split": STR,
    "--tokenizer-type": choice(
        "BertWordPieceLowerCase",
        "BertWordPieceCase",
        "GPT2BPETokenizer",
        "SentencePieceTokenizer",
        "GPTSentencePieceTokenizer",
        "HFTokenizer",
        "NullTokenizer",
    ),
    "--tokenizer-model": STR,
    "--seq-length": INT,
    "--train-iters": INT,
    "--lr": FLOAT,
    "--min-lr": FLOAT,
    "--clip-grad": FLOAT,
    "--log-interval": INT,
    "--eval-interval": INT,
    "--eval-iters": INT,
    "--save": STR,
    "--load": STR,
    "--save-interval": INT,
    "--distributed-backend": choice("nccl", "gloo", "ccl", "hccl"),
    "--local-rank": INT,
    "--local_rank": INT,
}
MEGATRON_DEEPSPEED_RELEASES: dict[str, dict[str, Opt]] = {"master": MEGATRON_DEEPSPEED}

# NeMo 2.0 (8cfedd72): the fields a recipe override may set, per object. MegatronStrategy's
# __init__ parameters (nemo/lightning/pytorch/strategies/megatron_strategy.py); Megatron-Core's
# TransformerConfig / GPTConfig fields the override touches; the data modules' and the
# optimizer config's fields; the trainer's.
NEMO_FIELDS: dict[str, frozenset[str]] = {
    "strategy": frozenset(
        {
            "tensor_model_parallel_size",
            "pipeline_model_parallel_size",
            "virtual_pipeline_model_parallel_size",
            "microbatch_group_size_per_vp_stage",
            "context_parallel_size",
            "sequence_parallel",
            "expert_model_parallel_size",
            "expert_tensor_parallel_size",
            "num_layers_in_first_pipeline_stage",
            "num_layers_in_last_pipeline_stage",
            "account_for_embedding_in_pipeline_split",
            "account_for_loss_in_pipeline_split",
            "pipeline_model_parallel_layout",
            "pipeline_dtype",
            "ddp",
            # sharded data parallelism (megatron_strategy.py L130, L264-286 at 8cfedd72)
            "fsdp",
            "save_ckpt_format",
            "num_distributed_optimizer_instances",
        }
    ),
    "model": frozenset(
        {
            "num_layers",
            "hidden_size",
            "ffn_hidden_size",
            "num_attention_heads",
            "num_query_groups",
            "kv_channels",
            "seq_length",
            "num_moe_experts",
            "moe_router_topk",
            "moe_ffn_hidden_size",
            "recompute_granularity",
            "recompute_method",
            "recompute_num_layers",
            "recompute_modules",
            "moe_token_dispatcher_type",
            "moe_enable_deepep",
            "cp_comm_type",  # TransformerConfig; NeMo's Mistral config defaults it to a2a
            "hidden_dropout",  # TransformerConfig, 0.1 by default
            "attention_dropout",  # TransformerConfig, 0.1 by default
            # The model card: GPTConfig (gpt/model/base.py L296-298) and the TransformerConfig
            # of Megatron-Core b615e731, which requirements/manifest.json pins (L134, L162,
            # L173, L449-485).
            "position_embedding_type",
            "rotary_base",
            "rotary_percent",
            "rotary_interleaved",
            "layernorm_epsilon",
            "qk_layernorm",
            "moe_router_score_function",
            "moe_router_pre_softmax",
            "moe_router_enable_expert_bias",
            "moe_router_num_groups",
            "moe_router_group_topk",
            "moe_router_topk_scaling_factor",
        }
    ),
    "data": frozenset({"seq_length", "micro_batch_size", "global_batch_size"}),
    "optim": frozenset({"use_distributed_optimizer", "bf16", "fp16", "lr"}),
    "trainer": frozenset(
        {"plugins", "max_steps", "strategy", "num_nodes", "devices", "callbacks"}
    ),
    # MegatronMixedPrecision (nemo/lightning/pytorch/plugins/mixed_precision.py)
    "plugin": frozenset({"fp8_param_gather", "grad_reduce_in_fp32"}),
    "ddp": frozenset(
        {
            "grad_reduce_in_fp32",
            "overlap_grad_reduce",
            "overlap_param_gather",
            "use_distributed_optimizer",
            "check_for_nan_in_grad",
            "average_in_collective",
            "data_parallel_sharding_strategy",  # set by some recipes, for Megatron FSDP
        }
    ),
}

# The model config fields some recipes' classes add: Llama31Config's RoPE scaling
# (gpt/model/llama.py L167-170) and MLATransformerConfig's YaRN (Megatron-Core b615e731
# transformer_config.py L1482-1509), which NeMo's DeepSeek configs extend.
_LLAMA31_FIELDS = frozenset(
    {"scale_factor", "low_freq_factor", "high_freq_factor", "old_context_len"}
)
_MLA_FIELDS = frozenset(
    {
        "rope_type",
        "rotary_scaling_factor",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
    }
)
NEMO_RECIPE_MODEL_FIELDS: dict[str, frozenset[str]] = {
    "llama31_70b": _LLAMA31_FIELDS,
    "llama31_405b": _LLAMA31_FIELDS,
    "deepseek_v2": _MLA_FIELDS,
    "deepseek_v2_lite": _MLA_FIELDS,
    "deepseek_v3": _MLA_FIELDS,
}
