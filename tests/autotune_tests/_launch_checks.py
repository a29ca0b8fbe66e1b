"""The frameworks' cross-option rules, written from their documentation for the tests.

Each function takes parsed options (``_argrules.parse``), the environment the launcher saw
and the world size, and returns every broken rule as a sentence. The rule ids in comments are
those of the research notes on Megatron-LM main (R: ``validate_args``, T:
``TransformerConfig``, X: checks at run time), MindSpeed-LLM and Megatron-DeepSpeed
(R-M) and NeMo's ``llm/api.py`` ``_validate_config``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

Args = Mapping[str, Any]


def layout_stages(text: str) -> list[str]:
    """The stages of a ``--pipeline-model-parallel-layout`` string, by its documented syntax:
    commas are cosmetic, ``(...)*n`` and ``x*n`` repeat, ``|`` separates stages, and the
    letters are E (embedding), t (layer), m (MTP layer), L (loss)."""
    text = text.replace(",", "")
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    stages = text.split("|")
    for stage in stages:
        if set(stage) - set("EtmL"):
            raise ValueError(f"invalid layer character in stage {stage!r}")
    return stages


def _layout_problems(text: str, num_layers: int, pp: int) -> tuple[list[str], int]:
    """The layout string's rules (Megatron pipeline_parallel_layer_layout.py) and its vpp."""
    try:
        stages = layout_stages(text)
    except ValueError as exc:
        return [str(exc)], 1
    found = []
    if len(stages) % pp:
        found.append(f"layout has {len(stages)} stages, not a multiple of pp={pp}")
    flat = "".join(stages)
    if not flat.startswith("E") or not flat.endswith("L"):
        found.append("layout must start with E and end with L")
    if flat.count("E") != 1 or flat.count("L") != 1:
        found.append("layout needs exactly one E and one L")
    if flat.count("t") != num_layers:
        found.append(f"layout holds {flat.count('t')} layers, --num-layers is {num_layers}")
    return found, max(1, len(stages) // pp)


def _split_problems(args: Args, pp: int, microbatches: int, mindspeed: bool) -> list[str]:
    """R6, R7, R9, R10, X1, X2 and MindSpeed's --num-layer-list and VPP rules."""
    layers = args["--num-layers"]
    per_chunk = args.get("--num-layers-per-virtual-pipeline-stage")
    stages = args.get("--num-virtual-stages-per-pipeline-rank")
    layout = args.get("--pipeline-model-parallel-layout")
    layer_list = args.get("--num-layer-list")
    found = []
    if sum(x is not None for x in (per_chunk, stages, layout)) > 1:
        found.append("R6: at most one of the virtual-pipeline and layout options")
    vpp = stages or 1
    if layout is not None:
        problems, vpp = _layout_problems(layout, layers, pp)
        found += problems
    elif per_chunk is not None:
        if layers % pp or (layers // pp) % per_chunk:
            found.append(f"R7: {layers} layers, pp={pp}, {per_chunk} per virtual stage")
        else:
            vpp = layers // pp // per_chunk
        if mindspeed and per_chunk * pp == layers:
            found.append("MindSpeed: one virtual stage per rank; drop the option")
    elif layer_list is not None:
        counts = [int(n) for n in layer_list.split(",")]
        if len(counts) != pp or pp == 1:
            found.append(f"--num-layer-list {layer_list} needs pp={pp} > 1 entries")
        if sum(counts) != layers:
            found.append(f"--num-layer-list sums to {sum(counts)}, --num-layers is {layers}")
        if per_chunk is not None or stages is not None:
            found.append("--num-layer-list excludes virtual pipeline stages")
    elif layers % pp:
        found.append(f"R9: {layers} layers do not divide over pp={pp}")
    if layer_list is not None and not mindspeed:
        found.append("--num-layer-list is MindSpeed's")
    if vpp > 1:
        least = 2 if "--no-overlap-p2p-communication" in args else 1
        if pp <= least:
            found.append(f"R10: virtual stages need pp > {least}")
        if microbatches < pp:
            found.append(f"X2: {microbatches} micro-batches < pp={pp} with virtual stages")
    return found


def _recompute_problems(args: Args) -> list[str]:
    """R22, T5: selective takes no method or count; full needs both, the count at least 1."""
    granularity = args.get("--recompute-granularity")
    method, count = args.get("--recompute-method"), args.get("--recompute-num-layers")
    if granularity == "selective" and (method is not None or count is not None):
        return ["R22/T5: selective recompute takes no method and no layer count"]
    if granularity == "full" and (method is None or count is None or count < 1):
        return ["T5: full recompute needs --recompute-method and --recompute-num-layers >= 1"]
    return []


# transformer_config.py's allowed recompute modules: core_v0.12.1 (8d209ba2aa) and NeMo's
# Megatron-Core b615e731 on (shared_experts from 781e765818; the gdn_*/gdp_*/mhc modules of
# layers autotune never writes are left out); what MindSpeed-LLM v26.0.0's layers honour.
_MODULES_0_12 = frozenset({"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe"})
_MODULES = _MODULES_0_12 | {"shared_experts"}
_MINDSPEED_MODULES = frozenset({"core_attn", "layernorm", "mlp", "moe"})


def recompute_module_problems(
    args: Args, core_0_12: bool, mindspeed: bool, fp8: bool = False
) -> list[str]:
    """transformer_config.py's rules on --recompute-modules: selective recompute only, the
    release's modules (MindSpeed-LLM: those its layers honour), moe_act with grouped GEMMs,
    mla_up_proj with MLA, no moe_act or layernorm under FP8's delayed scaling (the default
    recipe), no moe with the EP all-to-all overlap."""
    modules = args.get("--recompute-modules")
    if modules is None:
        return []
    found = []
    if args.get("--recompute-granularity") != "selective":
        found.append("--recompute-modules needs --recompute-granularity selective")
    allowed = _MINDSPEED_MODULES if mindspeed else _MODULES_0_12 if core_0_12 else _MODULES
    found += [
        f"recompute module {name} is not one of {sorted(allowed)}"
        for name in sorted(set(modules) - allowed)
    ]
    if not modules:
        found.append("--recompute-modules names no module")
    if "moe_act" in modules and "--moe-grouped-gemm" not in args:
        found.append("moe_act in recompute_modules needs --moe-grouped-gemm")
    if "mla_up_proj" in modules and "--multi-latent-attention" not in args:
        found.append("mla_up_proj in recompute_modules needs multi-latent attention")
    delayed = args.get("--fp8-recipe", "delayed") == "delayed"
    if (fp8 or args.get("--fp8-format")) and delayed and {"moe_act", "layernorm"} & set(modules):
        found.append("delayed scaling does not support moe_act and layernorm recompute")
    if "moe" in modules and "--overlap-moe-expert-parallel-comm" in args:
        found.append("disable moe in recompute_modules with the EP all-to-all overlap")
    return found


def _moe_problems(args: Args, world: int, core_0_12: bool, mindspeed: bool) -> list[str]:
    """R20, R28, T2, T10, T11, X4 and the layer pattern's length."""
    tp = args.get("--tensor-model-parallel-size", 1)
    pp = args.get("--pipeline-model-parallel-size", 1)
    ep = args.get("--expert-model-parallel-size", 1)
    etp = args.get("--expert-tensor-parallel-size", tp)  # arguments.py: unset is TP
    experts = args.get("--num-experts")
    found = []
    if ep > 1 and (not experts or experts % ep):
        found.append(f"R28: ep={ep} needs --num-experts divisible by it")
    if not experts:
        return found
    if world % (etp * ep * pp):
        found.append(f"X4: expert grid etp*ep*pp={etp * ep * pp} does not divide world={world}")
    if core_0_12 and ep > 1 and tp > 1 and "--sequence-parallel" not in args:
        found.append("T2: expert and tensor parallelism need --sequence-parallel")
    biased = "--disable-bias-linear" not in args
    if biased and core_0_12 and not mindspeed:
        found.append("T10: no linear biases with MoE on core_v0.12.1")
    if biased and not core_0_12 and etp > 1:
        found.append("T10: MoE biases need expert tensor parallelism 1")
    if args.get("--moe-router-topk") == 1 and "--moe-router-pre-softmax" not in args:
        if not mindspeed:
            found.append("T11: top-1 routing needs --moe-router-pre-softmax")
    if core_0_12 and "--moe-grouped-gemm" in args and "--bf16" not in args:
        found.append("R20: grouped GEMM needs --bf16 on core_v0.12.1")
    if core_0_12 and ep > 1 and "--fp16" in args:
        found.append("R28: expert parallelism refuses --fp16 on core_v0.12.1")
    if core_0_12 and args.get("--spec"):
        found.append("R28: --num-experts needs --spec unset on core_v0.12.1")
    pattern = args.get("--moe-layer-freq")
    if isinstance(pattern, list) and len(pattern) != args["--num-layers"]:
        found.append(f"--moe-layer-freq has {len(pattern)} entries, not --num-layers")
    found += _expert_overlap_problems(args, pp, ep)
    return found + _router_problems(args, experts, mindspeed)


def _router_problems(args: Args, experts: int, mindspeed: bool) -> list[str]:
    """T12, T13: transformer_config.py's router asserts (MindSpeed-LLM lets an expert bias
    bias softmax scores too: moe_router.py transformer_config_post_init_wrapper)."""
    score = args.get("--moe-router-score-function", "softmax")
    found = []
    if "--moe-router-enable-expert-bias" in args and score == "softmax" and not mindspeed:
        found.append("T12: the expert bias needs sigmoid (or sqrtsoftplus) scores")
    groups, top = args.get("--moe-router-num-groups"), args.get("--moe-router-group-topk")
    if top and not groups:
        found.append("T13: --moe-router-group-topk needs --moe-router-num-groups")
    if top and groups and (experts % groups or top > groups):
        found.append(f"T13: {groups} groups must divide {experts} experts, hold {top} groups")
    return found


def _position_problems(args: Args, core_0_12: bool) -> list[str]:
    """R31 (argument_utils.py: only MLA takes --rope-type yarn), X6 (GPTModel's yarn embedding
    reads yarn_* config fields that MLATransformerConfig lacks), R32 (core_v0.12.1
    validate_args: --rotary-interleaved does not work with rope fusion)."""
    mla = "--multi-latent-attention" in args
    found = []
    if args.get("--rope-type", "rope") != "rope" and not mla:
        found.append("R31: common attention only supports --rope-type rope")
    if args.get("--position-embedding-type") == "yarn" and mla:
        found.append("X6: MLA takes YaRN by --rope-type yarn, not the position embedding")
    if core_0_12 and "--rotary-interleaved" in args and "--no-rope-fusion" not in args:
        found.append("R32: --rotary-interleaved does not work with rope fusion")
    return found


def _expert_overlap_problems(args: Args, pp: int, ep: int) -> list[str]:
    """Megatron-Core's transformer_config.py asserts for --overlap-moe-expert-parallel-comm."""
    if "--delay-wgrad-compute" in args and "--overlap-moe-expert-parallel-comm" not in args:
        return ["A2A: --delay-wgrad-compute needs --overlap-moe-expert-parallel-comm"]
    if "--overlap-moe-expert-parallel-comm" not in args:
        return []
    found = []
    if ep == 1:
        found.append("A2A: the EP all-to-all overlap needs expert parallelism")
    virtual = (
        "--num-layers-per-virtual-pipeline-stage",
        "--num-virtual-stages-per-pipeline-rank",
        "--pipeline-model-parallel-layout",  # a layout string gives the virtual stages
    )
    if pp > 1 and not any(name in args for name in virtual):
        found.append("A2A: with pp > 1 the overlap needs virtual pipeline stages")
    if args.get("--moe-token-dispatcher-type") not in ("alltoall", "flex"):
        found.append("A2A: the overlap needs the alltoall or flex dispatcher")
    if args.get("--recompute-granularity") == "full":
        found.append("A2A: no full recomputation with the overlap")
    if "--bf16" not in args and "--fp16" not in args:
        found.append("A2A: the overlap needs a bf16 or fp16 model")
    return found


def _data_problems(args: Args, mindspeed: bool) -> list[str]:
    """R4 and the files each tokenizer type needs (Megatron build_tokenizer)."""
    found = []
    sources = ("--mock-data" in args) + ("--data-path" in args)
    if sources != 1:
        found.append("R4: exactly one data source (--mock-data or --data-path)")
    kind = args.get("--tokenizer-type", "GPT2BPETokenizer")  # pretrain_gpt.py's default
    needs = {
        "HuggingFaceTokenizer": ("--tokenizer-model",),
        "Llama2Tokenizer": ("--tokenizer-model",),
        "SentencePieceTokenizer": ("--tokenizer-model",),
        "GPTSentencePieceTokenizer": ("--tokenizer-model",),
        "NullTokenizer": ("--vocab-size",),
        "GPT2BPETokenizer": ("--vocab-file", "--merge-file"),
        "PretrainedFromHF": ("--tokenizer-name-or-path",),
    }.get(kind, ())
    found += [f"{kind} needs {option}" for option in needs if not args.get(option)]
    if mindspeed and kind == "PretrainedFromHF":
        folder = args.get("--tokenizer-name-or-path") or ""
        if not os.path.isdir(folder):
            found.append(f"MindSpeed: tokenizer folder {folder!r} does not exist")
    return found


def megatron_problems(
    args: Args,
    env: Mapping[str, str],
    world: int,
    *,
    core_0_12: bool = False,
    mindspeed: bool = False,
) -> list[str]:
    """Megatron-LM's rules: main by default, core_v0.12.1 (MindSpeed-LLM's) with
    ``core_0_12``, plus MindSpeed's changes with ``mindspeed``."""
    required = (
        "--num-layers",
        "--hidden-size",
        "--num-attention-heads",
        "--max-position-embeddings",
        "--seq-length",
        "--micro-batch-size",
    )
    missing = [f"R16: {name} is required" for name in required if name not in args]
    if missing:
        return missing
    found = []
    if "--train-iters" not in args and "--train-samples" not in args:
        found.append("training.py: --train-iters or --train-samples is required")
    tp = args.get("--tensor-model-parallel-size", 1)
    pp = args.get("--pipeline-model-parallel-size", 1)
    cp = args.get("--context-parallel-size", 1)
    heads, seq = args["--num-attention-heads"], args["--seq-length"]
    if world % (tp * pp * cp):
        return [f"R1: world {world} not divisible by tp*pp*cp={tp * pp * cp}"]
    dp = world // (tp * pp * cp)
    mbs = args["--micro-batch-size"]
    gbs = args.get("--global-batch-size", mbs * dp)
    if gbs % (mbs * dp):
        found.append(f"X3: global batch {gbs} not divisible by mbs*dp={mbs * dp}")
    if "--bf16" in args and "--fp16" in args:
        found.append("R14: --bf16 and --fp16 exclude each other")
    if "--kv-channels" not in args and args["--hidden-size"] % heads:
        found.append("R17: hidden size not divisible by heads without --kv-channels")
    if heads % tp:
        found.append(f"T3: heads={heads} not divisible by tp={tp}")
    groups = args.get("--num-query-groups", 1) if "--group-query-attention" in args else heads
    if groups % tp and (core_0_12 or tp % groups):
        found.append(f"T4: query groups {groups} and tp={tp}")
    if cp > 1 and seq % (2 * cp):
        found.append(f"R18: seq {seq} not a multiple of 2*cp={2 * cp}")
    if cp > 1 and args.get("--cp-comm-type") == ["a2a"]:
        kv_heads = max(1, groups // tp)  # TE AttnFuncWithCPAndQKVOA2A asserts both
        if (heads // tp) % cp or kv_heads % cp:
            found.append(f"TE: a2a needs cp={cp} to divide the Q and KV heads of a TP rank")
    if args["--max-position-embeddings"] < seq:
        found.append("R19: --max-position-embeddings below --seq-length")
    if "--save" in args and not args.get("--save-interval"):
        found.append("R19: --save needs a positive --save-interval")
    if args.get("--lr", 0.0) < args.get("--min-lr", 0.0):
        found.append("R19: --min-lr above --lr")
    found += _split_problems(args, pp, gbs // (mbs * dp), mindspeed)
    found += _recompute_problems(args)
    found += recompute_module_problems(args, core_0_12, mindspeed)
    if "--overlap-param-gather" in args and not (
        "--use-distributed-optimizer" in args and "--overlap-grad-reduce" in args
    ):
        found.append("R11: --overlap-param-gather needs the distributed optimizer and overlap")
    if "--tp-comm-overlap" in args and "--sequence-parallel" not in args:
        found.append("R24: --tp-comm-overlap needs --sequence-parallel")
    fsdp = "--use-megatron-fsdp" in args
    if (tp > 1 or cp > 1) and env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1" and not fsdp:
        found.append("R25: tp or cp > 1 needs CUDA_DEVICE_MAX_CONNECTIONS=1")
    found += _sharding_problems(args, env, dp * cp, fsdp)
    if not core_0_12 and "--multi-latent-attention" in args and "--group-query-attention" in args:
        found.append("R29: MLA and GQA exclude each other")
    found += _moe_problems(args, world, core_0_12, mindspeed)
    found += _position_problems(args, core_0_12)
    impl = args.get("--transformer-impl", "transformer_engine")
    if args.get("--fp8-format") and impl != "transformer_engine":
        found.append("X5: FP8 runs through Transformer Engine only")
    if "--fp8-param-gather" in args and "--use-distributed-optimizer" not in args:
        found.append("R30: --fp8-param-gather needs the distributed optimizer")
    found += _data_problems(args, mindspeed)
    if mindspeed:
        found += _mindspeed_problems(args, tp, cp, heads, seq, impl)
    return found


def _sharding_problems(args: Args, env: Mapping[str, str], dp_cp: int, fsdp: bool) -> list[str]:
    """Megatron-FSDP's and the partial distributed optimizer's rules (arguments.py at
    core_v0.19.0 validate_args; parallel_state.py): Megatron-FSDP asserts
    CUDA_DEVICE_MAX_CONNECTIONS is not 1 and the fsdp_dtensor checkpoint format, and runs a
    sharding strategy other than no_shard only with it; the optimizer instances divide
    DP x CP and need the distributed optimizer."""
    found = []
    strategy = args.get("--data-parallel-sharding-strategy", "no_shard")
    if fsdp and env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
        found.append("FSDP: Megatron-FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset")
    if fsdp and args.get("--ckpt-format") != "fsdp_dtensor":
        found.append("FSDP: Megatron-FSDP requires --ckpt-format fsdp_dtensor")
    if strategy != "no_shard" and not fsdp:
        found.append(f"FSDP: --data-parallel-sharding-strategy {strategy} needs Megatron-FSDP")
    instances = args.get("--num-distributed-optimizer-instances", 1)
    if instances > 1 and "--use-distributed-optimizer" not in args and not fsdp:
        found.append("DO: --num-distributed-optimizer-instances needs the distributed optimizer")
    if dp_cp % instances:
        found.append(f"DO: {instances} optimizer instances do not divide dp*cp={dp_cp}")
    return found


def _mindspeed_problems(
    args: Args, tp: int, cp: int, heads: int, seq: int, impl: str
) -> list[str]:
    """MindSpeed's own rules: context-parallel algorithms, kernels and their dependencies."""
    found = []
    algo = args.get("--context-parallel-algo", "megatron_cp_algo")
    window = args.get("--cp-window-size", 1)
    if cp > 1 and algo == "megatron_cp_algo" and (not 1 <= window < cp or cp % window):
        found.append(f"megatron_cp_algo: cp window {window} must divide cp={cp}, below it")
    if cp > 1 and algo == "ulysses_cp_algo" and (seq % cp or heads % (cp * tp)):
        found.append("ulysses_cp_algo: seq % cp and heads % (cp*tp) must be 0")
    if cp > 1 and algo == "hybrid_cp_algo" and not args.get("--ulysses-degree-in-cp"):
        found.append("hybrid_cp_algo needs --ulysses-degree-in-cp")
    if "--use-ascend-coc" in args and impl == "transformer_engine":
        found.append("MindSpeed: --use-ascend-coc needs --transformer-impl local")
    if "--use-ascend-mc2" in args and (tp == 1 or "--sequence-parallel" not in args):
        found.append("MindSpeed: --use-ascend-mc2 needs tp > 1 and --sequence-parallel")
    if "--reuse-fp32-param" in args and "--bf16" not in args:
        found.append("MindSpeed: --reuse-fp32-param needs --bf16")
    if "--gemm-gradient-accumulation-fusion" in args and "--moe-grouped-gemm" not in args:
        found.append("MindSpeed: --gemm-gradient-accumulation-fusion needs grouped GEMM")
    if args.get("--sparse-mode", 0) not in (0, 2) and "--use-flash-attn" in args:
        found.append("MindSpeed: flash attention takes sparse mode 0 or 2")
    return found


def deepspeed_problems(
    args: Args, env: Mapping[str, str], world: int, config: Mapping[str, Any]
) -> list[str]:
    """Megatron-DeepSpeed's rules (R-M) and DeepSpeed's on its JSON ``config``."""
    required = (
        "--num-layers",
        "--hidden-size",
        "--num-attention-heads",
        "--max-position-embeddings",
        "--seq-length",
        "--micro-batch-size",
        "--train-iters",
    )
    missing = [f"R-M5: {name} is required" for name in required if name not in args]
    if missing:
        return missing
    found = []
    tp = args.get("--tensor-model-parallel-size", 1)
    pp = args.get("--pipeline-model-parallel-size", 1)
    ulysses = args.get("--ds-sequence-parallel-size", 1)
    if world % (tp * pp * ulysses):
        return [f"R-M2: world {world} not divisible by tp*pp*sp={tp * pp * ulysses}"]
    dp = world // (tp * pp * ulysses)
    heads, seq = args["--num-attention-heads"], args["--seq-length"]
    mbs = args["--micro-batch-size"]
    gbs = args.get("--global-batch-size", mbs * dp)
    if gbs % (mbs * dp):
        found.append(f"global batch {gbs} not divisible by mbs*dp={mbs * dp}")
    if "--bf16" in args and "--fp16" in args:
        found.append("R-M4: --bf16 and --fp16 exclude each other")
    if heads % tp or heads % args.get("--num-key-value-heads", heads):
        found.append("heads must divide by tp and by the KV heads")
    if ulysses > 1 and (heads % ulysses or args.get("--num-key-value-heads", heads) != heads):
        found.append("DeepSpeed-Ulysses: heads % sp == 0 and no fewer KV heads (transformer.py)")
    if ulysses > 1 and "--sequence-parallel" in args:
        found.append("--ds-sequence-parallel-size excludes --sequence-parallel (initialize.py)")
    if args["--max-position-embeddings"] < seq:
        found.append("R-M5: --max-position-embeddings below --seq-length")
    if "--save" in args and not args.get("--save-interval"):
        found.append("R-M5: --save needs --save-interval")
    if args.get("--recompute-granularity") == "selective" and "--recompute-method" in args:
        found.append("R-M6: selective recompute takes no method")
    if args.get("--recompute-method") == "block":
        found.append("DeepSpeed's pipeline has no block recompute")
    if "--sequence-parallel" in args and env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1":
        found.append("sequence parallelism needs CUDA_DEVICE_MAX_CONNECTIONS=1")
    if "--no-pipeline-parallel" in args and pp != 1:
        found.append("--no-pipeline-parallel needs pp=1")
    if "--data-path" not in args:
        found.append("Megatron-DeepSpeed needs --data-path")
    if args.get("--tokenizer-type") == "HFTokenizer" and not args.get("--tokenizer-model"):
        found.append("HFTokenizer needs --tokenizer-model")
    if "--deepspeed" not in args or "--deepspeed_config" not in args:
        return [*found, "--deepspeed with --deepspeed_config expected"]
    return found + _ds_config_problems(args, config, dp, gbs, mbs, pp)


def _ds_config_problems(
    args: Args, config: Mapping[str, Any], dp: int, gbs: int, mbs: int, pp: int
) -> list[str]:
    """DeepSpeed's batch assertion (config.py), dtype and ZeRO rules, and the flags' batch."""
    found = []
    batch = config.get("train_batch_size")
    micro = config.get("train_micro_batch_size_per_gpu")
    accumulation = config.get("gradient_accumulation_steps")
    if None in (batch, micro, accumulation):
        found.append("ds_config: give the batch, the micro batch and the accumulation steps")
    elif batch != micro * accumulation * dp:
        found.append(f"ds_config: train_batch_size {batch} != {micro}*{accumulation}*dp {dp}")
    if batch != gbs or micro != mbs:
        found.append("ds_config: batch differs from --global-batch-size/--micro-batch-size")
    bf16 = config.get("bf16", {}).get("enabled", False)
    fp16 = config.get("fp16", {}).get("enabled", False)
    if bf16 and fp16:
        found.append("ds_config: bf16 and fp16 cannot both be enabled")
    if bf16 != ("--bf16" in args) or fp16 != ("--fp16" in args):
        found.append("ds_config: dtype differs from the flags")
    stage = config.get("zero_optimization", {}).get("stage", 0)
    if not 0 <= stage <= 3:
        found.append(f"ds_config: ZeRO stage {stage}")
    if stage >= 2 and "--no-pipeline-parallel" not in args:
        found.append("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism")
    if args.get("--zero-stage", 1) != stage:
        found.append("--zero-stage differs from the JSON's stage")
    return found


def nemo_problems(recipe: Mapping[str, Mapping[str, Any]], world: int) -> list[str]:
    """NeMo's _validate_config, Megatron-Core's TransformerConfig rules on the recorded
    recipe (``strategy``, ``model``, ``data``, ``optim``, ``ddp`` fields, ``plugin``)."""
    strategy, model, data = recipe["strategy"], recipe["model"], recipe["data"]
    tp = strategy.get("tensor_model_parallel_size", 1)
    pp = strategy.get("pipeline_model_parallel_size", 1)
    cp = strategy.get("context_parallel_size", 1)
    ep = strategy.get("expert_model_parallel_size", 1)
    vpp = strategy.get("virtual_pipeline_model_parallel_size")
    mbs, gbs = data["micro_batch_size"], data["global_batch_size"]
    layers = model["num_layers"]
    found = []
    if world % (tp * pp * cp):
        return [f"world {world} not divisible by tp*pp*cp={tp * pp * cp}"]
    if gbs % (mbs * world // (tp * pp * cp)):
        found.append("global batch not divisible by mbs*dp")
    if pp > 1 and strategy.get("pipeline_dtype") is None:
        found.append("pipeline_dtype must be set if pipeline model parallelism is enabled")
    if model["seq_length"] != data["seq_length"]:
        found.append("model.config.seq_length differs from data.seq_length")
    if cp > 1 and model["seq_length"] % (2 * cp):
        found.append("seq_length not a multiple of 2*cp")
    experts = model.get("num_moe_experts")
    if ep > 1 and (not experts or experts % ep):
        found.append("ep needs num_moe_experts divisible by it")
    if model["num_attention_heads"] % tp:
        found.append("heads not divisible by tp")
    layout = strategy.get("pipeline_model_parallel_layout")
    others = ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage")
    accounts = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
    if layout is not None:
        problems, stages_vpp = _layout_problems(layout, layers, pp)
        found += problems
        if any(strategy.get(k) is not None for k in others) or any(
            strategy.get(k) for k in accounts
        ):
            found.append("T7: the layout excludes the other split settings")
        if vpp is not None and vpp != stages_vpp:
            found.append("virtual_pipeline_model_parallel_size conflicts with the layout")
    elif layers % pp or (vpp and (layers // pp) % vpp):
        found.append(f"{layers} layers do not split over pp={pp}, vpp={vpp}")
    if vpp and pp == 1:
        found.append("virtual stages need pp > 1")
    flags = {
        "--recompute-granularity": model.get("recompute_granularity"),
        "--recompute-method": model.get("recompute_method"),
        "--recompute-num-layers": model.get("recompute_num_layers"),
    }
    found += _recompute_problems({k: v for k, v in flags.items() if v is not None})
    modules = model.get("recompute_modules")
    if modules is not None and model.get("recompute_granularity") is not None:
        # the recipes of MLA and MoE models set MLA and the experts' grouped GEMMs themselves
        as_args = {
            "--recompute-granularity": model["recompute_granularity"],
            "--recompute-modules": modules,
            **({"--multi-latent-attention": True} if "mla_up_proj" in modules else {}),
            **({"--moe-grouped-gemm": True} if "moe_act" in modules else {}),
        }
        found += recompute_module_problems(as_args, core_0_12=False, mindspeed=False)
    ddp, optim = recipe["ddp"], recipe["optim"]
    if ddp["overlap_param_gather"] and not (
        ddp["overlap_grad_reduce"] and ddp["use_distributed_optimizer"]
    ):
        found.append("overlap_param_gather needs the distributed optimizer and overlap")
    if optim["use_distributed_optimizer"] != ddp["use_distributed_optimizer"]:
        found.append("optimizer and DDP disagree on the distributed optimizer")
    if recipe["plugin"].get("fp8_param_gather") and not ddp["use_distributed_optimizer"]:
        found.append("R30: fp8_param_gather needs the distributed optimizer")
    # Megatron-FSDP (megatron_strategy.py at 8cfedd72) needs its checkpoint format (a DDP
    # sharding strategy without it is not read: llama3_8b's recipe holds one); the
    # optimizer's replicas divide DP x CP
    fsdp = strategy.get("fsdp") == "megatron"
    if fsdp and strategy.get("save_ckpt_format") != "fsdp_dtensor":
        found.append("Megatron-FSDP checkpointing needs save_ckpt_format fsdp_dtensor")
    instances = strategy.get("num_distributed_optimizer_instances", 1)
    if (world // (tp * pp * cp) * cp) % instances:
        found.append(f"{instances} distributed optimizer instances do not divide dp*cp")
    return found
