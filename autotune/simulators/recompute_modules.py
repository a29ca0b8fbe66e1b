"""The submodules selective recompute can checkpoint (Megatron-Core's ``--recompute-modules``).

Megatron-Core's selective recompute checkpoints the submodules named in ``recompute_modules``
(``megatron/core/transformer/transformer_config.py``; ``["core_attn"]`` unless told). Four use
the full checkpoint (``tensor_parallel.checkpoint``, or ``te_checkpoint`` under FP8): the
module's input is kept, what it saves inside is not, and its whole forward runs again in the
backward: ``core_attn`` (core attention), ``mlp`` (a dense layer's MLP), ``moe`` (the whole
MoE layer: router, dispatch, experts, combine, shared experts) and ``shared_experts``. Three
use ``CheckpointWithoutOutput`` (``megatron/core/tensor_parallel/random.py``): the function
runs without grad, its input is kept and its output is discarded once the next module has
read it, then recomputed by a hook when the backward reaches that module: ``moe_act`` (the
routed experts' activation, ``moe/experts.py``), ``layernorm`` (the input and pre-MLP norms
that run as their own module, ``transformer_layer.py``) and ``mla_up_proj`` (MLA's up
projections and RoPE, ``multi_latent_attention.py``). docs/decisions/0047-recompute-by-module.md.
"""

from __future__ import annotations

from collections.abc import Iterable

from autotune.simulators.errors import SpecError
from autotune.simulators.model_spec import ModelSpec

__all__ = [
    "DEFAULT_MODULES",
    "OUTPUT_DISCARDING",
    "RECOMPUTE_MODULES",
    "layer_modules",
    "model_problems",
    "normalized_modules",
    "standalone_norms",
]

# In the order of transformer_config.py's docstring (core_v0.17.1 to main, d98e8a64).
RECOMPUTE_MODULES = (
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
)
DEFAULT_MODULES = ("core_attn",)  # transformer_config.py: recompute_modules None -> core_attn
# CheckpointWithoutOutput: the output is discarded, not the module's saved tensors alone.
OUTPUT_DISCARDING = frozenset({"moe_act", "layernorm", "mla_up_proj"})
_MOE_MODULES = frozenset({"moe", "moe_act", "shared_experts"})


def normalized_modules(value: object) -> tuple[str, ...] | None:
    """``value`` (a sequence of module names, or None) in the one spelling a layout keeps:
    sorted, each name once, and None for the framework's default (core attention only).

    Raises:
        SpecError: a name that is not a module, or no module at all.
    """
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise SpecError(
            f"layout: recompute_modules={value!r} must be a list of module names from "
            f"{', '.join(RECOMPUTE_MODULES)}"
        )
    names = tuple(value)
    unknown = [name for name in names if name not in RECOMPUTE_MODULES]
    if unknown or not names:
        given = ", ".join(map(repr, unknown)) if unknown else "no module"
        raise SpecError(
            f"layout: recompute_modules names {given}; allowed: {', '.join(RECOMPUTE_MODULES)} "
            "(recompute=none recomputes nothing)"
        )
    modules = tuple(sorted(set(names)))
    return None if modules == DEFAULT_MODULES else modules


def standalone_norms(model: ModelSpec, moe: bool, fused_norm_linear: bool) -> int:
    """Norms of one layer that run as their own module, which ``layernorm`` recomputes.

    Where the stack fuses a norm into the linear layer after it (Transformer Engine's
    ``TELayerNormColumnParallelLinear``, ``fused_norm_linear``), the layer spec leaves an
    ``IdentityOp`` and ``transformer_layer.py`` recomputes nothing there: Megatron-Core's
    ``gpt_layer_specs.py`` fuses a GQA layer's input norm into the QKV projection and a dense
    layer's pre-MLP norm into ``linear_fc1``, and keeps a norm of its own before MLA's down
    projections and before the MoE router. The local spec (MindSpeed-LLM's
    ``--transformer-impl local``) runs both norms of every layer on their own.
    """
    if not fused_norm_linear:
        return 2
    return int(model.attention == "mla") + int(moe)


def layer_modules(modules: Iterable[str], model: ModelSpec, moe: bool) -> tuple[str, ...]:
    """Of ``modules``, those a dense (``moe`` False) or an MoE layer of ``model`` has:
    ``mlp`` is a dense layer's (``transformer_layer.py``: not on an MoE layer), ``moe``,
    ``moe_act`` and ``shared_experts`` an MoE layer's, ``mla_up_proj`` an MLA layer's."""
    kept = []
    for name in modules:
        if name == "mlp" and moe or name in _MOE_MODULES and not moe:
            continue
        if name == "shared_experts" and not model.shared_expert_ffn_hidden_size:
            continue
        if name == "mla_up_proj" and model.attention != "mla":
            continue
        kept.append(name)
    return tuple(kept)


def model_problems(modules: Iterable[str], model: ModelSpec) -> list[str]:
    """The modules ``model`` does not have, one sentence each (Megatron refuses
    ``mla_up_proj`` without MLA, transformer_config.py; the others would recompute
    nothing)."""
    found = []
    for name in modules:
        if name in _MOE_MODULES and not model.is_moe:
            found.append(
                f"recompute module {name} needs a mixture-of-experts model; {model.name} is dense"
            )
        elif name == "shared_experts" and not model.shared_expert_ffn_hidden_size:
            found.append(f"recompute module shared_experts: {model.name} has no shared experts")
        elif name == "mla_up_proj" and model.attention != "mla":
            found.append(
                f"recompute module mla_up_proj needs multi-latent attention; {model.name} has "
                f"{model.attention}"
            )
        elif name == "mlp" and not model.num_dense_layers:
            found.append(
                f"recompute module mlp recomputes dense MLPs; every layer of {model.name} is "
                "an MoE layer (moe, moe_act, shared_experts recompute its parts)"
            )
    return found
