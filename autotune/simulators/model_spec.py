"""The model a simulator prices: :class:`ModelSpec`, a decoder-only transformer, with the
parameter and FLOP accounting of Megatron-LM (docs/reference.md sections 2 and 3.1)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from dataclasses import field

from autotune.simulators._checks import require_at_most
from autotune.simulators._checks import require_bools
from autotune.simulators._checks import require_choice
from autotune.simulators._checks import require_integers
from autotune.simulators._checks import require_name
from autotune.simulators._checks import require_non_negative
from autotune.simulators._checks import require_positive
from autotune.simulators.errors import SpecError
from autotune.simulators.limits import MAX_EXPERTS
from autotune.simulators.limits import MAX_LAYERS
from autotune.simulators.limits import MAX_VOCAB
from autotune.simulators.limits import MAX_WIDTH
from autotune.simulators.model_card import CARD
from autotune.simulators.model_card import check_card

__all__ = ["ACTIVATIONS", "ATTENTIONS", "CARD_FIELDS", "ModelSpec", "gpt_family"]

ACTIVATIONS = ("swiglu", "gelu")
ATTENTIONS = ("gqa", "mla")


def gpt_family(norm: str, activation: str, qkv_bias: bool) -> bool:
    """Whether a model is Megatron's GPT-2/3 family, the model its defaults build: LayerNorm,
    GeLU and biases on every linear layer (``add_bias_linear``), which its GPT scripts keep
    along with the other defaults, learned absolute positions and dropout 0.1 (the default of
    a run that names none: :meth:`TrainSpec.drops_out`). The simulators read no position
    embedding (``ModelSpec.position_embedding`` is a launch fact): this is what tells the GPT
    rows (vTrain, DLPerf, Korthikanti, GPT-3) from the RoPE models, the Llama family (RMSNorm,
    SwiGLU) and Nemotron-4 (LayerNorm and a non-gated MLP, but no biases, RoPE and no dropout)
    (docs/reference.md 3.3)."""
    return norm == "layernorm" and activation == "gelu" and qkv_bias


def _require_unset(owner: str, because: str, values: dict[str, int]) -> None:
    """Fields that ``because`` makes meaningless must be 0, not silently ignored."""
    bad = [f"{name}={value}" for name, value in values.items() if value]
    if bad:
        raise SpecError(f"{owner}: {', '.join(bad)} must be 0 with {because}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer: dense, GQA/MHA, MoE or MLA.

    ``ffn_hidden_size`` is the dense MLP width (used by every layer of a dense model and by the
    ``first_dense_layers`` of an MoE model). MoE layers have ``num_experts`` routed experts of
    width ``expert_ffn_hidden_size`` (top ``moe_top_k`` per token) plus shared experts whose
    summed width is ``shared_expert_ffn_hidden_size``. MLA (DeepSeek) attention uses the
    ``*_lora_rank`` and ``qk_*_head_dim`` / ``v_head_dim`` fields instead of ``head_dim``.

    The fields after ``v_head_dim`` are model-card facts (:mod:`autotune.simulators.model_card`,
    ``CARD_FIELDS``) that the launch files write and no simulator prices:
    ``position_embedding`` (None: learned absolute positions for Megatron's GPT family, RoPE
    for the others; :attr:`positions`), RoPE's ``rotary_base`` (Hugging Face ``rope_theta``),
    ``rotary_percent`` (``partial_rotary_factor``) and ``rotary_interleaved`` (pairs of
    adjacent dimensions, GLM), its ``rope_scaling`` (``none``, Llama 3.1's ``llama3`` or
    ``yarn``) with that scaling's ``rope_*`` fields, ``norm_epsilon`` (``rms_norm_eps``),
    ``qk_layernorm`` (a norm on each head's queries and keys, Qwen3), and an MoE router's
    ``moe_router_score_function`` (``scoring_func``), ``moe_router_norm_topk_prob`` (the top-k
    probabilities renormalised to sum to 1, ``norm_topk_prob``), ``moe_router_expert_bias``
    (aux-loss-free routing, ``topk_method`` ``noaux_tc``), group-limited top-k over
    ``moe_router_num_groups`` groups keeping ``moe_router_group_topk`` (``n_group``,
    ``topk_group``; 0: none) and ``moe_router_topk_scaling_factor``
    (``routed_scaling_factor``).
    """

    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    activation: str = "swiglu"
    norm: str = "rmsnorm"
    qkv_bias: bool = False
    tied_embeddings: bool = False
    num_experts: int = 0
    moe_top_k: int = 0
    expert_ffn_hidden_size: int = 0
    shared_expert_ffn_hidden_size: int = 0
    first_dense_layers: int = 0
    attention: str = "gqa"
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    position_embedding: str | None = field(default=None, metadata=CARD)
    rotary_base: int = field(default=10000, metadata=CARD)
    rotary_percent: float = field(default=1.0, metadata=CARD)
    rotary_interleaved: bool = field(default=False, metadata=CARD)
    rope_scaling: str = field(default="none", metadata=CARD)
    rope_scaling_factor: float = field(default=1.0, metadata=CARD)
    rope_original_max_positions: int = field(default=0, metadata=CARD)
    rope_low_freq_factor: float = field(default=1.0, metadata=CARD)
    rope_high_freq_factor: float = field(default=4.0, metadata=CARD)
    rope_beta_fast: float = field(default=32.0, metadata=CARD)
    rope_beta_slow: float = field(default=1.0, metadata=CARD)
    rope_mscale: float = field(default=1.0, metadata=CARD)
    rope_mscale_all_dim: float = field(default=0.0, metadata=CARD)
    norm_epsilon: float = field(default=1e-5, metadata=CARD)
    qk_layernorm: bool = field(default=False, metadata=CARD)
    moe_router_score_function: str = field(default="softmax", metadata=CARD)
    moe_router_norm_topk_prob: bool = field(default=True, metadata=CARD)
    moe_router_expert_bias: bool = field(default=False, metadata=CARD)
    moe_router_num_groups: int = field(default=0, metadata=CARD)
    moe_router_group_topk: int = field(default=0, metadata=CARD)
    moe_router_topk_scaling_factor: float = field(default=1.0, metadata=CARD)

    def __post_init__(self) -> None:
        owner = f"model {self.name!r}"
        require_name(owner, self.name)
        widths = {
            "hidden_size": self.hidden_size,
            "ffn_hidden_size": self.ffn_hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "num_kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "expert_ffn_hidden_size": self.expert_ffn_hidden_size,
            "shared_expert_ffn_hidden_size": self.shared_expert_ffn_hidden_size,
            **self._mla_fields,
        }
        counts = {
            "num_layers": self.num_layers,
            "first_dense_layers": self.first_dense_layers,
            "vocab_size": self.vocab_size,
            "num_experts": self.num_experts,
            "moe_top_k": self.moe_top_k,
        }
        require_integers(owner, **widths, **counts)
        require_bools(owner, qkv_bias=self.qkv_bias, tied_embeddings=self.tied_embeddings)
        require_positive(
            owner,
            num_layers=self.num_layers,
            hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            vocab_size=self.vocab_size,
        )
        require_non_negative(owner, **widths, **counts)
        require_at_most(owner, MAX_WIDTH, "the widest models are ~1e5", **widths)
        require_at_most(
            owner,
            MAX_LAYERS,
            "the deepest LLMs have a few hundred",
            num_layers=self.num_layers,
            first_dense_layers=self.first_dense_layers,
        )
        require_at_most(owner, MAX_VOCAB, "the largest have ~256k", vocab_size=self.vocab_size)
        require_at_most(
            owner,
            MAX_EXPERTS,
            "PEER routes to a million experts",
            num_experts=self.num_experts,
            moe_top_k=self.moe_top_k,
        )
        require_choice(owner, "activation", self.activation, ACTIVATIONS)
        require_choice(owner, "attention", self.attention, ATTENTIONS)
        require_choice(owner, "norm", self.norm, ("rmsnorm", "layernorm"))
        self._check_relations(owner)
        check_card(self, owner)

    @property
    def _mla_fields(self) -> dict[str, int]:
        return {
            "q_lora_rank": self.q_lora_rank,
            "kv_lora_rank": self.kv_lora_rank,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "v_head_dim": self.v_head_dim,
        }

    def _check_relations(self, owner: str) -> None:
        """Fields that only make sense together (docs/reference.md 2; Megatron-LM
        ``arguments.py``: kv_channels defaults to hidden / heads, GQA groups divide heads)."""
        if self.hidden_size % self.num_attention_heads:
            raise SpecError(
                f"{owner}: num_attention_heads={self.num_attention_heads} must divide "
                f"hidden_size={self.hidden_size}"
            )
        if self.num_attention_heads % self.num_kv_heads:
            raise SpecError(
                f"{owner}: num_kv_heads={self.num_kv_heads} must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.is_moe:
            require_positive(
                owner, moe_top_k=self.moe_top_k, expert_ffn_hidden_size=self.expert_ffn_hidden_size
            )
            if self.moe_top_k > self.num_experts:
                raise SpecError(
                    f"{owner}: moe_top_k={self.moe_top_k} exceeds num_experts={self.num_experts}"
                )
            if self.first_dense_layers > self.num_layers:
                raise SpecError(
                    f"{owner}: first_dense_layers={self.first_dense_layers} exceeds "
                    f"num_layers={self.num_layers}"
                )
            if self.first_dense_layers:
                require_positive(owner, ffn_hidden_size=self.ffn_hidden_size)
        else:
            require_positive(owner, ffn_hidden_size=self.ffn_hidden_size)
            moe = {
                "moe_top_k": self.moe_top_k,
                "expert_ffn_hidden_size": self.expert_ffn_hidden_size,
                "shared_expert_ffn_hidden_size": self.shared_expert_ffn_hidden_size,
                "first_dense_layers": self.first_dense_layers,
            }
            _require_unset(owner, "num_experts=0 (a dense model)", moe)
        if self.attention == "mla":
            require_positive(
                owner,
                kv_lora_rank=self.kv_lora_rank,
                qk_nope_head_dim=self.qk_nope_head_dim,
                qk_rope_head_dim=self.qk_rope_head_dim,
                v_head_dim=self.v_head_dim,
            )
        else:
            _require_unset(
                owner, f"attention={self.attention!r} (only mla uses them)", self._mla_fields
            )

    # ---- shape -------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def positions(self) -> str:
        """The position embedding: the model's, else learned absolute positions for Megatron's
        GPT family (:func:`gpt_family`) and RoPE for every other model."""
        if self.position_embedding is not None:
            return self.position_embedding
        return "learned_absolute" if self.is_gpt_family else "rope"

    @property
    def is_gpt_family(self) -> bool:
        """Megatron's GPT-2/3 family (:func:`gpt_family`)."""
        return gpt_family(self.norm, self.activation, self.qkv_bias)

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices per MLP: 3 for SwiGLU (gate, up, down), 2 for GeLU."""
        return 3 if self.activation == "swiglu" else 2

    @property
    def q_width(self) -> int:
        """Width of all query heads together (a*d; a*(nope+rope) for MLA)."""
        if self.attention == "mla":
            return self.num_attention_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of K plus V for all KV heads (2*g*d; for MLA the up-projected K and V)."""
        if self.attention == "mla":
            a = self.num_attention_heads
            return a * (self.qk_nope_head_dim + self.qk_rope_head_dim) + a * self.v_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    @property
    def attn_out_width(self) -> int:
        """Width of the attention output fed to the output projection (a*d; a*v for MLA)."""
        if self.attention == "mla":
            return self.num_attention_heads * self.v_head_dim
        return self.num_attention_heads * self.head_dim

    # ---- parameters ----------------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        """Parameters of one attention block (projections, biases, MLA norms)."""
        h, a = self.hidden_size, self.num_attention_heads
        if self.attention == "mla":
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = self.q_lora_rank * (h + a * qk + 1)
            else:
                q = h * a * qk
            kv = self.kv_lora_rank * (h + a * (self.qk_nope_head_dim + self.v_head_dim) + 1)
            kv += h * self.qk_rope_head_dim
            return q + kv + a * self.v_head_dim * h
        qkv_out = self.q_width + self.kv_width
        params = h * qkv_out + self.attn_out_width * h
        if self.qkv_bias:
            params += qkv_out
        return params

    def mlp_params(self, ffn_hidden_size: int) -> int:
        """Parameters of one MLP of the given width (biases for the GPT family)."""
        params = self.mlp_matrices * self.hidden_size * ffn_hidden_size
        if self.is_gpt_family:
            params += ffn_hidden_size + self.hidden_size
        return params

    @property
    def norm_params_per_layer(self) -> int:
        """Two norms per layer (LayerNorm has a bias too)."""
        return 2 * self.hidden_size * (2 if self.norm == "layernorm" else 1)

    @property
    def dense_layer_params(self) -> int:
        return (
            self.attention_params
            + self.mlp_params(self.ffn_hidden_size)
            + (self.norm_params_per_layer)
        )

    @property
    def expert_params_per_layer(self) -> int:
        """Routed-expert parameters of one MoE layer (sharded by EP)."""
        return self.num_experts * self.mlp_params(self.expert_ffn_hidden_size)

    @property
    def moe_layer_non_expert_params(self) -> int:
        """Attention, norms, router and shared experts of one MoE layer (sharded by TP)."""
        shared = (
            self.mlp_params(self.shared_expert_ffn_hidden_size)
            if self.shared_expert_ffn_hidden_size
            else 0
        )
        router = self.hidden_size * self.num_experts
        return self.attention_params + self.norm_params_per_layer + shared + router

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def output_params(self) -> int:
        """The output head (0 when tied to the embedding)."""
        return 0 if self.tied_embeddings else self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        """Total parameters, as model cards count them."""
        layers = self.num_dense_layers * self.dense_layer_params
        layers += self.num_moe_layers * (
            self.moe_layer_non_expert_params + self.expert_params_per_layer
        )
        final_norm = self.hidden_size * (2 if self.norm == "layernorm" else 1)
        return layers + self.embedding_params + self.output_params + final_norm

    @property
    def num_active_params(self) -> int:
        """Parameters that one token touches (routed experts: top-k of them)."""
        if not self.is_moe:
            return self.num_params
        inactive = (self.num_experts - self.moe_top_k) * self.mlp_params(
            self.expert_ffn_hidden_size
        )
        return self.num_params - self.num_moe_layers * inactive

    # ---- FLOPs ---------------------------------------------------------------------------
    def attention_flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs of one attention block per token: projections + causal core.

        Core attention (QK^T and softmax.V) costs 2*2*s*width per token without a mask; the
        causal mask halves it (Megatron ``num_floating_point_operations``).
        """
        h = self.hidden_size
        if self.attention == "mla":
            a = self.num_attention_heads
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank * a * qk
            else:
                q = h * a * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv += self.kv_lora_rank * a * (self.qk_nope_head_dim + self.v_head_dim)
            proj = q + kv + a * self.v_head_dim * h
        else:
            proj = h * (self.q_width + self.kv_width + self.attn_out_width)
        return 2.0 * proj + self.core_attention_flops_per_token(seq_len)

    def core_attention_flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs of causal core attention per token (QK^T + PV, halved by the mask)."""
        return 2.0 * seq_len * (self.q_width + self.attn_out_width) / 2.0

    def mlp_flops_per_token(self, ffn_hidden_size: int) -> float:
        return 2.0 * self.mlp_matrices * self.hidden_size * ffn_hidden_size

    @property
    def moe_mlp_flops_per_token(self) -> float:
        """Forward FLOPs of one MoE MLP per token: top-k routed + shared experts + router."""
        flops = self.moe_top_k * self.mlp_flops_per_token(self.expert_ffn_hidden_size)
        if self.shared_expert_ffn_hidden_size:
            flops += self.mlp_flops_per_token(self.shared_expert_ffn_hidden_size)
        return flops + 2.0 * self.hidden_size * self.num_experts

    def forward_flops_per_token(self, seq_len: int) -> float:
        """Model forward FLOPs per token (causal attention, logits included)."""
        attention = self.num_layers * self.attention_flops_per_token(seq_len)
        mlp = self.num_dense_layers * self.mlp_flops_per_token(self.ffn_hidden_size)
        mlp += self.num_moe_layers * self.moe_mlp_flops_per_token
        logits = 2.0 * self.hidden_size * self.vocab_size
        return attention + mlp + logits

    def flops_per_token(self, seq_len: int) -> float:
        """Model training FLOPs per token: 3x forward (fwd, dgrad, wgrad), no recompute.

        This is the numerator of MFU, as Megatron-LM counts it.
        """
        return 3.0 * self.forward_flops_per_token(seq_len)


# The model-card facts of ModelSpec (autotune.simulators.model_card): the launch files write them
# and no simulator prices them, so the dataset's architecture columns and a stored study's
# fingerprint leave them out.
CARD_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(ModelSpec) if f.metadata.get("card")
)
