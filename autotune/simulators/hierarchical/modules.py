"""Reference layer modules at per-rank shapes (Megatron-style TP, SP, CP, EP and ETP).

Each module is built from a :class:`~autotune.simulators.hierarchical.graph.LayerShape` on the meta
device. Tensors are ``[batch, tokens, hidden]``; TP collectives sit where Megatron puts them
(``gather``/``scatter`` with sequence parallelism, ``copy_to_region``/``reduce`` without), so
the recorded graph holds them in order.
"""

# size: the decoder layer's modules and the TP and expert-TP regions, FP8 linear and fused
# activations they share

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autotune.simulators.hierarchical.graph import LayerShape
from autotune.simulators.hierarchical.kernels import all_to_all
from autotune.simulators.hierarchical.kernels import copy_to_region
from autotune.simulators.hierarchical.kernels import core_attention
from autotune.simulators.hierarchical.kernels import gather
from autotune.simulators.hierarchical.kernels import reduce
from autotune.simulators.hierarchical.kernels import scatter
from autotune.simulators.hierarchical.kernels import unfused_attention
from autotune.simulators.hierarchical.record import _recorder

__all__ = ["DTYPES", "build_module"]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class RMSNorm(nn.Module):
    """RMSNorm as one fused kernel: recorded as a bias-free ``native_layer_norm``.

    The composite ``rms_norm`` decomposes into fp32 elementwise ops on the meta device, while
    Megatron and MindSpeed run a fused kernel that reads x once and keeps x and 1/rms.
    """

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight)


class _FP8Matmul(torch.autograd.Function):
    """An FP8 linear layer: GEMMs in FP8, the input saved quantized where ``kept``.

    Forward, input gradient and weight gradient run as FP8 GEMMs (recorded with dtype
    ``fp8``); their activation operands are cast first (the input in the forward, the output
    gradient in the backward: read bf16, write FP8). ``kept``: the input is kept for the weight
    gradient in FP8, 1 byte per element instead of 2 (Transformer Engine ``module/linear.py``;
    docs/reference.md 7.6); else the layer keeps its high-precision input and casts it again
    in the backward (torchao's ``matmul_with_hp_or_float8_args``, docs/decisions/0062).
    ``batched``: experts' ``[e, t, h]`` inputs against ``[e, h, f]`` weights; else
    ``x @ weight.T`` as ``F.linear``.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        batched: bool,
        kept: bool,
    ) -> torch.Tensor:
        recorder = _recorder()
        with recorder.fp8():
            if batched:
                out = torch.bmm(x, weight) if bias is None else torch.baddbmm(bias, x, weight)
            else:
                out = F.linear(x, weight, bias)
        if kept:
            quantized = x.to(torch.float8_e4m3fn)
            recorder.copy_regather(x, quantized)  # with SP: the FP8 local shard, gathered again
            ctx.save_for_backward(quantized, weight)
        else:
            ctx.save_for_backward(x, weight)
        ctx.batched, ctx.has_bias, ctx.dtype = batched, bias is not None, x.dtype
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        saved, weight = ctx.saved_tensors
        recorder = _recorder()
        grad_quantized = grad.to(torch.float8_e5m2)  # the output gradient, cast once for both
        if saved.dtype == ctx.dtype:  # the high-precision input (torchao), cast again
            saved = saved.to(torch.float8_e4m3fn)
        with recorder.paused():  # the FP8 GEMMs read the FP8 operands directly
            x = saved.to(ctx.dtype)
            grad = grad_quantized.to(ctx.dtype)
        with recorder.fp8():
            if ctx.batched:
                d_x = torch.bmm(grad, weight.transpose(1, 2))
                d_weight = torch.bmm(x.transpose(1, 2), grad)
            else:
                d_x = grad.matmul(weight)
                d_weight = grad.flatten(0, -2).t().matmul(x.flatten(0, -2))
        d_bias = None
        if ctx.has_bias:
            d_bias = grad.sum(dim=1, keepdim=True) if ctx.batched else grad.flatten(0, -2).sum(0)
        return d_x, d_weight, d_bias, None, None


class Linear(nn.Linear):
    """``nn.Linear`` that runs as a Transformer Engine FP8 layer when the step runs FP8."""

    def __init__(self, shape: LayerShape, width_in: int, width_out: int, bias: bool) -> None:
        super().__init__(width_in, width_out, bias=bias)
        self.fp8, self.fp8_kept = shape.fp8, shape.fp8_kept

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.fp8:
            return super().forward(x)
        out = _FP8Matmul.apply(x, self.weight, self.bias, False, self.fp8_kept)
        return out  # type: ignore[no-any-return]


def _grouped(shape: LayerShape, x: torch.Tensor, weight: torch.Tensor, bias: Any) -> torch.Tensor:
    """The experts' grouped GEMM ``x @ weight (+ bias)``, FP8 when the step runs FP8."""
    if shape.fp8:
        return _FP8Matmul.apply(x, weight, bias, True, shape.fp8_kept)  # type: ignore[no-any-return]
    return torch.bmm(x, weight) if bias is None else torch.baddbmm(bias, x, weight)


def _norm(shape: LayerShape, width: int) -> nn.Module:
    if shape.model.norm == "layernorm":
        return nn.LayerNorm(width)
    return RMSNorm(width)


def _enter(x: torch.Tensor, shape: LayerShape) -> torch.Tensor:
    """Into a TP region: all-gather the sequence (SP) or mark the input for a backward AR."""
    if shape.sp > 1:
        return gather(x, "tp", shape.tp)
    return copy_to_region(x, "tp", shape.tp)


def _leave(x: torch.Tensor, shape: LayerShape) -> torch.Tensor:
    """Out of a TP region: reduce-scatter (SP) or all-reduce the partial sums."""
    if shape.sp > 1:
        return scatter(x, "tp", shape.tp)
    return reduce(x, "tp", shape.tp)


def _expert_enter(x: torch.Tensor, shape: LayerShape) -> torch.Tensor:
    """Into the experts' TP region: the dispatcher's all-gather of the routed copies over the
    expert-TP group, kept whole by the experts (:attr:`LayerShape.expert_gathered`), or the
    TP ranks' shared tokens marked for a backward AR."""
    if shape.expert_gathered:
        return gather(x, "etp", shape.etp, regather=False)
    return copy_to_region(x, "etp", shape.etp)


def _expert_leave(x: torch.Tensor, shape: LayerShape) -> torch.Tensor:
    """Out of the experts' TP region: the combine's reduce-scatter of the partial sums over
    the expert-TP group, or their all-reduce where the TP ranks share the tokens."""
    if shape.expert_gathered:
        return scatter(x, "etp", shape.etp)
    return reduce(x, "etp", shape.etp)


def _core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: LayerShape) -> torch.Tensor:
    """Core attention: one fused (flash) kernel, or Megatron's unfused path."""
    if s.flash_attention:
        return core_attention(q, k, v, s.cp, s.cp_comm, s.cp_a2a_style)
    return unfused_attention(
        q, k, v, s.cp, s.attention_dropout, s.softmax_in_fp32, s.cp_comm, s.cp_a2a_style
    )


def _rope(x: torch.Tensor, table: torch.Tensor, kernel: str = "fused") -> torch.Tensor:
    """Rotary embedding as the stack runs it (``FrameworkSpec.rope_kernel``):
    ``x * cos + cat(-x2, x1) * sin`` as five operators (``halves``); ``x`` cast to fp32,
    multiplied as complex pairs and cast back (``complex``, stood in for by real operators of
    the same traffic); for the fused kernel, the stand-in ``x * cos + x * sin`` (three
    operators where the kernel is one: docs/decisions/0067 says why it stays)."""
    if kernel == "halves":
        first, second = x.chunk(2, dim=-1)
        return x * table + torch.cat([-second, first], dim=-1) * table
    if kernel == "complex":
        return (x.float() * table).to(x.dtype)  # the product is fp32 by type promotion
    return x * table + x * table


def _repeat_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    """``x`` [b, n, kv heads, d] copied out to ``heads`` heads (Megatron-DeepSpeed's
    ``repeat_kv``: expand, then a reshape that copies)."""
    b, n, groups, d = x.shape
    if groups == heads:
        return x
    return x[:, :, :, None, :].expand(b, n, groups, heads // groups, d).reshape(b, n, heads, d)


class Attention(nn.Module):
    """GQA/MHA self-attention with a fused QKV projection, heads split by TP.

    RoPE models rotate Q and K; the GPT family (``shape.gpt``) has learned absolute position
    embeddings instead (added once at the embedding, not per layer), so no rotary ops.
    """

    def __init__(self, shape: LayerShape) -> None:
        super().__init__()
        self.shape = shape
        m, heads, groups = shape.model, shape.heads, shape.kv_heads
        d = m.head_dim
        self.qkv = Linear(shape, m.hidden_size, (heads + 2 * groups) * d, bias=m.qkv_bias)
        self.out = Linear(shape, heads * d, m.hidden_size, bias=False)
        self.table: torch.Tensor
        self.register_buffer("table", torch.empty(shape.seq_q, 1, d), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, d = self.shape, self.shape.model.head_dim
        b, n, _ = x.shape
        q, k, v = self.qkv(x).split([s.heads * d, s.kv_heads * d, s.kv_heads * d], dim=-1)
        q = q.view(b, n, s.heads, d)
        k = k.view(b, n, s.kv_heads, d)
        v = v.view(b, n, s.kv_heads, d)
        if not s.gpt:
            q, k = _rope(q, self.table, s.rope_kernel), _rope(k, self.table, s.rope_kernel)
        if s.gqa_repeats_kv:
            k, v = _repeat_kv(k, s.heads), _repeat_kv(v, s.heads)
        if s.flash_input_copy:  # rearranged with .contiguous() for the kernel
            q, k, v = q.clone(), k.clone(), v.clone()
        context = _core(q, k.transpose(1, 2), v.transpose(1, 2), s)
        if s.flash_output_copy:  # rearranged with .contiguous() for the projection
            context = context.clone()
        return self.out(context)


class MLAttention(nn.Module):
    """DeepSeek multi-head latent attention; TP splits the heads, down-projections replicate."""

    def __init__(self, shape: LayerShape) -> None:
        super().__init__()
        self.shape = shape
        m, heads = shape.model, shape.heads
        h = m.hidden_size
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            self.q: nn.Module = nn.Sequential(
                Linear(shape, h, m.q_lora_rank, bias=False),
                RMSNorm(m.q_lora_rank),
                Linear(shape, m.q_lora_rank, heads * qk, bias=False),
            )
        else:
            self.q = Linear(shape, h, heads * qk, bias=False)
        self.kv_down = Linear(shape, h, m.kv_lora_rank + m.qk_rope_head_dim, bias=False)
        self.kv_norm = RMSNorm(m.kv_lora_rank)
        self.kv_up = Linear(
            shape, m.kv_lora_rank, heads * (m.qk_nope_head_dim + m.v_head_dim), bias=False
        )
        self.out = Linear(shape, heads * m.v_head_dim, h, bias=False)
        self.table: torch.Tensor
        self.register_buffer("table", torch.empty(shape.seq_q, 1, qk), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The ``mla_up_proj`` checkpoint (one, entered for the queries, then for keys and
        values) holds the up projections and RoPE (``multi_latent_attention.py``
        ``qkv_up_proj_and_rope_apply``): it keeps the latents and discards the queries,
        keys and values it gives core attention."""
        s = self.shape
        b, n, _ = x.shape
        qk = s.model.qk_nope_head_dim + s.model.qk_rope_head_dim
        recorder, up = _recorder(), "mla_up_proj" in s.recomputed
        q_latent, q_up = x, self.q
        if isinstance(self.q, nn.Sequential):  # down projection and norm, then up
            q_latent, q_up = self.q[1](self.q[0](x)), self.q[2]
        with recorder.checkpointed("mla_up_proj", up, q_latent) as discarded:
            q = _rope(q_up(q_latent).view(b, n, s.heads, qk), self.table)
            discarded.append(q)
        latent, k_rope = self.kv_down(x).split(
            [s.model.kv_lora_rank, s.model.qk_rope_head_dim], dim=-1
        )
        kv_latent = self.kv_norm(latent)
        with recorder.checkpointed("mla_up_proj", up, kv_latent, k_rope, once=False) as discarded:
            kv = self.kv_up(kv_latent).view(
                b, n, s.heads, s.model.qk_nope_head_dim + s.model.v_head_dim
            )
            k_nope, v = kv.split([s.model.qk_nope_head_dim, s.model.v_head_dim], dim=-1)
            k_rope = _rope(
                k_rope.view(b, n, 1, s.model.qk_rope_head_dim),
                self.table[..., : s.model.qk_rope_head_dim],
            )
            rope = k_rope.expand(b, n, s.heads, s.model.qk_rope_head_dim)
            k = torch.cat([k_nope, rope], dim=-1)
            discarded += [k, v]
        return self.out(_core(q, k.transpose(1, 2), v.transpose(1, 2), s))


class MLP(nn.Module):
    """Dense MLP: fused gate+up and SwiGLU, or GeLU with biases; width split by TP.

    The second projection's bias is not added here: Megatron's row-parallel linear returns it
    (``skip_bias_add``) for the bias-dropout-add after the TP reduction (``DecoderLayer``).
    """

    def __init__(self, shape: LayerShape, width: int) -> None:
        super().__init__()
        self.shape = shape
        self.swiglu = shape.model.activation == "swiglu"
        bias = not self.swiglu
        self.fc1 = Linear(
            shape, shape.model.hidden_size, width * (2 if self.swiglu else 1), bias=bias
        )
        self.fc2 = Linear(shape, width, shape.model.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(_activate(self.fc1(x), self.swiglu, self.shape.swiglu_keeps_silu))


class _SwiGLU(torch.autograd.Function):
    """Megatron's fused SwiGLU (``fused_bias_swiglu.SwiGLUFunction``; MindSpeed ``npu_swiglu``).

    One kernel that saves only its input ``[gate, up]``: the backward recomputes silu(gate), so
    silu's output is not kept (the composite ``F.silu(gate) * up`` would keep it as well).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        gate, up = x.chunk(2, dim=-1)
        d_up = grad * F.silu(gate)
        d_gate = torch.ops.aten.silu_backward(grad * up, gate)
        return torch.cat([d_gate, d_up], dim=-1)


class _WeightedSwiGLU(torch.autograd.Function):
    """Megatron-Core's ``WeightedSwiGLUFunction``: SwiGLU times each routed copy's router
    probability, one kernel that saves its input and the probabilities."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weights)
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up * weights

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, weights = ctx.saved_tensors
        gate, up = x.chunk(2, dim=-1)
        silu = F.silu(gate)
        d_up = grad * weights * silu
        d_gate = torch.ops.aten.silu_backward(grad * weights * up, gate)
        d_weights = (grad * silu * up).sum(dim=-1, keepdim=True)
        return torch.cat([d_gate, d_up], dim=-1), d_weights


def _activate(
    x: torch.Tensor, swiglu: bool, unfused: bool = False, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """The MLP activation; with ``weights``, times each routed copy's router probability.
    ``unfused``: SwiGLU as PyTorch operators, whose product keeps SiLU's output."""
    if swiglu and unfused:
        gate, up = x.chunk(2, dim=-1)
        out = F.silu(gate) * up
        return out if weights is None else out * weights
    if swiglu:
        with _recorder().fused():
            if weights is not None:
                return _WeightedSwiGLU.apply(x, weights)  # type: ignore[no-any-return]
            return _SwiGLU.apply(x)  # type: ignore[no-any-return]
    if weights is not None:
        return F.gelu(x) * weights
    return F.gelu(x)


def _bias_dropout_add(
    x: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor, dropout: bool
) -> torch.Tensor:
    """Megatron's ``bias_dropout_add``: residual + dropout(x + bias), one jit-fused call.

    With hidden dropout (where the run drops out: :meth:`simulators.TrainSpec.drops_out`) the
    1-byte mask is saved, the ``sbh`` dropout-mask term of Korthikanti et al. 2022 Table 2
    (twice per layer); without it, a plain residual add.
    """
    if bias is None and not dropout:
        return residual + x
    with _recorder().fused():
        if bias is not None:
            x = x + bias
        if dropout:
            x = torch.ops.aten.native_dropout(x, 0.1, True)[0]
        return residual + x


class Experts(nn.Module):
    """This rank's routed experts as one grouped GEMM (bmm over local experts), each expert's
    FFN width split by expert TP."""

    def __init__(self, shape: LayerShape) -> None:
        super().__init__()
        self.shape = shape
        self.swiglu = shape.model.activation == "swiglu"
        e, h, f = shape.local_experts, shape.model.hidden_size, shape.expert_ffn
        self.w1 = nn.Parameter(torch.empty(e, h, f * (2 if self.swiglu else 1)))
        self.w2 = nn.Parameter(torch.empty(e, f, h))
        self.b1 = None if self.swiglu else nn.Parameter(torch.empty(e, 1, f))
        self.b2 = None if self.swiglu else nn.Parameter(torch.empty(e, 1, h))

    def forward(self, x: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """``x``: [local experts, tokens each, hidden]; ``weights``: each copy's router
        probability, applied in the activation when given."""
        s = self.shape
        fc1 = _grouped(s, x, self.w1, self.b1)
        inputs = (fc1,) if weights is None else (fc1, weights)
        with _recorder().checkpointed("moe_act", "moe_act" in s.recomputed, *inputs) as out:
            hidden = _activate(fc1, self.swiglu, s.swiglu_keeps_silu, weights)
            out.append(hidden)  # linear_fc2's input, discarded (experts.py)
        return _grouped(s, hidden, self.w2, self.b2)


class MoE(nn.Module):
    """Router, top-k dispatch by EP all-to-all then an expert-TP gather (or the ETP x EP
    all-gather), local experts, combine; shared experts (a dense MLP over the attention TP).

    The router's probabilities weight the experts' activation (they travel with the tokens)
    or, where the framework does not (``moe_weighted_activation`` false), the combine, which
    then keeps the experts' outputs for their gradient."""

    def __init__(self, shape: LayerShape) -> None:
        super().__init__()
        self.shape = shape
        self.router = nn.Linear(shape.model.hidden_size, shape.model.num_experts, bias=False)
        self.experts = Experts(shape)
        self.shared = MLP(shape, shape.shared_ffn) if shape.shared_ffn else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.shape
        b, n, h = x.shape
        tokens = x.reshape(b * n, h)
        probs, index = torch.topk(
            torch.softmax(self.router(tokens), dim=-1), s.model.moe_top_k, dim=-1
        )
        if s.moe_allgather:
            combined = self._allgathered(tokens, probs).view(b, n, h)
            if self.shared is not None:
                combined = combined + self._shared(x)
            return combined
        routed, copies = self._dispatch(tokens.index_select(0, index.flatten()).unsqueeze(0))
        weights = None
        if s.moe_weighted_activation:
            weights, _ = self._dispatch(probs.reshape(1, -1, 1).to(x.dtype))
        out = self.experts(routed, weights)
        out = _expert_leave(out.view(1, -1, h)[:, :copies], s)
        out = all_to_all(out, "ep", s.ep).view(b * n, s.model.moe_top_k, h)
        if weights is None:
            out = out * probs.unsqueeze(-1).to(out.dtype)
        combined = out.sum(dim=1).view(b, n, h)
        if self.shared is not None:
            combined = combined + self._shared(x)
        return combined

    def _shared(self, x: torch.Tensor) -> torch.Tensor:
        """The shared experts, a dense MLP over the attention TP (their own checkpoint where
        ``shared_experts`` is recomputed: moe_layer.py)."""
        s = self.shape
        assert self.shared is not None
        with _recorder().checkpointed("shared_experts", "shared_experts" in s.recomputed, x):
            return _leave(self.shared(_enter(x, s)), s)

    def _allgathered(self, tokens: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """The ``allgather`` dispatcher (Megatron-Core's MoEAllGatherTokenDispatcher): every
        token of the ETP x EP group gathered (an expert-TP stage, then an EP stage: the same
        bytes as one gather over the group), this rank's experts' copies picked out, and
        their outputs added into a zeroed buffer of all the gathered tokens, reduce-scattered
        back. The routing (a few bytes per token) is not gathered here. ``tokens`` [tokens,
        hidden], ``probs`` [tokens, top_k]; returns [tokens, hidden]."""
        s = self.shape
        h = tokens.shape[-1]
        everyone = _expert_enter(tokens.unsqueeze(0), s)
        everyone = gather(everyone, "ep", s.ep, regather=False).view(-1, h)
        # This rank's experts receive top_k / ep of every gathered token's copies (balanced).
        copies = everyone.shape[0] * s.model.moe_top_k // s.ep
        local = torch.empty(copies, dtype=torch.long, device=tokens.device)
        local_probs = probs.reshape(-1, 1).to(tokens.dtype).index_select(0, local)
        weights = self._local(local_probs) if s.moe_weighted_activation else None
        out = self.experts(self._local(everyone.index_select(0, local)), weights)
        out = out.view(-1, h)[:copies]
        if weights is None:
            out = out * local_probs
        # Unpermute (Megatron's scatter_add, MindSpeed's index_put): its backward keeps only
        # the indices.
        summed = torch.zeros_like(everyone).index_put((local,), out, accumulate=True)
        summed = summed.unsqueeze(0)
        return _expert_leave(scatter(summed, "ep", s.ep), s).view(-1, h)

    def _local(self, copies: torch.Tensor) -> torch.Tensor:
        """``copies`` [(1,) copies, width] padded to the local experts' balanced share:
        [local experts, tokens each, width]."""
        s = self.shape
        padded = s.local_experts * s.expert_tokens
        if padded > copies.shape[-2]:
            copies = F.pad(copies, (0, 0, 0, padded - copies.shape[-2]))
        return copies.view(s.local_experts, s.expert_tokens, copies.shape[-1])

    def _dispatch(self, copies: torch.Tensor) -> tuple[torch.Tensor, int]:
        """``copies`` [1, copies, width] to this rank's experts: EP all-to-all, the expert-TP
        region, padding to the local experts' balanced share; [local experts, tokens each,
        width] and how many copies arrived."""
        s = self.shape
        copies = _expert_enter(all_to_all(copies, "ep", s.ep), s)
        arrived = copies.shape[1]
        return self._local(copies), arrived


class DecoderLayer(nn.Module):
    """Pre-norm decoder layer: attention and a dense MLP or an MoE block."""

    def __init__(self, shape: LayerShape) -> None:
        super().__init__()
        self.shape = shape
        self.norm1 = _norm(shape, shape.model.hidden_size)
        self.norm2 = _norm(shape, shape.model.hidden_size)
        self.attention = MLAttention(shape) if shape.model.attention == "mla" else Attention(shape)
        self.mlp: nn.Module = MoE(shape) if shape.kind == "moe" else MLP(shape, shape.ffn)
        # GPT family: Megatron's add_bias_linear (default on) gives both row-parallel
        # projections a bias, added after the TP reduction in bias-dropout-add.
        self.out_bias = nn.Parameter(torch.empty(shape.model.hidden_size)) if shape.gpt else None
        self.fc2_bias = (
            nn.Parameter(torch.empty(shape.model.hidden_size))
            if shape.gpt and shape.kind != "moe"
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Where selective recompute checkpoints modules (``shape.recomputed``,
        ``transformer_layer.py``): ``moe`` the MoE block, ``mlp`` the dense MLP with its TP
        collectives (and the pre-MLP norm where it runs inside ``linear_fc1``), ``layernorm``
        each norm that runs on its own (:meth:`_norm`)."""
        s = self.shape
        recomputed = s.recomputed
        fused = s.fused_norm_linear
        attention_norm_alone = not fused or s.model.attention == "mla"
        normed = self._norm(self.norm1, x, attention_norm_alone)
        attn = _leave(self.attention(_enter(normed, s)), s)
        x = _bias_dropout_add(attn, self.out_bias, x, s.dropout)
        recorder = _recorder()
        if s.kind == "moe":
            normed = self._norm(self.norm2, x, alone=True)  # the router reads it
            with recorder.checkpointed("moe", "moe" in recomputed, normed):
                out = self.mlp(normed)
            return x + out
        if fused and "mlp" in recomputed:  # the norm runs inside the checkpointed linear_fc1
            with recorder.checkpointed("mlp", True, x):
                mlp = _leave(self.mlp(_enter(self.norm2(x), s)), s)
        else:
            normed = self._norm(self.norm2, x, not fused)
            with recorder.checkpointed("mlp", "mlp" in recomputed, normed):
                mlp = _leave(self.mlp(_enter(normed, s)), s)
        return _bias_dropout_add(mlp, self.fc2_bias, x, s.dropout)

    def _norm(self, norm: nn.Module, x: torch.Tensor, alone: bool) -> torch.Tensor:
        """``norm(x)``, under the ``layernorm`` checkpoint where it is recomputed and runs
        on its own (``alone``): its input kept, its output discarded."""
        active = alone and "layernorm" in self.shape.recomputed
        with _recorder().checkpointed("layernorm", active, x) as discarded:
            out: torch.Tensor = norm(x)
            discarded.append(out)
        return out


class Embedding(nn.Module):
    """Vocabulary-parallel embedding: local rows, then AR (or RS with SP) over TP."""

    def __init__(self, shape: LayerShape) -> None:
        super().__init__()
        self.shape = shape
        self.weight = nn.Parameter(torch.empty(shape.vocab, shape.model.hidden_size))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return _leave(F.embedding(ids, self.weight), self.shape)


class Head(nn.Module):
    """Final norm, vocabulary-parallel output projection and fp32 cross-entropy loss."""

    def __init__(self, shape: LayerShape) -> None:
        super().__init__()
        self.shape = shape
        self.norm = _norm(shape, shape.model.hidden_size)
        self.output = nn.Linear(shape.model.hidden_size, shape.vocab, bias=False)
        targets = torch.empty(shape.micro_batch * shape.seq_q, dtype=torch.long)
        self.targets: torch.Tensor
        self.register_buffer("targets", targets, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.output(_enter(self.norm(x), self.shape)).float()
        return F.cross_entropy(logits.flatten(0, 1), self.targets)


def build_module(shape: LayerShape) -> nn.Module:
    """The module for ``shape.kind`` (``dense``, ``moe``, ``embedding``, ``head``) on meta."""
    kinds = {"dense": DecoderLayer, "moe": DecoderLayer, "embedding": Embedding, "head": Head}
    with torch.device("meta"):
        module = kinds[shape.kind](shape)
    return module.to(DTYPES[shape.dtype])
