"""The operator graph of one layer at per-rank shapes (plain data, no torch).

A :class:`LayerShape` says what one rank computes for one layer and one micro-batch; the
compile stage turns it into a :class:`LayerGraph` of :class:`Op` records (forward, backward)
with FLOPs and bytes, which the cost and timeline stages price without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import fields
from dataclasses import replace
from typing import Any

from autotune.simulators.job import Job
from autotune.simulators.layout import Layout
from autotune.simulators.recompute_modules import DEFAULT_MODULES
from autotune.simulators.recompute_modules import layer_modules
from autotune.simulators.specs import ModelSpec
from autotune.simulators.specs import TrainSpec
from autotune.simulators.specs import gpt_family

__all__ = [
    "COMM_CATEGORY",
    "COMPUTE_CATEGORIES",
    "LayerGraph",
    "LayerShape",
    "Op",
    "layer_shapes",
]

# Operator classes, each priced with its own efficiency (conf/simulator/hierarchical.yaml).
COMPUTE_CATEGORIES = ("matmul", "attention", "memory")
COMM_CATEGORY = "comm"


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    """One recorded operator, or one collective of a parallel group.

    Compute ops carry FLOPs as executed (``flops``, e.g. the score recompute inside a fused
    attention backward) and as Megatron counts them (``model_flops``), plus the bytes read and
    written. A collective (``category == "comm"``) names its ``group`` (``tp``, ``cp``, ``ep``,
    ``etp``) and ``bytes`` is its buffer as docs/reference.md 3.6 defines it (all-reduce,
    reduce-scatter and all-gather: the full buffer; all-to-all: the send buffer; ring: what one
    rank passes on in all steps together). ``overlap`` marks a collective that runs beside the
    next compute op.
    ``signature`` keys the profiled cost table: tensor shapes and the literal arguments.
    ``gemm`` is a matmul's ``(batch, rows, depth, cols)`` (an output of ``batch`` matrices of
    ``rows x cols``, each a sum over ``depth``), for its tile and wave quantization.
    ``scope``: the recomputed modules (other than core attention) the op runs inside, which
    selective recompute runs again (:attr:`LayerShape.recomputed`).
    """

    name: str
    category: str
    region: str
    flops: float = 0.0
    model_flops: float = 0.0
    bytes: float = 0.0
    dtype: str = ""
    signature: str = ""
    group: str = ""
    overlap: bool = False
    gemm: tuple[int, int, int, int] | None = None
    scope: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerShape:
    """What one rank computes for one layer kind and one micro-batch (hashable cache key).

    ``model`` is the architecture as :class:`~autotune.simulators.specs.ModelSpec` gives it
    (width, heads' size, norm, activation, attention, MLA ranks, experts); the other fields are
    this rank's shares of it under the layout and the run's settings. ``tokens`` is the
    micro-batch's sequence share of this rank before any gather (``b * s / cp``, divided by
    ``sp`` with sequence parallelism); ``seq_q`` is this rank's query length ``s / cp`` (the CP
    ring brings keys and values of all ``s``). Heads, FFN widths and the vocabulary are already
    divided by TP, the routed experts' FFN width by ``etp`` (expert tensor parallelism, TP
    unless the layout sets its own: :attr:`simulators.Layout.expert_tp`); ``local_experts``
    by EP. ``expert_tokens`` is the number of token copies each local expert receives
    (balanced top-k routing: :attr:`routed_copies`); ``moe_weighted_activation``: the experts
    weight their activation by the router's probabilities
    (:class:`autotune.simulators.frameworks.FrameworkSpec`), else the combine does.
    ``moe_allgather``: the tokens reach the experts by the ``allgather`` dispatcher (gathered
    over ETP x EP) instead of an all-to-all. ``dropout``: the residual adds apply
    hidden dropout (:meth:`simulators.TrainSpec.drops_out`); ``flash_attention`` picks the fused
    kernel or Megatron's unfused path (which records ``attention_dropout`` when set, and
    PyTorch's fp32 softmax with ``softmax_in_fp32``, where the fused kernel does not take the
    scores);
    ``flash_output_copy``: the output projection reads a rearranged copy of the kernel's output
    (Megatron-DeepSpeed), ``flash_input_copy``: the kernel reads copies of Q, K and V;
    ``gqa_repeats_kv``: K and V are copied out to the query heads before attention;
    ``rope_kernel`` and ``swiglu_keeps_silu``: how RoPE and SwiGLU run
    (:class:`autotune.simulators.frameworks.FrameworkSpec`); ``fp8`` runs the linear layers'
    GEMMs in FP8, and ``fp8_kept`` saves their inputs quantized (Transformer Engine; else the
    high-precision input, as torchao).
    ``cp_comm`` is the CP exchange (``p2p`` ring or ``a2a`` Ulysses), ``cp_a2a_style`` how the
    framework builds the latter.
    ``recomputed``: the modules of this layer selective recompute checkpoints (core attention
    alone unless the layout names others: :mod:`autotune.simulators.recompute_modules`);
    ``fused_norm_linear``: a norm before a plain linear layer runs inside it (read by the
    ``mlp`` and ``layernorm`` checkpoints only).
    """

    kind: str
    micro_batch: int
    seq_q: int
    sp: int
    tp: int
    cp: int
    ep: int
    etp: int = 1
    model: ModelSpec  # the architecture; the fields below are this rank's shares of it
    dtype: str = "bf16"
    heads: int = 0
    kv_heads: int = 0
    ffn: int = 0
    local_experts: int = 0
    expert_ffn: int = 0
    expert_tokens: int = 0
    shared_ffn: int = 0
    moe_weighted_activation: bool = False
    moe_allgather: bool = False
    vocab: int = 0
    flash_attention: bool = True
    flash_output_copy: bool = False
    flash_input_copy: bool = False
    gqa_repeats_kv: bool = False
    rope_kernel: str = "fused"
    swiglu_keeps_silu: bool = False
    dropout: bool = False
    attention_dropout: bool = False
    softmax_in_fp32: bool = False
    fp8: bool = False
    fp8_kept: bool = False
    cp_comm: str = "p2p"
    cp_a2a_style: str | None = None
    recomputed: tuple[str, ...] = DEFAULT_MODULES
    fused_norm_linear: bool = False

    @property
    def gpt(self) -> bool:
        """GPT-2/3 family (:func:`autotune.simulators.specs.gpt_family`): learned positions,
        biases."""
        return gpt_family(self.model.norm, self.model.activation, self.model.qkv_bias)

    @property
    def tokens(self) -> int:
        """Tokens this rank holds at the layer boundary (sequence-parallel share)."""
        return self.micro_batch * self.seq_q // self.sp

    @property
    def expert_gathered(self) -> bool:
        """Whether the dispatcher all-gathers the routed copies over the expert-TP group and
        the combine reduce-scatters them back, as Megatron-Core's dispatchers do for ETP > 1
        (``gather_from_sequence_parallel_region`` over the expert-TP group). With ETP = TP and
        no SP the TP ranks hold the same tokens already: the experts read them in place, their
        input gradient and output all-reduced as a dense MLP's."""
        return self.sp > 1 or self.etp != self.tp

    @property
    def routed_copies(self) -> int:
        """Token copies this rank's experts receive together (balanced top-k routing): its
        tokens' ``top_k`` copies (an EP all-to-all sends as many as it receives), times
        ``etp`` where the expert-TP gather brings the other ranks' copies."""
        gathered = self.etp if self.expert_gathered else 1
        return self.model.moe_top_k * self.tokens * gathered

    def canonical(self) -> LayerShape:
        """This shape with the fields its kind does not read reset to their defaults.

        The embedding reads the token and vocabulary shares (and the head its final norm);
        a dense layer reads no expert field and not ``ep``. Layouts that differ only in the
        rest (an embedding under another FFN width, a dense layer under another EP) then
        share one compiled graph.
        """
        if self.kind in _ENDS:
            kept: dict[str, Any] = {
                f.name: getattr(self, f.name) for f in fields(self) if f.name in _ENDS[self.kind]
            }
            return LayerShape(cp=1, ep=1, **kept)
        if self.kind == "dense":
            return replace(self, **_DENSE_UNUSED)
        return self


# What the embedding and the head read of their shape (modules.Embedding, modules.Head).
_ENDS = {
    "embedding": {"kind", "micro_batch", "seq_q", "sp", "tp", "model", "vocab", "dtype"},
    "head": {"kind", "micro_batch", "seq_q", "sp", "tp", "model", "vocab", "dtype"},
}
# The defaults of what a dense layer does not read.
_DENSE_UNUSED: dict[str, Any] = {
    "ep": 1,
    "etp": 1,
    "local_experts": 0,
    "expert_ffn": 0,
    "expert_tokens": 0,
    "shared_ffn": 0,
    "vocab": 0,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerGraph:
    """Recorded operators of one layer for one micro-batch on one rank.

    ``saved_bytes`` are the activations autograd keeps from forward to backward (unique
    storages, weights excluded); ``selective_saved_bytes`` the same when core attention is
    recomputed; ``input_bytes`` the layer input that full recompute keeps. ``params`` and
    ``expert_params`` count this rank's weights (routed experts apart, for expert-DP).
    ``host_forward`` counts the Python-level torch calls of the forward (what the host issues
    in eager mode), ``host_backward`` the autograd nodes its backward runs; ``host_core`` the
    Python-level calls of core attention (what selective recompute issues again).
    ``host_modules`` and ``module_checkpoints`` count the calls and the checkpoints of the
    other recomputed modules (``shape.recomputed``).
    """

    shape: LayerShape
    forward: tuple[Op, ...]
    backward: tuple[Op, ...]
    saved_bytes: float
    selective_saved_bytes: float
    input_bytes: float
    params: int
    expert_params: int
    host_forward: int = 0
    host_backward: int = 0
    host_core: int = 0
    host_modules: int = 0
    module_checkpoints: int = 0

    @property
    def core_recomputed(self) -> bool:
        """Whether selective recompute checkpoints this layer's core attention."""
        return "core_attn" in self.shape.recomputed

    @property
    def selective_forward(self) -> tuple[Op, ...]:
        """Forward ops that selective recompute repeats: core attention's, where it is
        recomputed, and those of the other recomputed modules."""
        core = self.core_recomputed
        return tuple(op for op in self.forward if (core and op.region == "core") or op.scope)

    @property
    def host_selective(self) -> int:
        """Python-level calls of what selective recompute repeats."""
        return self.host_core * self.core_recomputed + self.host_modules

    @property
    def selective_checkpoints(self) -> int:
        """Activation checkpoints of this layer under selective recompute."""
        return int(self.core_recomputed) + self.module_checkpoints

    def model_flops(self) -> float:
        """Forward plus backward FLOPs as Megatron counts them (no recompute)."""
        return sum(op.model_flops for op in self.forward + self.backward)


# size: one keyword per LayerShape field, each derived from the job in one line
def layer_shapes(job: Job, layout: Layout) -> dict[str, LayerShape]:
    """Per-rank shapes of every layer kind of the job's model under ``layout``.

    Attention is fused (flash) where the job runs it (``Job.flash_attention``); otherwise
    Megatron's unfused path, with its attention dropout where the run drops out
    (:meth:`simulators.TrainSpec.drops_out`, as the hidden dropout).

    Keys: ``embedding``, ``head``, and ``dense`` and/or ``moe`` for the decoder layers.
    TP divides heads (KV heads replicate when TP exceeds them), FFN widths and the vocabulary;
    SP and CP divide the sequence; EP divides the routed experts and ETP their FFN width (the
    shared experts are a dense MLP, split by TP).
    """
    model, train = job.model, job.train
    tp, cp = layout.tp, layout.cp
    flash = job.flash_attention
    dropout = train.drops_out(model)
    seq_q = train.seq_len // cp
    base = LayerShape(
        kind="dense",
        micro_batch=layout.micro_batch,
        seq_q=seq_q,
        sp=tp if layout.sequence_parallel else 1,
        tp=tp,
        cp=cp,
        cp_comm=train.context_exchange if cp > 1 else "p2p",
        cp_a2a_style=train.framework.cp_a2a_style if cp > 1 else None,
        ep=layout.ep,
        etp=layout.expert_tp,
        model=model,
        dtype=train.compute_dtype,
        fp8=train.fp8,
        fp8_kept=train.fp8_kept,
        heads=model.num_attention_heads // tp,
        kv_heads=(
            model.num_attention_heads // tp
            if model.attention == "mla"
            else max(1, model.num_kv_heads // tp)
        ),
        ffn=model.ffn_hidden_size // tp,
        flash_attention=flash,
        flash_output_copy=flash and train.framework.flash_output_copy,
        flash_input_copy=flash and train.framework.flash_input_copy,
        gqa_repeats_kv=train.framework.gqa_repeats_kv,
        rope_kernel=train.framework.rope_kernel,
        swiglu_keeps_silu=train.framework.swiglu_keeps_silu,
        dropout=dropout,
        attention_dropout=dropout and not flash,
        softmax_in_fp32=not flash and train.softmax_in_fp32(model, layout.micro_batch, tp),
        **_recompute_fields(layout, model, train, moe=False),
    )
    shapes = {
        "embedding": _only(base, kind="embedding", vocab=math.ceil(model.vocab_size / tp)),
        "head": _only(base, kind="head", vocab=math.ceil(model.vocab_size / tp)),
    }
    if model.num_dense_layers:
        shapes["dense"] = base
    if model.num_moe_layers:
        local = model.num_experts // layout.ep
        moe = _only(
            base,
            kind="moe",
            ffn=0,
            local_experts=local,
            expert_ffn=model.expert_ffn_hidden_size // layout.expert_tp,
            shared_ffn=model.shared_expert_ffn_hidden_size // tp,
            moe_weighted_activation=train.framework.moe_weighted_activation,
            moe_allgather=train.token_dispatcher == "allgather",
            **_recompute_fields(layout, model, train, moe=True),
        )
        shapes["moe"] = _only(moe, expert_tokens=math.ceil(moe.routed_copies / local))
    return shapes


def _recompute_fields(
    layout: Layout, model: ModelSpec, train: TrainSpec, moe: bool
) -> dict[str, Any]:
    """A layer kind's ``recomputed`` modules under selective recompute (core attention
    without it: what a layout recomputing none or all of it never reads), and
    ``fused_norm_linear`` where a checkpoint reads it, so that the graphs of layouts that
    name no module keep one cache key."""
    recomputed: tuple[str, ...] = DEFAULT_MODULES
    if layout.recompute == "selective":
        recomputed = layer_modules(layout.recomputed_modules, model, moe)
    reads_norms = "mlp" in recomputed or "layernorm" in recomputed
    return {
        "recomputed": recomputed,
        "fused_norm_linear": reads_norms and train.framework.fused_norm_linear,
    }


def _only(base: LayerShape, **changes: object) -> LayerShape:
    return replace(base, **changes)  # type: ignore[arg-type]
