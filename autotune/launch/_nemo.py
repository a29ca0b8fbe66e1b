"""NeMo 2.0: the model's ``nemo.collections.llm`` recipe with the picked layout set on it.

For a Megatron-Core job whose model has a NeMo recipe (``NVIDIA/NeMo`` at 8cfedd72,
``nemo/collections/llm/recipes/``), a Python file builds ``llm.<recipe>.pretrain_recipe(...)``
and overrides what the layout and the job decide, by the field names NeMo's own classes take:
``nl.MegatronStrategy`` (parallel sizes, ``sequence_parallel``, ``pipeline_dtype``, the layer
split), the fields of the recipe's own Megatron-Core ``DistributedDataParallelConfig`` that the
job decides (the framework's overlaps; the recipe's others, such as ``check_for_nan_in_grad``
and ``average_in_collective``, are kept), the optimizer's ``use_distributed_optimizer``, the
model config's sizes, sequence and recompute, the data module's batch and sequence, the
precision plugin
(``recipes/precision/mixed_precision.py``; its gradient dtype overrides the DDP config's), and
TP communication overlap (``MegatronCommOverlapCallback``). Every split field is written, since
recipes set their own (DeepSeek-V3 first/last stages, Llama-3.1-405B's embedding and loss
accounting). The model card's facts (:mod:`autotune.simulators.model_card`) are set on the model
config by the fields of Megatron-Core's ``TransformerConfig`` and NeMo's ``GPTConfig``, the Llama
3.1 scaling by ``Llama31Config``'s and YaRN by ``MLATransformerConfig``'s (Megatron-Core b615e731,
the commit NeMo 8cfedd72's ``requirements/manifest.json`` pins); what a recipe's config class
cannot take is said in the file's header. The file runs under torchrun on every node and
trains in each worker (``run.run(direct=True)``).
"""

from __future__ import annotations

import json

from autotune.launch._data_parallel import FSDP_STRATEGIES
from autotune.launch._megatron import moe_dispatcher_name
from autotune.launch._megatron import pipeline_flags
from autotune.launch._megatron import pre_softmax
from autotune.launch._megatron import recompute_num_layers
from autotune.launch._megatron import router_notes
from autotune.launch._script import Launch
from autotune.launch._script import LaunchFile
from autotune.launch._script import comment
from autotune.simulators.layout import ZERO_GRADS
from autotune.simulators.states import fp8_primary

FILE_NAME = "nemo_pretrain.py"
# The NeMo the override is written for: main at 8cfedd72 (2025-09-20, after v2.5.0rc0), whose
# recipes and Megatron-Core (b615e731, requirements/manifest.json) its fields are those of.
NEMO_RELEASE = "NeMo main at 8cfedd72 (2025-09-20)"

# Catalog model (ModelSpec.name) -> the NeMo recipe of the same model and extra arguments of
# its pretrain_recipe (every one takes dir, name, num_nodes and num_gpus_per_node).
# source: NVIDIA/NeMo 8cfedd72 nemo/collections/llm/recipes/; deepseek_v3 adds a multi-token
# prediction layer unless use_mtp=False, and the catalog's DeepSeek-V3 has none.
RECIPES: dict[str, tuple[str, str]] = {
    "Llama-2-7B": ("llama2_7b", ""),
    "Llama-3-8B": ("llama3_8b", ""),
    "Llama-3.1-70B": ("llama31_70b", ""),
    "Llama-3.1-405B": ("llama31_405b", ""),
    "Mixtral-8x7B": ("mixtral_8x7b", ""),
    "Mixtral-8x22B": ("mixtral_8x22b", ""),
    "Qwen2.5-7B": ("qwen25_7b", ""),
    "Qwen2.5-14B": ("qwen25_14b", ""),
    "Qwen2.5-32B": ("qwen25_32b", ""),
    "Qwen2.5-72B": ("qwen25_72b", ""),
    "Qwen3-30B-A3B": ("qwen3_30b_a3b", ""),
    "Qwen3-235B-A22B": ("qwen3_235b_a22b", ""),
    "DeepSeek-V2": ("deepseek_v2", ""),
    "DeepSeek-V2-Lite": ("deepseek_v2_lite", ""),
    "DeepSeek-V3": ("deepseek_v3", ", use_mtp=False"),
    "GPT-3-175B": ("gpt3_175b", ""),
    "Baichuan2-7B": ("baichuan2_7b", ""),
    "ChatGLM3-6B": ("chatglm3_6b", ""),
}

_TORCH_DTYPES = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}
# The recipes whose model config is NeMo's Llama31Config, which applies Llama 3.1's RoPE
# scaling to every model it builds (llama.py configure_model).
_LLAMA31_RECIPES = frozenset({"llama31_70b", "llama31_405b"})


def _model_fields(launch: Launch) -> list[tuple[str, object]]:
    """Sizes the layout's validity rests on, the sequence, the dropout as priced (recipes
    set their own), and recompute (docs/reference.md 4.1: full of every layer is uniform
    groups of one; a count is the block method)."""
    job = launch.job
    model, layout = job.model, launch.layout
    fields: list[tuple[str, object]] = [
        ("num_layers", model.num_layers),
        ("hidden_size", model.hidden_size),
        ("num_attention_heads", model.num_attention_heads),
        ("seq_length", job.train.seq_len),
        ("hidden_dropout", job.train.dropout_of(model)),
        ("attention_dropout", job.train.dropout_of(model)),
    ]
    if model.ffn_hidden_size:
        fields.append(("ffn_hidden_size", model.ffn_hidden_size))
    if model.attention == "gqa":
        fields.append(("num_query_groups", model.num_kv_heads))
    if layout.cp > 1:  # recipes may set their own exchange
        fields.append(("cp_comm_type", job.train.context_exchange))
    if model.is_moe:  # the dispatcher as priced (recipes set their own)
        dispatcher = moe_dispatcher_name(launch)
        fields += [
            ("num_moe_experts", model.num_experts),
            ("moe_router_topk", model.moe_top_k),
            ("moe_ffn_hidden_size", model.expert_ffn_hidden_size),
            ("moe_token_dispatcher_type", dispatcher),
            ("moe_enable_deepep", dispatcher == "flex"),
        ]
    method: object = None
    count: object = None
    if layout.recompute == "full":
        method = "uniform" if layout.recompute_layers is None else "block"
        count = layout.recompute_layers or 1
        if layout.recompute_layers:  # counted per model chunk, as priced
            count = recompute_num_layers(launch, layout.recompute_layers)
    granularity = None if layout.recompute == "none" else layout.recompute
    fields += [
        ("recompute_granularity", granularity),
        ("recompute_method", method),
        ("recompute_num_layers", count),
    ]
    if layout.recompute == "selective":
        fields.append(("recompute_modules", list(layout.recomputed_modules)))
    return fields


def _card_fields(launch: Launch) -> list[tuple[str, object]]:
    """The model card on the model config: the norm epsilon, query/key norms (MLA's latent
    norms too), positions, RoPE's scaling and the MoE router (:func:`_router_fields`)."""
    model = launch.job.model
    fields: list[tuple[str, object]] = [
        ("layernorm_epsilon", model.norm_epsilon),
        ("qk_layernorm", model.qk_layernorm or model.attention == "mla"),
    ]
    if model.positions == "learned_absolute":
        fields.append(("position_embedding_type", "learned_absolute"))
    elif model.positions == "rope":
        fields += [
            ("position_embedding_type", "rope"),
            ("rotary_base", model.rotary_base),
            ("rotary_percent", model.rotary_percent),
            ("rotary_interleaved", model.rotary_interleaved),
            *_scaling_fields(launch),
        ]
    return fields + _router_fields(launch)


def _scaling_fields(launch: Launch) -> list[tuple[str, object]]:
    """MLA's YaRN (or plain RoPE) and Llama31Config's scaling, where the config takes them."""
    job = launch.job
    model, recipe = job.model, RECIPES[job.model.name][0]
    if model.attention == "mla":
        if model.rope_scaling != "yarn":
            return [("rope_type", "rope")]
        return [
            ("rope_type", "yarn"),
            ("rotary_scaling_factor", model.rope_scaling_factor),
            ("original_max_position_embeddings", model.rope_original_max_positions),
            ("beta_fast", model.rope_beta_fast),
            ("beta_slow", model.rope_beta_slow),
            ("mscale", model.rope_mscale),
            ("mscale_all_dim", model.rope_mscale_all_dim),
        ]
    if recipe in _LLAMA31_RECIPES and model.rope_scaling == "llama3":
        return [
            ("scale_factor", model.rope_scaling_factor),
            ("low_freq_factor", model.rope_low_freq_factor),
            ("high_freq_factor", model.rope_high_freq_factor),
            ("old_context_len", model.rope_original_max_positions),
        ]
    return []


def _router_fields(launch: Launch) -> list[tuple[str, object]]:
    """The router as Megatron-LM's flags give it (:func:`_megatron.router_flags`), on the
    config fields of the same names (None: Megatron-Core's off)."""
    model = launch.job.model
    if not model.is_moe:
        return []
    scale = model.moe_router_topk_scaling_factor
    return [
        ("moe_router_score_function", model.moe_router_score_function),
        ("moe_router_pre_softmax", pre_softmax(model)),
        ("moe_router_enable_expert_bias", model.moe_router_expert_bias),
        ("moe_router_num_groups", model.moe_router_num_groups or None),
        ("moe_router_group_topk", model.moe_router_group_topk or None),
        ("moe_router_topk_scaling_factor", None if scale == 1 else scale),
    ]


def card_notes(launch: Launch) -> list[str]:
    """The model-card facts the recipe's config class cannot take, one sentence each."""
    job = launch.job
    model, recipe = job.model, RECIPES[job.model.name][0]
    notes = router_notes(model)
    llama31 = recipe in _LLAMA31_RECIPES
    takes = "yarn" if model.attention == "mla" else "llama3" if llama31 else "none"
    if model.positions == "alibi":
        notes.append(f"NeMo's {recipe} config has no ALiBi: {model.name}'s is not set.")
    if model.rope_scaling not in ("none", takes):
        notes.append(
            f"NeMo's {recipe} config takes no {model.rope_scaling} RoPE scaling: "
            f"{model.name}'s is not set."
        )
    if llama31 and model.rope_scaling == "none":
        notes.append(
            f"NeMo's {recipe} config (Llama31Config) applies Llama 3.1 RoPE scaling always: "
            f"{model.name} has none."
        )
    return notes


def _strategy_fields(launch: Launch) -> list[tuple[str, object]]:
    """Parallel sizes and the layer split on ``nl.MegatronStrategy``; ``pipeline_dtype``
    (NeMo requires it whenever pp > 1, ``llm/api.py`` _validate_config)."""
    layout = launch.layout
    split = pipeline_flags(launch, layer_list=False)
    layout_string = str(split[0].values[0]) if launch.uneven else None
    fields: list[tuple[str, object]] = [
        ("tensor_model_parallel_size", layout.tp),
        ("pipeline_model_parallel_size", layout.pp),
        ("virtual_pipeline_model_parallel_size", layout.vpp if layout.vpp > 1 else None),
        ("context_parallel_size", layout.cp),
        ("sequence_parallel", layout.sequence_parallel),
        ("expert_model_parallel_size", layout.ep),
        ("num_layers_in_first_pipeline_stage", None),
        ("num_layers_in_last_pipeline_stage", None),
        ("account_for_embedding_in_pipeline_split", False),
        ("account_for_loss_in_pipeline_split", False),
        ("pipeline_model_parallel_layout", layout_string),
    ]
    if launch.job.model.is_moe:  # the recipe's own ETP is not the layout's unless written
        fields.append(("expert_tensor_parallel_size", layout.expert_tp))
    # ZeRO-2 and -3: Megatron-FSDP, which needs its checkpoint format; hybrid sharding: the
    # distributed optimizer's replicas (megatron_strategy.py at 8cfedd72, docs/reference.md 7.9)
    if layout.sharding >= ZERO_GRADS:
        fields += [("fsdp", "megatron"), ("save_ckpt_format", "fsdp_dtensor")]
    if layout.dp_replicate > 1:
        fields.append(("num_distributed_optimizer_instances", layout.dp_replicate))
    return fields


def _plugin(launch: Launch) -> tuple[str, str]:
    """The precision plugin expression and the import it needs."""
    job = launch.job
    factories = {"bf16": "bf16_mixed", "fp16": "fp16_mixed"}
    if job.train.fp8:
        name = "bf16_with_fp8_mixed"
    elif job.dtype in factories:
        name = factories[job.dtype]
    else:
        plugin = (
            'run.Config(nl.MegatronMixedPrecision, precision="32", '
            "params_dtype=torch.float32, pipeline_dtype=torch.float32)"
        )
        return plugin, "from nemo import lightning as nl"
    module = "nemo.collections.llm.recipes.precision.mixed_precision"
    return f"{name}()", f"from {module} import {name}"


def _literal(value: object) -> str:
    """A Python literal, strings in double quotes (JSON's escapes are Python's: no character
    of the string can end it)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(_literal, value)) + "]"
    return repr(value)


def _settings(launch: Launch) -> list[str]:
    """The statements of ``configure()`` after the recipe is built, in order."""
    job = launch.job
    layout = launch.layout
    plugin, _ = _plugin(launch)
    ddp: dict[str, object] = {
        "grad_reduce_in_fp32": job.dtype != "fp32" and job.train.reduces_grads_in_fp32,
        "overlap_grad_reduce": job.train.overlaps_grad_reduce,
        "overlap_param_gather": job.train.overlaps_param_gather and layout.distributed_optimizer,
        "use_distributed_optimizer": layout.distributed_optimizer,
    }
    if layout.sharding >= ZERO_GRADS:  # Megatron-FSDP's name of the stage
        ddp["data_parallel_sharding_strategy"] = FSDP_STRATEGIES[layout.sharding]
    pipeline_dtype = _TORCH_DTYPES[job.dtype] if layout.pp > 1 else "None"
    return [
        "model = recipe.model.config",
        *(f"model.{key} = {_literal(value)}" for key, value in _model_fields(launch)),
        *(f"model.{key} = {_literal(value)}" for key, value in _card_fields(launch)),
        "strategy = recipe.trainer.strategy",
        *(f"strategy.{key} = {_literal(value)}" for key, value in _strategy_fields(launch)),
        f"strategy.pipeline_dtype = {pipeline_dtype}",
        *_ddp_statements(ddp),
        f"recipe.optim.config.use_distributed_optimizer = {layout.distributed_optimizer}",
        f"recipe.optim.config.bf16 = {job.dtype == 'bf16'}",
        f"recipe.optim.config.fp16 = {job.dtype == 'fp16'}",
        f"recipe.data.seq_length = {job.train.seq_len}",
        f"recipe.data.micro_batch_size = {layout.micro_batch}",
        f"recipe.data.global_batch_size = {job.train.global_batch_size}",
        f"recipe.trainer.plugins = {plugin}",
        *(  # the plugin's gradient dtype overrides the DDP config's (NeMo's dtype overrides)
            [f"recipe.trainer.plugins.grad_reduce_in_fp32 = {ddp['grad_reduce_in_fp32']}"]
            if job.dtype != "fp32"
            else []
        ),
        *(  # the recipe's FP8 default, set as priced (docs/reference.md 7.6)
            [f"recipe.trainer.plugins.fp8_param_gather = {fp8_primary(job.train, layout)}"]
            if job.train.fp8
            else []
        ),
        *_tp_overlap_statements(layout.hides_tp_comm(job.train)),
        "recipe.trainer.max_steps = MAX_STEPS",
    ]


def _ddp_statements(fields: dict[str, object]) -> list[str]:
    """Set the DDP fields the job decides on the recipe's own DDP config, which keeps the rest
    (its recipes set ``check_for_nan_in_grad`` and ``average_in_collective``); a recipe that
    sets none has NeMo's default, ``ddp="megatron"``, which ``MegatronStrategy`` builds as
    ``DistributedDataParallelConfig(check_for_nan_in_grad=True)`` (megatron_strategy.py
    L354-355 at 8cfedd72): the file builds that one and sets the fields on it."""
    return [
        "ddp = strategy.ddp",
        'if ddp == "megatron":  # NeMo\'s default: MegatronStrategy builds this config',
        "    ddp = strategy.ddp = run.Config(",
        "        DistributedDataParallelConfig, check_for_nan_in_grad=True",
        "    )",
        *(f"ddp.{key} = {_literal(value)}" for key, value in fields.items()),
    ]


def _tp_overlap_statements(overlap: bool) -> list[str]:
    """TP communication overlap as priced: NeMo's ``MegatronCommOverlapCallback`` decides it
    (some recipes add one, with either value); set it on theirs, or add one to turn it on."""
    statements = [
        "callbacks = recipe.trainer.callbacks = list(recipe.trainer.callbacks or [])",
        "overlaps = [c for c in callbacks if c.__fn_or_cls__ is MegatronCommOverlapCallback]",
        "for callback in overlaps:",
        f"    callback.tp_comm_overlap = {overlap}",
    ]
    if overlap:
        statements += [
            "if not overlaps:",
            "    callbacks.append(run.Config(MegatronCommOverlapCallback, tp_comm_overlap=True))",
        ]
    return statements


def _header(launch: Launch, title: str) -> list[str]:
    """The opening comment: what it launches and how to run it."""
    cluster = launch.job.cluster
    return [
        "#!/usr/bin/env python3",
        comment(f"{title} recipe override written by autotune for {NEMO_RELEASE}."),
        comment(launch.describe()),
        *map(comment, [*launch.precision_notes(), *card_notes(launch)]),
        "# Run it on every node; each torchrun worker trains in its own process:",
        f"#   torchrun --nproc-per-node {cluster.processes_per_host} --nnodes {cluster.num_hosts} "
        f"--node-rank <rank> --master-addr <node 0> --master-port 6000 {FILE_NAME}",
        "# The recipe's mock data trains unless recipe.data is replaced",
        "# (llm.PreTrainingDataModule); MAX_STEPS and CHECKPOINT_DIR come from the environment.",
    ]


def recipe_text(launch: Launch, title: str) -> str:
    """The recipe override file of ``launch`` (its model must be in :data:`RECIPES`)."""
    job = launch.job
    recipe, extra = RECIPES[job.model.name]
    cluster = job.cluster
    plugin, plugin_import = _plugin(launch)
    settings = _settings(launch)
    uses_torch = any("torch." in line for line in [plugin, *settings])
    lines = [
        *_header(launch, title),
        f'"""NeMo recipe ``{recipe}`` with the layout autotune picked."""',
        "",
        "import os",
        "",
        "import nemo_run as run",
        *(["import torch"] if uses_torch else []),
        "from megatron.core.distributed import DistributedDataParallelConfig",
        "from nemo.collections import llm",
        plugin_import,
        "from nemo.lightning.pytorch.callbacks.megatron_comm_overlap import (",
        "    MegatronCommOverlapCallback,",
        ")",
        "",
        'MAX_STEPS = int(os.environ.get("MAX_STEPS", "100"))',
        'CHECKPOINT_DIR = os.environ.get("CHECKPOINT_DIR", "checkpoints")',
        "",
        "",
        "def configure() -> run.Partial:",
        '    """The recipe with the model sizes, layout, batch and precision of the pick."""',
        f"    recipe = llm.{recipe}.pretrain_recipe(",
        f'        name="autotune", dir=CHECKPOINT_DIR, num_nodes={cluster.num_hosts}, '
        f"num_gpus_per_node={cluster.processes_per_host}{extra}",
        "    )",
        *(f"    {statement}" for statement in settings),
        "    return recipe",
        "",
        "",
        'if __name__ == "__main__":',
        "    run.run(configure(), direct=True)",
    ]
    return "\n".join(lines) + "\n"


def launch_files(launch: Launch, title: str) -> tuple[LaunchFile, ...]:
    """The recipe override, for a model NeMo has a recipe of and a job its recipes can set
    (none otherwise: NeMo 8cfedd72's Megatron-Core predates the EP all-to-all overlap)."""
    job = launch.job
    if job.model.name not in RECIPES or (job.model.is_moe and job.train.moe_a2a_overlap):
        return ()
    return (LaunchFile(FILE_NAME, recipe_text(launch, title), executable=True),)
