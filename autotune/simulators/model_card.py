"""Model-card facts: what a launch must tell a framework of a model beyond its shapes.

The simulators price shapes. A training run also needs the model card's positions (RoPE's
base, the share of each head it rotates, how it pairs dimensions, a Llama 3.1 or YaRN scaling;
or ALiBi, or learned positions), its norms' epsilon and per-head query/key norms, and an MoE
router's rule (score function, normalised top-k, expert bias, group-limited top-k, scaling).
They are fields of :class:`simulators.ModelSpec` marked :data:`CARD` (``CARD_FIELDS``) that no
simulator reads: they change what a step computes, not what it costs. Their defaults are those
of Megatron-LM and Hugging Face transformers, so a model that names none is the plain RoPE,
epsilon 1e-5, softmax-routed model both build by default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from autotune.simulators._checks import require_at_least
from autotune.simulators._checks import require_at_most
from autotune.simulators._checks import require_bools
from autotune.simulators._checks import require_choice
from autotune.simulators._checks import require_integers
from autotune.simulators._checks import require_non_negative
from autotune.simulators._checks import require_numbers
from autotune.simulators._checks import require_positive
from autotune.simulators.errors import SpecError
from autotune.simulators.limits import MAX_NORM_EPSILON
from autotune.simulators.limits import MAX_ROTARY_BASE
from autotune.simulators.limits import MAX_SCALE_FACTOR
from autotune.simulators.limits import MAX_SEQ_LEN

__all__ = [
    "CARD",
    "POSITION_EMBEDDINGS",
    "ROPE_SCALINGS",
    "ROUTER_SCORE_FUNCTIONS",
    "SCALING_FIELDS",
    "check_card",
]

# Metadata that marks a ModelSpec field as a model-card fact.
CARD = {"card": True}
POSITION_EMBEDDINGS = ("rope", "alibi", "learned_absolute")
# none; Llama 3.1's frequency-banded scaling (Hugging Face rope_type "llama3"); YaRN (DeepSeek).
ROPE_SCALINGS = ("none", "llama3", "yarn")
ROUTER_SCORE_FUNCTIONS = ("softmax", "sigmoid")
# The fields each RoPE scaling reads, in Hugging Face's rope_scaling keys: factor,
# original_max_position_embeddings, low_freq_factor and high_freq_factor (llama3), beta_fast,
# beta_slow, mscale and mscale_all_dim (yarn).
SCALING_FIELDS: dict[str, tuple[str, ...]] = {
    "none": (),
    "llama3": (
        "rope_scaling_factor",
        "rope_original_max_positions",
        "rope_low_freq_factor",
        "rope_high_freq_factor",
    ),
    "yarn": (
        "rope_scaling_factor",
        "rope_original_max_positions",
        "rope_beta_fast",
        "rope_beta_slow",
        "rope_mscale",
        "rope_mscale_all_dim",
    ),
}
_SCALING_ALL = tuple(dict.fromkeys(name for names in SCALING_FIELDS.values() for name in names))
_ROPE_FIELDS = ("rotary_base", "rotary_percent", "rotary_interleaved", "rope_scaling")
_ROUTER_FIELDS = (
    "moe_router_score_function",
    "moe_router_norm_topk_prob",
    "moe_router_expert_bias",
    "moe_router_num_groups",
    "moe_router_group_topk",
    "moe_router_topk_scaling_factor",
)


def check_card(model: Any, owner: str) -> None:
    """Refuse the card facts of ``model`` (a ModelSpec) that mean nothing, alone or for it.

    Raises:
        SpecError: naming every bad field and what is allowed.
    """
    _check_values(model, owner)
    _check_rope(model, owner)
    _check_router(model, owner)
    if model.qk_layernorm and model.attention == "mla":
        raise SpecError(
            f"{owner}: qk_layernorm is the per-head query/key norm of gqa attention; MLA "
            "normalises its compressed query and key-value latents always (use false)"
        )


# size: one table of bounds per kind of model-card fact
def _check_values(model: Any, owner: str) -> None:
    """Types, choices and bounds of each fact on its own."""
    integers = {
        "rotary_base": model.rotary_base,
        "rope_original_max_positions": model.rope_original_max_positions,
        "moe_router_num_groups": model.moe_router_num_groups,
        "moe_router_group_topk": model.moe_router_group_topk,
    }
    factors = {
        "rope_scaling_factor": model.rope_scaling_factor,
        "rope_low_freq_factor": model.rope_low_freq_factor,
        "rope_high_freq_factor": model.rope_high_freq_factor,
        "rope_beta_fast": model.rope_beta_fast,
        "rope_beta_slow": model.rope_beta_slow,
        "rope_mscale": model.rope_mscale,
        "moe_router_topk_scaling_factor": model.moe_router_topk_scaling_factor,
    }
    require_integers(owner, **integers)
    require_numbers(
        owner,
        **factors,
        rotary_percent=model.rotary_percent,
        rope_mscale_all_dim=model.rope_mscale_all_dim,
        norm_epsilon=model.norm_epsilon,
    )
    require_bools(
        owner,
        rotary_interleaved=model.rotary_interleaved,
        qk_layernorm=model.qk_layernorm,
        moe_router_norm_topk_prob=model.moe_router_norm_topk_prob,
        moe_router_expert_bias=model.moe_router_expert_bias,
    )
    if model.position_embedding is not None:
        require_choice(owner, "position_embedding", model.position_embedding, POSITION_EMBEDDINGS)
    require_choice(owner, "rope_scaling", model.rope_scaling, ROPE_SCALINGS)
    require_choice(
        owner,
        "moe_router_score_function",
        model.moe_router_score_function,
        ROUTER_SCORE_FUNCTIONS,
    )
    require_positive(
        owner,
        **factors,
        rotary_base=model.rotary_base,
        rotary_percent=model.rotary_percent,
        norm_epsilon=model.norm_epsilon,
    )
    require_non_negative(
        owner,
        rope_original_max_positions=model.rope_original_max_positions,
        rope_mscale_all_dim=model.rope_mscale_all_dim,
        moe_router_num_groups=model.moe_router_num_groups,
        moe_router_group_topk=model.moe_router_group_topk,
    )
    require_at_most(
        owner, MAX_ROTARY_BASE, "published bases are 1e4 to 5e7", rotary_base=model.rotary_base
    )
    require_at_most(
        owner, 1, "the share of each head that RoPE rotates", rotary_percent=model.rotary_percent
    )
    require_at_most(
        owner,
        MAX_NORM_EPSILON,
        "published epsilons are 1.6e-7 to 1e-5",
        norm_epsilon=model.norm_epsilon,
    )
    require_at_most(
        owner,
        MAX_SCALE_FACTOR,
        "published factors are 0.7 to 64",
        **factors,
        rope_mscale_all_dim=model.rope_mscale_all_dim,
    )
    require_at_most(
        owner,
        MAX_SEQ_LEN,
        "the longest contexts are ~1e7",
        rope_original_max_positions=model.rope_original_max_positions,
    )


def _check_rope(model: Any, owner: str) -> None:
    """RoPE facts only for RoPE models; each scaling's own fields only with that scaling,
    and in the order its formula needs."""
    if model.positions != "rope":
        because = f"position_embedding={model.positions!r} (only rope reads them)"
        _require_defaults(model, owner, because, (*_ROPE_FIELDS, *_SCALING_ALL))
        return
    scaling = model.rope_scaling
    unused = [name for name in _SCALING_ALL if name not in SCALING_FIELDS[scaling]]
    _require_defaults(model, owner, f"rope_scaling={scaling!r}", unused)
    if scaling == "none":
        return
    require_at_least(
        owner,
        1,
        "a scaling stretches the positions a model was trained on",
        rope_scaling_factor=model.rope_scaling_factor,
    )
    require_positive(owner, rope_original_max_positions=model.rope_original_max_positions)
    if scaling == "llama3" and not model.rope_low_freq_factor < model.rope_high_freq_factor:
        raise SpecError(
            f"{owner}: rope_low_freq_factor={model.rope_low_freq_factor!r} must be below "
            f"rope_high_freq_factor={model.rope_high_freq_factor!r} (Llama 3.1: 1 and 4)"
        )
    if scaling == "yarn" and not model.rope_beta_slow < model.rope_beta_fast:
        raise SpecError(
            f"{owner}: rope_beta_slow={model.rope_beta_slow!r} must be below "
            f"rope_beta_fast={model.rope_beta_fast!r} (YaRN's defaults: 1 and 32)"
        )


def _check_router(model: Any, owner: str) -> None:
    """Router facts only for MoE models; group-limited top-k that can pick its experts; an
    expert bias on sigmoid scores (aux-loss-free routing, as DeepSeek-V3 and Megatron-Core)."""
    if not model.is_moe:
        _require_defaults(model, owner, "num_experts=0 (a dense model)", _ROUTER_FIELDS)
        return
    groups, top = model.moe_router_num_groups, model.moe_router_group_topk
    if bool(groups) != bool(top):
        raise SpecError(
            f"{owner}: moe_router_num_groups={groups} and moe_router_group_topk={top}: set "
            "both (group-limited top-k) or neither"
        )
    if groups and (model.num_experts % groups or top > groups):
        raise SpecError(
            f"{owner}: moe_router_num_groups={groups} must divide num_experts="
            f"{model.num_experts} and be at least moe_router_group_topk={top}"
        )
    if groups and model.moe_top_k > top * (model.num_experts // groups):
        raise SpecError(
            f"{owner}: moe_top_k={model.moe_top_k} exceeds the experts of the "
            f"moe_router_group_topk={top} groups picked ({model.num_experts // groups} each)"
        )
    if model.moe_router_expert_bias and model.moe_router_score_function != "sigmoid":
        raise SpecError(
            f"{owner}: moe_router_expert_bias (aux-loss-free routing) biases sigmoid scores; "
            "Megatron-Core refuses it with softmax (use moe_router_score_function=sigmoid)"
        )


def _require_defaults(model: Any, owner: str, because: str, names: Iterable[str]) -> None:
    """Fields that ``because`` makes meaningless keep their defaults, not silently ignored."""
    defaults = {f.name: f.default for f in dataclasses.fields(model)}
    bad = [
        f"{name}={getattr(model, name)!r} (default {defaults[name]!r})"
        for name in names
        if getattr(model, name) != defaults[name]
    ]
    if bad:
        raise SpecError(f"{owner}: {', '.join(bad)} must keep the default with {because}")
