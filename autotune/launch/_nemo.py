"""NeMo 2.0: the model's ``nemo.collections.llm`` recipe with the picked layout set on it.

For a Megatron-Core job whose model has a NeMo recipe (``NVIDIA/NeMo`` at 8cfedd72,
``nemo/collections/llm/recipes/``), a Python file builds ``llm.<recipe>.pretrain_recipe(...)``
and overrides what the layout and the job decide, by the field names NeMo's own classes take:
``nl.MegatronStrategy`` (parallel sizes, ``sequence_parallel``, ``pipeline_dtype``, the layer
split), Megatron-Core's ``DistributedDataParallelConfig`` (the framework's overlaps), the
optimizer's ``use_distributed_optimizer``, the model config's sizes, sequence and recompute,
the data module's batch and sequence, the precision plugin
(``recipes/precision/mixed_precision.py``; its gradient dtype overrides the DDP config's), and
TP communication overlap (``MegatronCommOverlapCallback``). Every split field is written, since
recipes set their own (DeepSeek-V3 first/last stages, Llama-3.1-405B's embedding and loss
accounting). The file runs under torchrun on every node and trains in each worker
(``run.run(direct=True)``).
"""

from __future__ import annotations

import json

from autotune.launch._megatron import moe_dispatcher_name
from autotune.launch._megatron import pipeline_flags
from autotune.launch._script import LaunchFile
from autotune.launch._script import LaunchJob
from autotune.launch._script import comment
from simulators.states import fp8_primary

FILE_NAME = "nemo_pretrain.py"

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


def _model_fields(job: LaunchJob) -> list[tuple[str, object]]:
    """Sizes the layout's validity rests on, the sequence, the dropout as priced (recipes
    set their own), and recompute (docs/reference.md 4.1: full of every layer is uniform
    groups of one; a count is the block method)."""
    model, layout = job.model, job.layout
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
        dispatcher = moe_dispatcher_name(job)
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
        if layout.recompute_layers and layout.vpp > 1:  # counted per model chunk
            count = -(-layout.recompute_layers // layout.vpp)
    granularity = None if layout.recompute == "none" else layout.recompute
    fields += [
        ("recompute_granularity", granularity),
        ("recompute_method", method),
        ("recompute_num_layers", count),
    ]
    if layout.recompute == "selective":
        fields.append(("recompute_modules", ["core_attn"]))
    return fields


def _strategy_fields(job: LaunchJob) -> list[tuple[str, object]]:
    """Parallel sizes and the layer split on ``nl.MegatronStrategy``; ``pipeline_dtype``
    (NeMo requires it whenever pp > 1, ``llm/api.py`` _validate_config)."""
    layout = job.layout
    split = pipeline_flags(job, layer_list=False)
    layout_string = str(split[0].values[0]) if job.uneven else None
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
    if job.model.is_moe:  # the layout's expert grid reuses TP inside experts
        fields.append(("expert_tensor_parallel_size", layout.tp))
    return fields


def _plugin(job: LaunchJob) -> tuple[str, str]:
    """The precision plugin expression and the import it needs."""
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


def _settings(job: LaunchJob) -> list[str]:
    """The statements of ``configure()`` after the recipe is built, in order."""
    layout = job.layout
    plugin, _ = _plugin(job)
    ddp = {
        "grad_reduce_in_fp32": job.dtype != "fp32" and job.train.reduces_grads_in_fp32,
        "overlap_grad_reduce": job.train.overlaps_grad_reduce,
        "overlap_param_gather": job.train.overlaps_param_gather and layout.distributed_optimizer,
        "use_distributed_optimizer": layout.distributed_optimizer,
    }
    pipeline_dtype = _TORCH_DTYPES[job.dtype] if layout.pp > 1 else "None"
    return [
        "model = recipe.model.config",
        *(f"model.{key} = {_literal(value)}" for key, value in _model_fields(job)),
        "strategy = recipe.trainer.strategy",
        *(f"strategy.{key} = {_literal(value)}" for key, value in _strategy_fields(job)),
        f"strategy.pipeline_dtype = {pipeline_dtype}",
        "strategy.ddp = run.Config(",
        "    DistributedDataParallelConfig,",
        *(f"    {key}={value}," for key, value in ddp.items()),
        ")",
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


def _header(job: LaunchJob, title: str) -> list[str]:
    """The opening comment: what it launches and how to run it."""
    cluster = job.cluster
    return [
        "#!/usr/bin/env python3",
        comment(f"{title} recipe override written by autotune."),
        comment(job.describe()),
        "# Run it on every node; each torchrun worker trains in its own process:",
        f"#   torchrun --nproc-per-node {cluster.devices_per_node} --nnodes {cluster.num_nodes} "
        f"--node-rank <rank> --master-addr <node 0> --master-port 6000 {FILE_NAME}",
        "# The recipe's mock data trains unless recipe.data is replaced",
        "# (llm.PreTrainingDataModule); MAX_STEPS and CHECKPOINT_DIR come from the environment.",
    ]


def recipe_text(job: LaunchJob, title: str) -> str:
    """The recipe override file of ``job`` (its model must be in :data:`RECIPES`)."""
    recipe, extra = RECIPES[job.model.name]
    cluster = job.cluster
    plugin, plugin_import = _plugin(job)
    settings = _settings(job)
    uses_torch = any("torch." in line for line in [plugin, *settings])
    lines = [
        *_header(job, title),
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
        f'        name="autotune", dir=CHECKPOINT_DIR, num_nodes={cluster.num_nodes}, '
        f"num_gpus_per_node={cluster.devices_per_node}{extra}",
        "    )",
        *(f"    {statement}" for statement in settings),
        "    return recipe",
        "",
        "",
        'if __name__ == "__main__":',
        "    run.run(configure(), direct=True)",
    ]
    return "\n".join(lines) + "\n"


def launch_files(job: LaunchJob, title: str) -> tuple[LaunchFile, ...]:
    """The recipe override, for a model NeMo has a recipe of and a job its recipes can set
    (none otherwise: NeMo 8cfedd72's Megatron-Core predates the EP all-to-all overlap)."""
    if job.model.name not in RECIPES or (job.model.is_moe and job.train.moe_a2a_overlap):
        return ()
    return (LaunchFile(FILE_NAME, recipe_text(job, title), executable=True),)
