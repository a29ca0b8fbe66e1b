"""Stand-ins for what the meta device cannot run, each recorded as the op it stands for.

Collectives do not exist on the meta device: the autograd functions here record a ``comm`` op
in forward and its mirror in backward, and hand back tensors of the right shape (TP/EP gather,
scatter, reduce and all-to-all; the CP ring and Ulysses exchanges). Fused attention kernels
are recorded as one op with their FLOPs and bytes; the unfused path as Megatron runs it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from autotune.simulators.hierarchical.record import _nbytes
from autotune.simulators.hierarchical.record import _new
from autotune.simulators.hierarchical.record import _recorder
from autotune.simulators.hierarchical.record import _storage
from autotune.simulators.hierarchical.record import autograd_nodes

_aten = torch.ops.aten

__all__ = [
    "all_to_all",
    "copy_to_region",
    "core_attention",
    "gather",
    "reduce",
    "scatter",
    "unfused_attention",
]


class _Collective(torch.autograd.Function):
    """A TP/EP collective along dim 1 (tokens); backward records its mirror image."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: torch.Tensor,
        names: tuple[str, str],
        group: str,
        factor: float,
        regather: bool = True,
    ) -> torch.Tensor:
        ctx.names, ctx.group, ctx.shape = names, group, tuple(x.shape)
        _recorder().host_call()  # Megatron's autograd.Function .apply
        shape = (x.shape[0], int(x.shape[1] * factor), *x.shape[2:])
        with _recorder().paused():  # the identity (copy to the TP region) returns its input
            out = x.view_as(x) if names[0] == "none" else x.new_empty(shape)
        ctx.nbytes = max(_nbytes(x), _nbytes(out))
        if names[0] == "all_gather" and regather:
            # Megatron keeps the local shard itself and gathers again in backward (SP memory).
            _recorder().regathered[_storage(out)] = _nbytes(x)
            _recorder().gathered[_storage(out)] = _storage(x)
        if names[0] != "none":
            _recorder().comm(names[0], group, ctx.nbytes)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        if ctx.names[1] != "none":
            _recorder().comm(ctx.names[1], ctx.group, ctx.nbytes)
        return _new(grad, ctx.shape), None, None, None, None


def gather(x: torch.Tensor, group: str, size: int, regather: bool = True) -> torch.Tensor:
    """All-gather tokens over ``group`` (``size`` ranks); backward reduce-scatters.

    ``regather``: the layer that reads the result keeps only the local shard and gathers
    again in its backward (Megatron's sequence-parallel linear layers); otherwise whoever
    saves the result keeps it whole (the MoE dispatcher's gather before the experts)."""
    if size == 1:
        return x
    names = ("all_gather", "reduce_scatter")
    return _Collective.apply(x, names, group, size, regather)  # type: ignore[no-any-return]


def scatter(x: torch.Tensor, group: str, size: int) -> torch.Tensor:
    """Reduce-scatter tokens over ``group``; backward all-gathers."""
    if size == 1:
        return x
    return _Collective.apply(x, ("reduce_scatter", "all_gather"), group, 1 / size)  # type: ignore[no-any-return]


def reduce(x: torch.Tensor, group: str, size: int) -> torch.Tensor:
    """All-reduce partial sums over ``group`` (TP without SP); backward is free (identity)."""
    if size == 1:
        return x
    return _Collective.apply(x, ("all_reduce", "none"), group, 1)  # type: ignore[no-any-return]


def copy_to_region(x: torch.Tensor, group: str, size: int) -> torch.Tensor:
    """Identity in forward (``x`` itself, as a view), all-reduce of its gradient in backward."""
    if size == 1:
        return x
    return _Collective.apply(x, ("none", "all_reduce"), group, 1)  # type: ignore[no-any-return]


def all_to_all(x: torch.Tensor, group: str, size: int) -> torch.Tensor:
    """EP token exchange of the routed copies (balanced: as many in as out); backward mirrors."""
    if size == 1:
        return x
    return _Collective.apply(x, ("all_to_all", "all_to_all"), group, 1)  # type: ignore[no-any-return]


def _in_core(backward: Callable[..., tuple[Any, ...]]) -> Callable[..., tuple[Any, ...]]:
    """A core-attention function's backward with its ops tagged ``core``, as its forward's
    are: the CP ring hides under the attention kernels of both passes."""

    @functools.wraps(backward)
    def run(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        with _recorder().tagged("core"):
            return backward(ctx, *grads)

    return run


def _whole_sequence(chunk: torch.Tensor, size: int) -> torch.Tensor:
    """An empty ``[b, g, s, d]`` K or V for this rank's ``[b, g, s/size, d]`` chunk: what
    the CP ring brings the attention kernel."""
    b, groups, length, width = chunk.shape
    return _new(chunk, (b, groups, length * size, width))


class _Ring(torch.autograd.Function):
    """K and V round the CP ring as one buffer: c-1 steps beside attention (reference.md 3.5)."""

    @staticmethod
    def forward(ctx: Any, k: torch.Tensor, v: torch.Tensor, size: int) -> tuple[Any, ...]:  # type: ignore[override]
        ctx.shapes = tuple(k.shape), tuple(v.shape)
        ctx.nbytes = (_nbytes(k) + _nbytes(v)) * (size - 1)
        _recorder().host_call()
        _recorder().comm("ring_send_recv", "cp", ctx.nbytes, overlap=True)
        return _whole_sequence(k, size), _whole_sequence(v, size)

    @staticmethod
    @_in_core
    def backward(ctx: Any, grad_k: torch.Tensor, grad_v: torch.Tensor) -> tuple[Any, ...]:
        # KV and dKV circulate in backward: about twice the forward volume (docs/reference.md 3.5).
        _recorder().comm("ring_send_recv", "cp", 2 * ctx.nbytes, overlap=True)
        return _new(grad_k, ctx.shapes[0]), _new(grad_v, ctx.shapes[1]), None


def cp_ring(k: torch.Tensor, v: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Bring the full-sequence K and V (``[b, g, s/c, d]`` -> ``[b, g, s, d]``) by CP ring."""
    if size == 1:
        return k, v
    return _Ring.apply(k, v, size)  # type: ignore[no-any-return]


class _Ulysses(torch.autograd.Function):
    """CP all-to-all (Ulysses): scatter dim ``split`` over the group, gather dim ``join``.

    Q, K and V go in with the heads split and the whole sequence gathered; the output comes
    back the other way. Each is one blocking call whose send buffer is the local tensor;
    backward sends the gradient back the same size (docs/reference.md 3.5).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, size: int, split: int, join: int) -> torch.Tensor:  # type: ignore[override]
        ctx.shape, ctx.nbytes = tuple(x.shape), _nbytes(x)
        _recorder().host_call()  # the exchange's autograd.Function .apply
        _recorder().comm("all_to_all", "cp", ctx.nbytes)
        shape = list(x.shape)
        shape[split] //= size
        shape[join] *= size
        return _new(x, tuple(shape))

    @staticmethod
    @_in_core
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        _recorder().comm("all_to_all", "cp", ctx.nbytes)
        return _new(grad, ctx.shape), None, None, None


def _ulysses(x: torch.Tensor, size: int, split: int, join: int) -> torch.Tensor:
    return _Ulysses.apply(x, size, split, join)  # type: ignore[no-any-return]


_Saved = tuple[torch.Tensor, ...]


def _attention_kernel(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, _Saved]:
    """One fused causal attention kernel: ``(output, what its backward needs)``.

    ``q [b, s_q, heads, d]`` and ``k, v [b, groups, s_kv, d]`` give ``[b, s_q, heads*d_v]``.
    GQA: the query heads of one KV group are stacked along the query axis, so the fused op
    sees ``g`` heads of ``rep * s_q`` queries (same FLOPs and bytes, no K/V copies).
    """
    b, sq, heads, d = q.shape
    groups = k.shape[1]
    recorder = _recorder()
    with recorder.paused():
        folded = q.reshape(b, sq, groups, heads // groups, d).permute(0, 2, 3, 1, 4)
        # Its own copy even where the fold is a view (one query head per group): a view would
        # keep the whole fused QKV output, which the kernel's contiguous Q does not.
        folded = folded.reshape(b, groups, heads // groups * sq, d).contiguous()
        # The kernel takes contiguous K and V (TE's flash path: `.contiguous()` of the
        # sbhd inputs; MindSpeed's npu_fusion_attention: [s, b, h] reshapes), so it keeps
        # V's own copy, not the fused QKV projection output V is a view of.
        copies = (folded, k.contiguous(), v.contiguous())
    recorder.same_storage((q, k, v), copies)  # freed with what it was given (mla_up_proj)
    folded, k, v = copies
    out, lse, seed, offset = _aten._scaled_dot_product_efficient_attention(
        folded, k, v, None, True, 0.0, True
    )
    # Flash kernels write the output in the layout the projection reads ([b, s, heads, d]
    # or sbhd): a view of the kernel's output, no second copy. The meta device carries no
    # values, so the folded GQA order needs no un-permute here.
    width = heads * v.shape[-1]
    with _recorder().paused():
        view = out.as_strided((b, sq, width), (sq * width, width, 1))
    return view, (folded, k, v, out, lse, seed, offset)


def _attention_kernel_backward(
    saved: _Saved, grad: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The kernel's backward: ``(dq folded, dk, dv)`` from :func:`_attention_kernel`'s saved."""
    folded, k, v, out, lse, seed, offset = saved
    with _recorder().paused():
        grad_out = grad.new_empty(out.shape)
    dq, dk, dv, _ = _aten._scaled_dot_product_efficient_attention_backward(
        grad_out,
        folded,
        k,
        v,
        None,
        out,
        lse,
        seed,
        offset,
        0.0,
        [True, True, True, False],
        True,
    )
    return dq, dk, dv


class _CoreAttention(torch.autograd.Function):
    """One fused causal attention kernel (forward and backward), as flash kernels run it."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        out, saved = _attention_kernel(q, k, v)
        ctx.save_for_backward(*saved)
        ctx.q_shape = tuple(q.shape)
        return out

    @staticmethod
    @_in_core
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        _, dk, dv = _attention_kernel_backward(ctx.saved_tensors, grad)
        return _new(grad, ctx.q_shape), dk, dv


class _RingAttention(torch.autograd.Function):
    """Transformer Engine's ring attention (``AttnFuncWithCPAndKVP2P``): this rank's K and V
    pass round the CP ring beside the kernel, which so covers the whole sequence; only the
    local K and V chunks are kept, and backward passes them round again with their gradients
    (docs/reference.md 3.5). Recorded as one kernel over the gathered sequence (the FLOPs and
    bytes of the ring's steps together)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, size: int
    ) -> torch.Tensor:
        recorder = _recorder()
        recorder.host_call()  # the function's .apply
        with recorder.paused():  # the local chunks the ring sends and the function keeps
            chunks = k.contiguous(), v.contiguous()
        recorder.same_storage((k, v), chunks)
        k, v = chunks  # round the ring as one buffer a step (TE concatenates them; MLA too)
        ctx.kv = (_nbytes(k) + _nbytes(v)) * (size - 1)
        recorder.comm("ring_send_recv", "cp", ctx.kv, overlap=True)
        out, saved = _attention_kernel(q, _whole_sequence(k, size), _whole_sequence(v, size))
        folded, _, _, kernel_out, lse, seed, offset = saved
        ctx.save_for_backward(folded, k, v, kernel_out, lse, seed, offset)
        ctx.size, ctx.q_shape = size, tuple(q.shape)
        return out

    @staticmethod
    @_in_core
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        recorder = _recorder()
        folded, k, v, kernel_out, lse, seed, offset = ctx.saved_tensors
        size = ctx.size
        recorder.comm("ring_send_recv", "cp", 2 * ctx.kv, overlap=True)  # and dK, dV: twice
        saved = (
            folded,
            _whole_sequence(k, size),
            _whole_sequence(v, size),
            kernel_out,
            lse,
            seed,
            offset,
        )
        _attention_kernel_backward(saved, grad)
        return _new(grad, ctx.q_shape), _new(k, tuple(k.shape)), _new(v, tuple(v.shape)), None


class _FusedUlysses(torch.autograd.Function):
    """Transformer Engine's all-to-all context parallelism (``AttnFuncWithCPAndQKVOA2A``).

    One function: Q, K and V trade heads for sequence by an all-to-all each, the kernel runs,
    the output trades back; it saves the output after that exchange (the tensor the output
    projection keeps too) and sends it back again in backward beside its gradient, then the
    gradients of Q, K and V (docs/reference.md 3.5).
    """

    @staticmethod
    def forward(
        ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, size: int
    ) -> torch.Tensor:  # type: ignore[override]
        recorder = _recorder()
        recorder.host_call()  # the function's .apply
        for x in (q, k, v):
            recorder.comm("all_to_all", "cp", _nbytes(x))
        b, sq, heads, d = q.shape
        groups, skv = k.shape[1], k.shape[2]
        local, saved = _attention_kernel(
            _new(q, (b, sq * size, heads // size, d)),
            _new(k, (b, groups // size, skv * size, d)),
            _new(v, (b, groups // size, skv * size, v.shape[-1])),
        )
        recorder.comm("all_to_all", "cp", _nbytes(local))
        out = _new(local, (b, sq, local.shape[2] * size))
        folded, k_local, v_local, kernel_out, lse, seed, offset = saved
        ctx.save_for_backward(folded, k_local, v_local, out, lse, seed, offset)
        ctx.shapes = (tuple(q.shape), tuple(k.shape), tuple(v.shape))
        ctx.local_shape, ctx.kernel_out_shape = tuple(local.shape), tuple(kernel_out.shape)
        return out

    @staticmethod
    @_in_core
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        recorder = _recorder()
        folded, k_local, v_local, out, lse, seed, offset = ctx.saved_tensors
        for x in (out, grad):
            recorder.comm("all_to_all", "cp", _nbytes(x))
        kernel_out = _new(out, ctx.kernel_out_shape)
        saved = (folded, k_local, v_local, kernel_out, lse, seed, offset)
        dq, dk, dv = _attention_kernel_backward(saved, _new(grad, ctx.local_shape))
        for x in (dq, dk, dv):
            recorder.comm("all_to_all", "cp", _nbytes(x))
        q_shape, k_shape, v_shape = ctx.shapes
        return _new(grad, q_shape), _new(dk, k_shape), _new(dv, v_shape), None


def core_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cp: int,
    exchange: str = "p2p",
    a2a_style: str | None = None,
) -> torch.Tensor:
    """Causal attention of this rank's queries against the whole sequence.

    ``q [b, s_q, heads, d]`` and ``k, v [b, groups, s_kv / cp, d]`` give ``[b, s_q, heads*d_v]``.
    Context parallelism brings the rest of the sequence by the ``p2p`` ring (K and V pass
    round it beside the kernel) or by ``a2a`` (Ulysses: all-to-alls trade heads for sequence
    before the kernel and back after it), in ``a2a_style`` ``te`` (one fused function) or
    ``deepspeed`` (an autograd function per exchange around the kernel, the KV heads repeated
    up to the query heads first; MindSpeed).
    """
    recorder = _recorder()
    recorder.keep_core_inputs(q, k, v)
    with recorder.tagged("core"):
        if cp == 1:
            return _CoreAttention.apply(q, k, v)  # type: ignore[no-any-return]
        if exchange == "p2p":
            return _RingAttention.apply(q, k, v, cp)  # type: ignore[no-any-return]
        if a2a_style == "te":
            return _FusedUlysses.apply(q, k, v, cp)  # type: ignore[no-any-return]
        return _heads_exchanged(_CoreAttention.apply, q, k, v, cp, repeat_kv=True)


def _heads_exchanged(
    attend: Callable[..., torch.Tensor],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cp: int,
    repeat_kv: bool,
) -> torch.Tensor:
    """``attend`` between all-to-alls (an autograd function each, DeepSpeed-Ulysses'
    structure): Q, K and V trade the CP share of their heads for the whole sequence, and the
    output trades back. ``repeat_kv``: the KV heads are repeated up to the query heads first
    (DeepSpeed's style); else split over CP as they are."""
    heads, groups = q.shape[2], k.shape[1]
    if repeat_kv and groups < heads:
        k = k.repeat_interleave(heads // groups, dim=1)
        v = v.repeat_interleave(heads // groups, dim=1)
    out = attend(
        _ulysses(q, cp, split=2, join=1),
        _ulysses(k, cp, split=1, join=2),
        _ulysses(v, cp, split=1, join=2),
    )
    return _ulysses(out, cp, split=1, join=2)


class _UnfusedAttention(torch.autograd.Function):
    """Megatron's unfused core attention (pre-flash stacks), op by op on the meta device.

    Megatron's ``CoreAttention`` (and vTrain's ``ShardedGptSelfAttention``) works on
    ``[s, b * heads, d]`` views, so its batched GEMMs need no copies: ``baddbmm`` writes the
    scaled scores ``Q K^T`` ``[b * heads, s_q, s_kv]`` to HBM, the fused scale-mask-softmax reads
    and writes them once (``ScaledUpperTriangMaskedSoftmax``: scale, causal mask and softmax in
    one kernel, recorded as one ``_softmax``), dropout writes its output and a 1-byte mask,
    ``bmm`` multiplies by V, and the context is permuted back to ``[s, b, heads * d]`` with a
    copy. The inner graph runs under autograd, so the backward ops (two GEMMs per GEMM, softmax
    and dropout backward) and the saved tensors (softmax output, dropout mask and output: the
    5as/h term of Korthikanti et al. 2022 Table 2) are the ones torch itself records. GQA
    repeats K and V per query head first (Megatron's ``repeat_interleave``). The full s x s
    product is computed (no causal skip); Megatron's model FLOPs count half of it, so the GEMMs'
    ``model_flops`` are halved here while ``flops`` stay as executed.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, dropout: bool, fp32: bool, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        b, sq, heads, d = q.shape
        groups, skv, dv = k.shape[1], k.shape[2], v.shape[-1]
        recorder = _recorder()
        with recorder.paused():  # Megatron's [s, b*np, hn] views: strided batches, no copies
            q3 = q.new_empty(b * heads, sq, d).requires_grad_()
            k3 = k.new_empty(b * groups, skv, d).requires_grad_()
            v3 = v.new_empty(b * groups, skv, dv).requires_grad_()
        recorder.same_storage((q, k, v), (q3, k3, v3))  # views of them in Megatron
        with torch.enable_grad(), recorder.scaled_model_flops(0.5):
            keys, values = k3, v3
            if heads != groups:
                keys = k3.repeat_interleave(heads // groups, dim=0)
                values = v3.repeat_interleave(heads // groups, dim=0)
            scores = torch.bmm(q3, keys.transpose(1, 2))
            if fp32:  # not the fused kernel: FusedScaleMaskSoftmax.forward_torch_softmax
                wide = scores.float() * 1.0  # the cast, then the scale
                probs = torch.softmax(wide.masked_fill(_causal_mask(wide), -10000.0), dim=-1)
                probs = probs.to(scores.dtype)
            else:
                probs = torch.softmax(scores, dim=-1)
            if dropout:
                probs = _aten.native_dropout(probs, 0.1, True)[0]
            context = torch.bmm(probs, values)
        recorder.inner_nodes += autograd_nodes(context.grad_fn, {id(q3), id(k3), id(v3)})
        ctx.graph = (context, q.shape, k.shape, v.shape)
        with torch.no_grad():
            return context.view(b, heads, sq, dv).permute(0, 2, 1, 3).reshape(b, sq, heads * dv)

    @staticmethod
    @_in_core
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        context, q_shape, k_shape, v_shape = ctx.graph
        b, sq, heads, _ = q_shape
        grad3 = grad.view(b, sq, heads, -1).permute(0, 2, 1, 3).reshape(context.shape)
        with torch.enable_grad(), _recorder().scaled_model_flops(0.5):
            torch.autograd.backward(context, grad3)
        ctx.graph = None
        return None, None, _new(grad, q_shape), _new(grad, k_shape), _new(grad, v_shape)


def unfused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cp: int,
    dropout: bool,
    fp32: bool = False,
    exchange: str = "p2p",
    a2a_style: str | None = None,
) -> torch.Tensor:
    """Unfused causal attention (Megatron without flash): same shapes and CP exchanges as
    :func:`core_attention` (the ``p2p`` ring brings the whole-sequence K and V; ``a2a``
    trades heads for sequence around the attention, the KV heads repeated first in the
    ``deepspeed`` style); ``fp32``: PyTorch's fp32 softmax where the fused kernel does not
    take the scores."""
    recorder = _recorder()
    recorder.keep_core_inputs(q, k, v)
    attend = functools.partial(_UnfusedAttention.apply, dropout, fp32)
    with recorder.tagged("core"):
        if cp > 1 and exchange == "a2a":
            return _heads_exchanged(attend, q, k, v, cp, repeat_kv=a2a_style != "te")
        return attend(q, *cp_ring(k, v, cp))


def _causal_mask(scores: torch.Tensor) -> torch.Tensor:
    """The causal mask Megatron applies, one [s_q, s_kv] boolean shared by every head and, built
    once per batch (``get_ltor_masks_and_position_ids``), by every layer: the masked_fill that
    saves it keeps no bytes of the layer's."""
    recorder = _recorder()
    with recorder.paused():
        return recorder.shared(scores.new_empty(scores.shape[-2:], dtype=torch.bool))
