"""The job a simulator prices: model architecture, cluster and training settings.

All three are frozen values. Derived quantities (parameter counts, FLOPs per token) are
properties computed from the fields, following Megatron-LM's own accounting
(``megatron/training/training.py::num_floating_point_operations`` and
``theoretical_memory_usage.py``; docs/reference.md sections 2 and 3.1).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field

from autotune.simulators._checks import require_at_least
from autotune.simulators._checks import require_at_most
from autotune.simulators._checks import require_bools
from autotune.simulators._checks import require_choice
from autotune.simulators._checks import require_fraction
from autotune.simulators._checks import require_integers
from autotune.simulators._checks import require_name
from autotune.simulators._checks import require_non_negative
from autotune.simulators._checks import require_numbers
from autotune.simulators._checks import require_positive
from autotune.simulators.errors import SpecError
from autotune.simulators.frameworks import CP_COMM_TYPES
from autotune.simulators.frameworks import MOE_DISPATCHERS
from autotune.simulators.frameworks import FrameworkSpec
from autotune.simulators.limits import MAX_BATCH
from autotune.simulators.limits import MAX_DEVICES
from autotune.simulators.limits import MAX_EXPERTS
from autotune.simulators.limits import MAX_GBPS
from autotune.simulators.limits import MAX_LATENCY_US
from autotune.simulators.limits import MAX_LAYERS
from autotune.simulators.limits import MAX_MEMORY_GIB
from autotune.simulators.limits import MAX_SEQ_LEN
from autotune.simulators.limits import MAX_SM_COUNT
from autotune.simulators.limits import MAX_TFLOPS
from autotune.simulators.limits import MAX_VOCAB
from autotune.simulators.limits import MAX_WIDTH
from autotune.simulators.limits import MIN_GBPS
from autotune.simulators.limits import MIN_MEMORY_GBPS
from autotune.simulators.limits import MIN_MEMORY_GIB
from autotune.simulators.limits import MIN_TFLOPS
from autotune.simulators.model_card import CARD
from autotune.simulators.model_card import check_card

__all__ = ["CARD_FIELDS", "ClusterSpec", "DeviceSpec", "LinkSpec", "ModelSpec", "TrainSpec"]

ACTIVATIONS = ("swiglu", "gelu")
ATTENTIONS = ("gqa", "mla")
# fp8: bf16 mixed precision whose linear-layer GEMMs run in FP8 (Transformer Engine).
PRECISIONS = ("bf16", "fp16", "fp32", "fp8")
# Measured tables of GEMM throughput by shape that a device may name
# (autotune.simulators.gemm_table).
GEMM_TABLES = ("xla_h100", "xla_b200")
# TrainSpec's settings of the run that measurement rows and probe files may carry (empty: the
# default); each is a field of TrainSpec.
RUN_SETTINGS = (
    "dropout",
    "grad_reduce_in_fp32",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "tp_comm_overlap",
    "moe_dispatcher",
    "moe_a2a_overlap",
    "cp_comm_type",
)
OPTIMIZERS = ("adam",)
# Megatron's --attention-dropout and --hidden-dropout default (arguments.py), which its GPT-family
# scripts keep (docs/reference.md 3.3).
MEGATRON_DROPOUT = 0.1
TOPOLOGIES = ("switch", "full_mesh")


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


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSpec:
    """One accelerator: dense peak matrix throughput, achievable fraction, HBM."""

    name: str
    bf16_tflops: float
    fp16_tflops: float
    fp32_tflops: float
    memory_gib: float
    memory_gbps: float
    matmul_efficiency: float
    memory_efficiency: float
    # Whether fused (flash) attention kernels exist for this device (False on V100).
    supports_flash_attention: bool = True
    # Dense FP8 peak (0: no FP8 tensor cores), and how many FP8 copies of each FP8-GEMM weight
    # Transformer Engine caches (2 on Hopper: rowwise and transposed; 1 on Blackwell).
    fp8_tflops: float = 0.0
    fp8_weight_copies: int = 0
    # The fraction of the FP8 peak that FP8 GEMMs of the best shapes reach, where it differs
    # from matmul_efficiency (None: the same fraction as the device's other GEMMs).
    fp8_matmul_efficiency: float | None = None
    # Streaming multiprocessors, for the tile and wave quantization of GEMM shapes
    # (autotune.simulators.gemm_waves); None where matmul_efficiency already includes those losses
    # or the device's tiling is not modelled.
    sm_count: int | None = None
    # A measured table of GEMM throughput by shape (GEMM_TABLES), the other way to price
    # shapes; None: every shape at matmul_efficiency (or the waves of sm_count).
    gemm_table: str | None = None
    # What a training process cannot allocate before the framework's first tensor, in GiB: the
    # part of memory_gib the driver does not expose and the CUDA/CANN context.
    runtime_memory_gib: float = 0.0

    def __post_init__(self) -> None:
        owner = f"device {self.name!r}"
        require_name(owner, self.name)
        tflops = {
            "bf16_tflops": self.bf16_tflops,
            "fp16_tflops": self.fp16_tflops,
            "fp32_tflops": self.fp32_tflops,
            "fp8_tflops": self.fp8_tflops,
        }
        require_numbers(
            owner,
            **tflops,
            memory_gib=self.memory_gib,
            memory_gbps=self.memory_gbps,
            matmul_efficiency=self.matmul_efficiency,
            memory_efficiency=self.memory_efficiency,
        )
        require_integers(owner, fp8_weight_copies=self.fp8_weight_copies)
        require_bools(owner, supports_flash_attention=self.supports_flash_attention)
        if self.sm_count is not None:
            require_integers(owner, sm_count=self.sm_count)
            require_positive(owner, sm_count=self.sm_count)
            require_at_most(owner, MAX_SM_COUNT, "a B200 has 148", sm_count=self.sm_count)
        if self.gemm_table is not None:
            require_choice(owner, "gemm_table", self.gemm_table, GEMM_TABLES)
            if self.sm_count is not None:
                raise SpecError(f"{owner}: set sm_count or gemm_table, not both")
        require_positive(
            owner,
            fp16_tflops=self.fp16_tflops,
            fp32_tflops=self.fp32_tflops,
            memory_gib=self.memory_gib,
            memory_gbps=self.memory_gbps,
        )
        require_non_negative(
            owner,
            bf16_tflops=self.bf16_tflops,
            fp8_tflops=self.fp8_tflops,
            fp8_weight_copies=self.fp8_weight_copies,
        )
        require_at_most(owner, MAX_TFLOPS, "a B200 gives 4.5e3 in FP8", **tflops)
        require_at_least(
            owner,
            MIN_TFLOPS,
            "a V100 gives 15.7 in FP32; 0 where the device has none",
            **{k: v for k, v in tflops.items() if v != 0},
        )
        require_at_most(
            owner, MAX_MEMORY_GIB, "the largest HBM is 288 GB", memory_gib=self.memory_gib
        )
        require_at_least(owner, MIN_MEMORY_GIB, "a T4 has 16 GB", memory_gib=self.memory_gib)
        require_numbers(owner, runtime_memory_gib=self.runtime_memory_gib)
        require_non_negative(owner, runtime_memory_gib=self.runtime_memory_gib)
        if self.runtime_memory_gib >= self.memory_gib:
            raise SpecError(
                f"{owner}: runtime_memory_gib={self.runtime_memory_gib} leaves nothing of "
                f"memory_gib={self.memory_gib}; it must be below it"
            )
        require_at_most(owner, MAX_GBPS, "HBM3e gives 8e3", memory_gbps=self.memory_gbps)
        require_at_least(owner, MIN_MEMORY_GBPS, "a T4 gives 320", memory_gbps=self.memory_gbps)
        require_at_most(
            owner,
            2,
            "Transformer Engine keeps at most two",
            fp8_weight_copies=self.fp8_weight_copies,
        )
        require_fraction(
            owner,
            matmul_efficiency=self.matmul_efficiency,
            memory_efficiency=self.memory_efficiency,
        )
        if self.fp8_matmul_efficiency is not None:
            require_numbers(owner, fp8_matmul_efficiency=self.fp8_matmul_efficiency)
            require_fraction(owner, fp8_matmul_efficiency=self.fp8_matmul_efficiency)
            if not self.fp8_tflops:
                raise SpecError(
                    f"{owner}: fp8_matmul_efficiency is set but the device has no FP8 tensor "
                    "cores (fp8_tflops=0); set fp8_tflops or leave fp8_matmul_efficiency unset"
                )

    def gemm_efficiency(self, dtype: str) -> float:
        """The fraction of ``dtype``'s peak that GEMMs of the best shapes reach."""
        if dtype == "fp8" and self.fp8_matmul_efficiency is not None:
            return self.fp8_matmul_efficiency
        return self.matmul_efficiency

    @property
    def achieved_memory_bytes_per_s(self) -> float:
        """HBM bandwidth that memory-bound kernels reach (bytes/s)."""
        return self.memory_gbps * 1e9 * self.memory_efficiency

    def runs_as(self, dtype: str) -> str:
        """The dtype a step asking for ``dtype`` runs in here: fp16 for bf16 on a device
        without bf16 (V100, Ascend 910: ``bf16_tflops`` 0), else ``dtype``. The simulators
        price that dtype's peak (:meth:`peak_flops`) and the launch files run it."""
        return "fp16" if dtype == "bf16" and not self.bf16_tflops else dtype

    def peak_flops(self, dtype: str) -> float:
        """Dense peak matrix FLOP/s of GEMMs in ``dtype``, as the device runs it
        (:meth:`runs_as`: V100 has no bf16, its fp16).

        Raises:
            SpecError: ``fp8`` on a device without FP8 tensor cores.
        """
        if dtype == "fp8":
            if not self.fp8_tflops:
                raise SpecError(f"device {self.name!r} has no FP8 tensor cores (fp8_tflops=0)")
            return self.fp8_tflops * 1e12
        tflops = {"bf16": self.bf16_tflops, "fp16": self.fp16_tflops, "fp32": self.fp32_tflops}
        return tflops[self.runs_as(dtype)] * 1e12


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSpec:
    """One level of the network, per device and per direction.

    ``bandwidth_gbps`` is what one device can send at once on this level (GB/s, one
    direction). On a ``full_mesh`` (Ascend HCCS) each peer has its own link of
    ``peer_link_gbps``, so a group of n devices in the node uses only n-1 links;
    ``mesh_size`` devices form one mesh (4 on the older Ascend 910 node, whose two meshes talk
    through ``cross_mesh_gbps`` of PCIe). ``efficiency`` is the achievable fraction (busbw /
    link bandwidth) of the collective library; ``latency_us`` is the fixed cost of one
    collective call on this level (launch and synchronisation); ``step_latency_us`` what each
    further member of the group adds to it (the slope of a measured latency curve: NCCL's rings
    take n - 1 steps per pass), 0 where no curve was measured. ``whole_node_gbps`` (between
    nodes) is the measured bus bandwidth of a collective whose communicator holds every
    device of its nodes, where the collective library cannot spread it over the node's NICs;
    0: every member adds its own ``bandwidth_gbps x efficiency`` (groups with fewer members
    per node always do).
    """

    bandwidth_gbps: float
    latency_us: float
    efficiency: float
    step_latency_us: float = 0.0
    whole_node_gbps: float = 0.0
    topology: str = "switch"
    peer_link_gbps: float = 0.0
    mesh_size: int = 0
    cross_mesh_gbps: float = 0.0

    def __post_init__(self) -> None:
        rates = {
            "bandwidth_gbps": self.bandwidth_gbps,
            "peer_link_gbps": self.peer_link_gbps,
            "cross_mesh_gbps": self.cross_mesh_gbps,
            "whole_node_gbps": self.whole_node_gbps,
        }
        latencies = {"latency_us": self.latency_us, "step_latency_us": self.step_latency_us}
        require_numbers("link", **rates, **latencies, efficiency=self.efficiency)
        require_integers("link", mesh_size=self.mesh_size)
        require_positive("link", bandwidth_gbps=self.bandwidth_gbps)
        require_non_negative(
            "link",
            **latencies,
            peer_link_gbps=self.peer_link_gbps,
            mesh_size=self.mesh_size,
            cross_mesh_gbps=self.cross_mesh_gbps,
            whole_node_gbps=self.whole_node_gbps,
        )
        require_at_most("link", MAX_GBPS, "NVLink 5 gives 900", **rates)
        require_at_least(
            "link",
            MIN_GBPS,
            "1 Gbit Ethernet gives 0.125; 0 where unused",
            **{k: v for k, v in rates.items() if v != 0 or k == "bandwidth_gbps"},
        )
        require_at_most("link", MAX_LATENCY_US, "10 s per call", **latencies)
        require_at_most("link", MAX_DEVICES, "the largest clusters", mesh_size=self.mesh_size)
        require_fraction("link", efficiency=self.efficiency)
        require_choice("link", "topology", self.topology, TOPOLOGIES)
        if self.topology == "full_mesh":
            require_positive("full-mesh link", peer_link_gbps=self.peer_link_gbps)

    def group_bandwidth_gbps(self, members: int) -> float:
        """Achievable per-device bandwidth (GB/s) when ``members`` devices of a node talk.

        A switch gives every device its full bandwidth; a full mesh gives a group of n only
        its n-1 direct links (docs/reference.md 1.5: model TP=2 or 4 on 910B with (n-1)*28 GB/s).
        """
        if self.topology == "switch" or members <= 1:
            return self.bandwidth_gbps * self.efficiency
        mesh = self.mesh_size or members
        peers = min(members, mesh) - 1
        bandwidth = min(peers * self.peer_link_gbps, self.bandwidth_gbps)
        if members > mesh and self.cross_mesh_gbps:
            bandwidth = min(bandwidth, self.cross_mesh_gbps * members / (members - mesh))
        return bandwidth * self.efficiency


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    """Nodes of identical devices: an intra-node link level and an inter-node one."""

    name: str
    device: DeviceSpec
    devices_per_node: int
    num_nodes: int
    intra_node: LinkSpec
    inter_node: LinkSpec
    # The framework a job on this cluster runs unless train.framework names another
    # (a name of conf/framework/: mindspeed on Ascend, megatron_core on NVIDIA GPUs).
    default_framework: str = "megatron_core"
    # The measured sources (autotune/dataset/) whose rows on this cluster some of its constants
    # were fit on; the benchmark scores those rows apart as in-sample (docs/accuracy.md says which
    # constants and how).
    fitted_on: tuple[str, ...] = ()
    # Device memory the collective library (NCCL, HCCL) keeps per communicator a rank runs
    # collectives or sends on, in GiB.
    communicator_buffer_gib: float = 0.0
    # Devices of one host (one operating system, one torchrun), where a "node" is a larger
    # NVLink domain: a GB200 NVL72 rack is 18 hosts of 4 GPUs. None: a host is a node.
    devices_per_host: int | None = None

    def __post_init__(self) -> None:
        owner = f"cluster {self.name!r}"
        require_name(owner, self.name)
        if isinstance(self.fitted_on, str) or not isinstance(self.fitted_on, Sequence):
            raise SpecError(f"{owner}: fitted_on={self.fitted_on!r} must be a list of sources")
        for source in self.fitted_on:
            require_name(f"{owner} fitted_on", source)
        object.__setattr__(self, "fitted_on", tuple(self.fitted_on))  # a list from a config
        sizes = {"devices_per_node": self.devices_per_node, "num_nodes": self.num_nodes}
        require_integers(owner, **sizes)
        require_positive(owner, **sizes)
        require_numbers(owner, communicator_buffer_gib=self.communicator_buffer_gib)
        require_non_negative(owner, communicator_buffer_gib=self.communicator_buffer_gib)
        if self.devices_per_host is not None:
            require_integers(owner, devices_per_host=self.devices_per_host)
            require_positive(owner, devices_per_host=self.devices_per_host)
            if self.devices_per_node % self.devices_per_host:
                raise SpecError(
                    f"{owner}: devices_per_host={self.devices_per_host} does not divide "
                    f"devices_per_node={self.devices_per_node}; a node is whole hosts"
                )
        require_at_most(
            owner,
            self.device.memory_gib,
            "the device's memory",
            communicator_buffer_gib=self.communicator_buffer_gib,
        )
        if self.num_devices > MAX_DEVICES:
            raise SpecError(
                f"{owner}: num_nodes={self.num_nodes} x devices_per_node="
                f"{self.devices_per_node} = {self.num_devices:,} devices; at most "
                f"{MAX_DEVICES:,} (the largest clusters have ~2e5)"
            )

    @property
    def num_devices(self) -> int:
        return self.devices_per_node * self.num_nodes

    @property
    def processes_per_host(self) -> int:
        """Training processes one launcher starts on a host: one per device of the host."""
        return self.devices_per_host or self.devices_per_node

    @property
    def num_hosts(self) -> int:
        return self.num_devices // self.processes_per_host


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainSpec:
    """One training step: the framework that runs it, sequence, global batch, precision.

    ``framework`` is the software stack and how it is run (pipeline splits, gradient
    reduction, pipeline sends, FP8). ``precision`` ``fp8`` is bf16 mixed precision whose
    linear-layer GEMMs run in FP8 through Transformer Engine (attention, the output layer and
    everything else stay bf16). ``flash_attention`` says whether the stack runs fused attention
    (Megatron ``--use-flash-attn``, TransformerEngine); without it, Megatron's unfused path
    keeps the [s, s] scores of every head in memory (baddbmm, masked softmax, dropout, bmm).
    ``grad_reduce_in_fp32`` says whether half-precision gradients are accumulated and reduced
    over data parallelism in fp32 (Megatron's ``--grad-reduce-in-bf16`` turns it off, NeMo's
    ``grad_reduce_in_fp32``, Apex's ``grad_sync_dtype``); ``overlap_grad_reduce`` whether that
    reduction runs in buckets during the last micro-batch's backward (Megatron's
    ``--overlap-grad-reduce``) or after the pipeline, ``overlap_param_gather`` whether the
    distributed optimizer's parameter all-gather hides in the next forward
    (``--overlap-param-gather``, which needs the former); ``tp_comm_overlap`` whether tensor-
    parallel collectives run overlapped with the GEMMs (Megatron's ``--tp-comm-overlap``,
    MindSpeed's ``--use-ascend-coc``). None: the framework's default. ``moe_dispatcher`` is how
    MoE tokens reach their experts (:data:`autotune.simulators.frameworks.MOE_DISPATCHERS`; None:
    the framework's default, ``alltoall`` for every stack): ``alltoall`` (a copy per routed
    expert), ``allgather`` (every token gathered over the TP x EP group, Megatron-LM's
    command-line default) or ``deepep`` (Megatron-Core's ``flex`` dispatcher with
    DeepEP: one copy per destination node, forwarded over the node's links there).
    ``moe_a2a_overlap`` runs each micro-batch's expert all-to-all under another micro-batch's
    compute (Megatron-Core's ``--overlap-moe-expert-parallel-comm`` with
    ``--delay-wgrad-compute``). ``cp_comm_type`` is how context parallelism exchanges the
    sequence (:data:`autotune.simulators.frameworks.CP_COMM_TYPES`: the ``p2p`` ring or ``a2a``
    Ulysses); None: the framework's default. ``dropout`` is the probability of Megatron's
    ``--attention-dropout`` and ``--hidden-dropout`` (every recipe sets both alike); None: the
    model's recipe (:meth:`drops_out`).
    """

    framework: FrameworkSpec
    seq_len: int
    global_batch_size: int
    precision: str = "bf16"
    optimizer: str = "adam"
    flash_attention: bool = True
    grad_reduce_in_fp32: bool | None = None
    overlap_grad_reduce: bool | None = None
    overlap_param_gather: bool | None = None
    tp_comm_overlap: bool | None = None
    moe_dispatcher: str | None = None
    moe_a2a_overlap: bool = False
    cp_comm_type: str | None = None
    dropout: float | None = None

    def uses_flash_attention(self, cluster: ClusterSpec) -> bool:
        """Fused attention when the run asks for it, the framework has it and the device has
        the kernels."""
        return (
            self.flash_attention
            and self.framework.flash_attention
            and cluster.device.supports_flash_attention
        )

    def __post_init__(self) -> None:
        sizes = {"seq_len": self.seq_len, "global_batch_size": self.global_batch_size}
        require_integers("train", **sizes)
        require_bools(
            "train", flash_attention=self.flash_attention, moe_a2a_overlap=self.moe_a2a_overlap
        )
        defaulted = {  # None: the framework's default
            "grad_reduce_in_fp32": self.grad_reduce_in_fp32,
            "overlap_grad_reduce": self.overlap_grad_reduce,
            "overlap_param_gather": self.overlap_param_gather,
            "tp_comm_overlap": self.tp_comm_overlap,
        }
        require_bools("train", **{key: v for key, v in defaulted.items() if v is not None})
        self._check_dropout()
        require_positive("train", **sizes)
        require_at_most(
            "train", MAX_SEQ_LEN, "the longest contexts are ~1e7", seq_len=self.seq_len
        )
        require_at_most(
            "train",
            MAX_BATCH,
            "published batches are < 1e5 sequences",
            global_batch_size=self.global_batch_size,
        )
        require_choice("train", "precision", self.precision, PRECISIONS)
        require_choice("train", "optimizer", self.optimizer, OPTIMIZERS)
        self._check_dp_overlap()
        if self.moe_dispatcher is not None:
            require_choice("train", "moe_dispatcher", self.moe_dispatcher, MOE_DISPATCHERS)
        if self.token_dispatcher not in self.framework.moe_dispatchers:
            raise SpecError(
                f"train: moe_dispatcher {self.token_dispatcher} does not run on framework "
                f"{self.framework.name!r}; it has {', '.join(self.framework.moe_dispatchers)}"
            )
        if self.moe_a2a_overlap and not self.framework.moe_a2a_overlap:
            raise SpecError(
                "train: moe_a2a_overlap needs Megatron-Core's "
                f"--overlap-moe-expert-parallel-comm; framework {self.framework.name!r} has none "
                "(use false)"
            )
        if self.moe_a2a_overlap and self.precision == "fp32":
            raise SpecError(
                "train: moe_a2a_overlap needs a bf16, fp16 or fp8 step (Megatron asserts)"
            )
        if self.moe_a2a_overlap and self.token_dispatcher == "allgather":
            raise SpecError(
                "train: moe_a2a_overlap needs the alltoall or deepep dispatcher (Megatron "
                "asserts); moe_dispatcher is allgather"
            )
        if self.fp8 and not self.framework.fp8:
            raise SpecError(
                f"train: precision fp8 needs Transformer Engine FP8; framework "
                f"{self.framework.name!r} has none (use bf16)"
            )
        self._check_cp_comm()

    def _check_dropout(self) -> None:
        """Refuse a dropout probability outside [0, 1)."""
        if self.dropout is None:
            return
        require_numbers("train", dropout=self.dropout)
        if not 0 <= self.dropout < 1:
            raise SpecError(
                f"train: dropout={self.dropout!r} must be a probability in [0, 1) (0: no "
                "dropout; null: the model's recipe, 0.1 for Megatron's GPT family, else 0)"
            )

    def dropout_of(self, model: ModelSpec) -> float:
        """The dropout probability of the layers: the run's ``dropout``, else the model's
        recipe. Megatron's defaults are 0.1, which its GPT-family scripts keep; the recipes of
        every other family set 0 (docs/reference.md 3.3)."""
        if self.dropout is None:
            return MEGATRON_DROPOUT if model.is_gpt_family else 0.0
        return float(self.dropout)

    @property
    def softmax_in_fp32(self) -> bool:
        """Whether an unfused attention runs PyTorch's softmax in fp32: the sequence is past
        the framework's fused scale-mask-softmax kernel (docs/reference.md 3.3)."""
        return self.seq_len > self.framework.fused_softmax_max_seq

    def drops_out(self, model: ModelSpec) -> bool:
        """Whether the layers apply dropout. At 0, PyTorch's dropout returns its input: no
        kernel, no mask."""
        return self.dropout_of(model) > 0

    def _check_cp_comm(self) -> None:
        """Refuse a context-parallel exchange that is unknown or that the framework lacks."""
        if self.cp_comm_type is None:
            return
        require_choice("train", "cp_comm_type", self.cp_comm_type, CP_COMM_TYPES)
        runs = self.framework.cp_comm_types
        if self.cp_comm_type not in runs:
            allowed = f"use {' or '.join(runs)}" if runs else "it has no context parallelism"
            raise SpecError(
                f"train: cp_comm_type {self.cp_comm_type} is not run by framework "
                f"{self.framework.name!r} ({allowed})"
            )

    def _check_dp_overlap(self) -> None:
        """Refuse a data-parallel overlap that the framework or Megatron's rules cannot run."""
        if self.overlap_grad_reduce and not self.framework.can_overlap_grad_reduce:
            raise SpecError(
                f"train: overlap_grad_reduce needs gradients reduced in buckets during the "
                f"backward (Megatron-Core's DDP); framework {self.framework.name!r} reduces them "
                "after the pipeline (use false)"
            )
        if self.overlap_param_gather and not self.overlaps_grad_reduce:
            raise SpecError(
                "train: overlap_param_gather needs overlap_grad_reduce (Megatron asserts "
                "--overlap-param-gather only with --overlap-grad-reduce)"
            )

    @property
    def fp8(self) -> bool:
        """Whether the linear-layer GEMMs run in FP8."""
        return self.precision == "fp8"

    @property
    def compute_dtype(self) -> str:
        """The dtype of activations and of every GEMM that is not an FP8 linear layer."""
        return "bf16" if self.fp8 else self.precision

    @property
    def reduces_grads_in_fp32(self) -> bool:
        """Whether the gradient buffer and its data-parallel reduction are fp32."""
        if self.grad_reduce_in_fp32 is None or self.precision == "fp32":
            return self.framework.grad_reduce_bytes(self.precision) == 4
        return self.grad_reduce_in_fp32

    def describe(self) -> str:
        """The framework, the precision and the settings the run gives explicitly, for headers
        (``megatron_core, fp8, bf16 gradients, TP overlap``)."""
        parts = [self.framework.name, self.precision]
        if not (self.flash_attention and self.framework.flash_attention):
            parts.append("unfused attention")
        if self.grad_reduce_in_fp32 is not None:
            parts.append(f"{'fp32' if self.grad_reduce_in_fp32 else 'bf16'} gradients")
        if self.overlap_grad_reduce is not None:
            parts.append("DP overlap" if self.overlap_grad_reduce else "no DP overlap")
        if self.overlap_param_gather is not None:
            parts.append("gather overlap" if self.overlap_param_gather else "no gather overlap")
        if self.tp_comm_overlap is not None:
            parts.append("TP overlap" if self.tp_comm_overlap else "no TP overlap")
        if self.moe_dispatcher is not None:
            parts.append(f"{self.moe_dispatcher} dispatch")
        if self.moe_a2a_overlap:
            parts.append("EP all-to-all overlap")
        if self.cp_comm_type is not None:
            parts.append(f"{self.cp_comm_type} CP")
        if self.dropout is not None:
            parts.append(f"dropout {self.dropout:g}" if self.dropout else "no dropout")
        return ", ".join(parts)

    @property
    def context_exchange(self) -> str:
        """How context parallelism exchanges the sequence: the run's ``cp_comm_type``, else
        the framework's default (``p2p`` where the framework has no CP; the rules refuse cp > 1
        there)."""
        return self.cp_comm_type or self.framework.cp_comm_type or CP_COMM_TYPES[0]

    @property
    def token_dispatcher(self) -> str:
        """How MoE tokens reach their experts (:data:`MOE_DISPATCHERS`; unset: the framework's
        default, the first of its ``moe_dispatchers``)."""
        return self.moe_dispatcher or self.framework.moe_dispatchers[0]

    @property
    def overlaps_grad_reduce(self) -> bool:
        """Whether the data-parallel gradient reduction runs in buckets during the last
        micro-batch's backward (else one collective after the pipeline)."""
        if self.overlap_grad_reduce is None:
            return self.framework.overlap_grad_reduce
        return self.overlap_grad_reduce

    @property
    def overlaps_param_gather(self) -> bool:
        """Whether the distributed optimizer's parameter all-gather hides in the next forward
        (only with the gradient overlap; unset: the framework's default)."""
        if self.overlap_param_gather is None:
            return self.framework.overlap_param_gather and self.overlaps_grad_reduce
        return self.overlap_param_gather

    @property
    def overlaps_tp_comm(self) -> bool:
        """Whether the run overlaps tensor-parallel collectives with the GEMMs (where the layout
        allows it: :meth:`simulators.Layout.hides_tp_comm`)."""
        if self.tp_comm_overlap is None:
            return self.framework.tp_comm_overlap
        return self.tp_comm_overlap

    @property
    def grad_reduce_bytes(self) -> float:
        """Bytes per element of the gradient buffer and of its data-parallel reduction."""
        return 4.0 if self.reduces_grads_in_fp32 else 2.0

    def check_on(self, cluster: ClusterSpec) -> None:
        """Refuse a step the cluster cannot run (FP8 on a device without FP8 tensor cores).

        Raises:
            SpecError: naming the device and what is allowed.
        """
        if self.fp8 and not cluster.device.fp8_tflops:
            raise SpecError(
                f"train: precision fp8 on {cluster.device.name}, which has no FP8 tensor cores; "
                f"allowed: {', '.join(p for p in PRECISIONS if p != 'fp8')}"
            )

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch_size
