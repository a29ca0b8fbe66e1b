"""One layer of the analytical simulator on one device, for one micro-batch.

Roofline GEMMs (FP8 where the step runs them; what each shape reaches of the device's
efficiency, :mod:`autotune.simulators.gemm_table`), flash or Megatron's unfused core attention,
memory-bound elementwise traffic, kernel launches and a host-dispatch floor; the exposed
tensor, expert and context parallel collectives (:mod:`autotune.simulators.collectives`), which
first fill the device's idle time under that floor; and what the
layer saves for its backward (Korthikanti et al. 2022, docs/reference.md 3.3). The seconds
(:func:`layer_times_s`) do not depend on the recompute mode, what the layer keeps
(:func:`layer_bytes`) does.
"""

# size: every formula of one layer's time and bytes, each with its source

from __future__ import annotations

from typing import NamedTuple

from autotune.simulators.analytical.constants import AnalyticalConstants
from autotune.simulators.collectives import all_reduce_time_s
from autotune.simulators.collectives import all_to_all_time_s
from autotune.simulators.collectives import deepep_time_s
from autotune.simulators.collectives import ring_exchange_time_s
from autotune.simulators.frameworks import ROPE_KERNELS
from autotune.simulators.frameworks import FrameworkSpec
from autotune.simulators.gemm_table import shape_efficiency
from autotune.simulators.job import Job
from autotune.simulators.layout import Layout
from autotune.simulators.specs import DeviceSpec
from autotune.simulators.specs import ModelSpec
from autotune.simulators.specs import TrainSpec

__all__ = [
    "dtype_bytes",
    "gemm_pass_s",
    "gemm_time_s",
    "host_ops",
    "layer_bytes",
    "layer_times_s",
]


def gemm_time_s(m: float, k: float, n: float, device: DeviceSpec, precision: str) -> float:
    """Roofline time of an (m x k) @ (k x n) GEMM in ``precision``: compute- or memory-bound,
    at the throughput its shape reaches (:mod:`autotune.simulators.gemm_table`).

    An ``fp8`` GEMM reads FP8 operands and writes a bf16 result (Transformer Engine).
    """
    return _Roofline.of(device, precision).gemm_s(m, k, n)


def gemm_pass_s(
    m: float, k: float, n: float, device: DeviceSpec, precision: str
) -> tuple[float, float]:
    """Forward and backward seconds of a linear layer's (m x k) @ (k x n) GEMM: the backward
    runs the input gradient (m x n) @ (n x k) and the weight gradient (k x m) @ (m x n)."""
    return _Roofline.of(device, precision).pass_s(m, k, n)


class _Roofline(NamedTuple):
    """What a GEMM's roofline time needs of a device and a precision."""

    operand_bytes: int
    result_bytes: int
    flops_per_s: float  # achieved on the device's best shapes: peak x GEMM efficiency
    bytes_per_s: float
    device: DeviceSpec  # for what each shape reaches of it (autotune.simulators.gemm_table)

    @classmethod
    def of(cls, device: DeviceSpec, precision: str) -> _Roofline:
        return cls(
            operand_bytes=1 if precision == "fp8" else dtype_bytes(precision),
            result_bytes=dtype_bytes(precision),
            flops_per_s=device.peak_flops(precision) * device.gemm_efficiency(precision),
            bytes_per_s=device.achieved_memory_bytes_per_s,
            device=device,
        )

    def gemm_s(self, m: float, k: float, n: float) -> float:
        flops = 2.0 * m * k * n
        nbytes = self.operand_bytes * (m * k + k * n) + self.result_bytes * m * n
        flops_per_s = self.flops_per_s * shape_efficiency(self.device, m, n, k)
        return max(flops / flops_per_s, nbytes / self.bytes_per_s)

    def pass_s(self, m: float, k: float, n: float) -> tuple[float, float]:
        """Forward and backward of a linear layer's GEMM: the backward is the input gradient
        (m x n) @ (n x k) and the weight gradient (k x m) @ (m x n), each at its own shape."""
        return self.gemm_s(m, k, n), self.gemm_s(m, n, k) + self.gemm_s(k, m, n)


def dtype_bytes(precision: str) -> int:
    """Bytes of an activation element: fp32 4, else 2 (fp8 runs keep bf16 activations)."""
    return 4 if precision == "fp32" else 2


def _kv_local_width(model: ModelSpec, tp: int) -> float:
    """K+V width held by one TP rank (KV heads are replicated when tp > num_kv_heads)."""
    if model.attention == "mla":
        return model.kv_width / tp
    return model.kv_width / min(tp, model.num_kv_heads)


def _attention_gemms(model: ModelSpec, tokens: float, tp: int) -> list[tuple[float, float, float]]:
    """(m, k, n) of the attention projections of one layer on one TP rank."""
    h = model.hidden_size
    out = (tokens, model.attn_out_width / tp, h)
    if model.attention == "gqa":
        return [(tokens, h, model.q_width / tp + _kv_local_width(model, tp)), out]
    a = model.num_attention_heads
    gemms = [
        (tokens, h, model.kv_lora_rank + model.qk_rope_head_dim),
        (tokens, model.kv_lora_rank, a * (model.qk_nope_head_dim + model.v_head_dim) / tp),
        out,
    ]
    if model.q_lora_rank:
        gemms += [(tokens, h, model.q_lora_rank), (tokens, model.q_lora_rank, model.q_width / tp)]
    else:
        gemms.append((tokens, h, model.q_width / tp))
    return gemms


def _mlp_gemms(
    model: ModelSpec, tokens: float, width: float, tp: int, count: float = 1.0
) -> list[tuple[float, float, float, float]]:
    """(m, k, n, count) of one MLP: the fused gate/up (or fc1) GEMM and the down GEMM."""
    h = model.hidden_size
    return [
        (tokens, h, (model.mlp_matrices - 1) * width / tp, count),
        (tokens, width / tp, h, count),
    ]


def _expert_share(layout: Layout) -> float:
    """The token copies a rank's experts compute, per token of its TP group, over the top-k:
    each TP rank dispatches its own tokens (1/TP of them under SP) and the experts' TP gather
    joins ETP ranks' worth (Megatron-Core's token dispatchers), so ETP / TP; 1 when the
    experts reuse TP."""
    return layout.expert_tp / layout.tp


def _linear_gemms(
    model: ModelSpec, moe: bool, tokens: float, layout: Layout
) -> list[tuple[float, float, float, float]]:
    """(m, k, n, count) of a layer's linear layers: what FP8 runs in FP8 (not the router).
    The routed experts' width is split by ETP, the rest by TP."""
    tp = layout.tp
    gemms = [(m, k, n, 1.0) for m, k, n in _attention_gemms(model, tokens, tp)]
    if not moe:
        return gemms + _mlp_gemms(model, tokens, model.ffn_hidden_size, tp)
    local_experts = model.num_experts / layout.ep
    copies = model.moe_top_k * tokens * _expert_share(layout)
    gemms += _mlp_gemms(
        model,
        copies / local_experts,
        model.expert_ffn_hidden_size,
        layout.expert_tp,
        local_experts,
    )
    if model.shared_expert_ffn_hidden_size:
        gemms += _mlp_gemms(model, tokens, model.shared_expert_ffn_hidden_size, tp)
    return gemms


def _gemms_s(
    model: ModelSpec,
    moe: bool,
    tokens: float,
    layout: Layout,
    train: TrainSpec,
    device: DeviceSpec,
) -> tuple[float, float]:
    """Forward and backward GEMM seconds of one layer: linear layers (FP8 when the step runs
    it) and the router, the backward's GEMMs at their own shapes (:meth:`_Roofline.pass_s`)."""
    linear = _Roofline.of(device, "fp8" if train.fp8 else train.compute_dtype)
    gemms = [(linear, m, k, n, c) for m, k, n, c in _linear_gemms(model, moe, tokens, layout)]
    if moe:
        router = _Roofline.of(device, train.compute_dtype)
        gemms.append((router, tokens, model.hidden_size, model.num_experts, 1.0))
    passes = [(c, r.pass_s(m, k, n)) for r, m, k, n, c in gemms]
    return sum(c * f for c, (f, _) in passes), sum(c * b for c, (_, b) in passes)


def _fp8_cast_bytes(
    model: ModelSpec, moe: bool, tokens: float, layout: Layout, act: int, kept: bool
) -> tuple[float, float]:
    """HBM bytes of one layer's FP8 casts (forward, backward) on one device.

    Every FP8 GEMM operand that is an activation is quantized first: read in ``act`` bytes,
    written in one. Forward: each linear layer's input (m x k); backward: the gradient of its
    output (m x n) for the input- and weight-gradient GEMMs (Transformer Engine's
    ``cast_to_fp8`` / ``fp8_cast_transpose``; docs/reference.md 7.6), and, where the layer
    keeps its high-precision input rather than an FP8 copy (not ``kept``: torchao,
    docs/decisions/0062), that input again for the weight gradient. Weights are cast once a
    step, not per micro-batch (the cached copies; torchao's per-pass weight casts are not
    priced).
    """
    gemms = _linear_gemms(model, moe, tokens, layout)
    per_element = act + 1
    forward = per_element * sum(count * m * k for m, k, _, count in gemms)
    backward = per_element * sum(count * m * n for m, _, n, count in gemms)
    if not kept:
        backward += forward
    return forward, backward


def _elementwise_bytes_per_token(
    model: ModelSpec,
    moe: bool,
    layout: Layout,
    act: int,
    train: TrainSpec,
    flash: bool,
) -> float:
    """HBM traffic of one layer's forward memory-bound kernels, per token on one device.

    Two norms (read + write h) and two residual adds (read 2h, write h), rotary embedding on
    Q and K as the stack runs it (``rope_kernel``'s passes of each), the MLP activation
    (:func:`_activation_traffic_per_f`), the attention inputs' copies
    (:func:`_attention_copies_per_token`), and for MoE the permutation of the top-k token
    copies its experts compute, before and after them. The GPT family has learned positions
    instead of RoPE. Where the run drops out, the two residual adds apply hidden dropout,
    writing a 1-byte mask each (Megatron's ``bias_dropout_add``). The ``allgather``
    dispatcher unpermutes into a zeroed buffer of every token of the EP group (``ep`` tokens'
    worth per token here) before reducing it over ETP x EP.
    """
    tp = layout.tp
    seq_shard = tp if layout.sequence_parallel else 1
    h = model.hidden_size
    framework = train.framework
    norms_residuals = act * (2 * 2 * h + 2 * 3 * h) / seq_shard
    if train.drops_out(model):
        norms_residuals += 2 * h / seq_shard
    outside_mlp = (
        norms_residuals
        + _rope_bytes_per_token(model, tp, act, framework)
        + _attention_copies_per_token(model, tp, act, train, flash)
    )
    per_f = _activation_traffic_per_f(model, act, framework)
    if not moe:
        return outside_mlp + per_f * model.ffn_hidden_size / tp
    k = model.moe_top_k
    mlp = k * per_f * model.expert_ffn_hidden_size / tp + per_f * (
        model.shared_expert_ffn_hidden_size / tp
    )
    permute = 2 * 2 * k * act * h
    if train.token_dispatcher == "allgather":
        permute += layout.ep * act * h
    return outside_mlp + mlp + permute * _expert_share(layout)


def _rope_bytes_per_token(model: ModelSpec, tp: int, act: int, framework: FrameworkSpec) -> float:
    """Forward HBM bytes per token of rotating Q and K on one TP rank: ``rope_kernel``'s
    passes of each (none for the GPT family's learned positions)."""
    if model.is_gpt_family:
        return 0.0
    passes = ROPE_KERNELS[framework.rope_kernel]
    return passes * act * (model.q_width / tp + _kv_local_width(model, tp) / 2)


def _activation_traffic_per_f(model: ModelSpec, act: int, framework: FrameworkSpec) -> float:
    """Forward HBM bytes of the MLP activation per element of its output: GeLU reads and
    writes it; fused SwiGLU reads gate and up and writes their product; SwiGLU as PyTorch
    operators (``swiglu_keeps_silu``) also writes and reads SiLU's output."""
    if model.activation != "swiglu":
        return 2 * act
    return act * (5 if framework.swiglu_keeps_silu else 3)


def _kernel_kv_width(model: ModelSpec, tp: int, framework: FrameworkSpec) -> float:
    """K+V width one TP rank gives core attention: the KV heads as they are, or copied out
    to the query heads where the stack repeats them (``gqa_repeats_kv``)."""
    local = _kv_local_width(model, tp)
    if model.attention == "mla" or not framework.gqa_repeats_kv:
        return local
    return max(local, 2 * model.q_width / tp)


def _attention_copies_per_token(
    model: ModelSpec, tp: int, act: int, train: TrainSpec, flash: bool
) -> float:
    """Forward HBM bytes per token of the copies a stack makes of Q, K and V before core
    attention: K and V repeated to the query heads (read, then written at that width), and
    the flash path's copies of all three into the kernel's layout (read and written)."""
    framework = train.framework
    local, kernel = _kv_local_width(model, tp), _kernel_kv_width(model, tp, framework)
    copies = act * (local + kernel) if kernel > local else 0.0
    if flash and framework.flash_input_copy:
        copies += 2 * act * (model.q_width / tp + kernel)
    return copies


def _unfused_attention_s(
    model: ModelSpec,
    tokens: float,
    train: TrainSpec,
    layout: Layout,
    device: DeviceSpec,
    c: AnalyticalConstants,
) -> tuple[float, float]:
    """(forward, backward) seconds of Megatron's unfused core attention on one TP rank.

    The scores of every local head form a [s, s] matrix per sequence, written and read in HBM
    (no causal skipping: the masked half is computed and stored too). The two batched GEMMs
    (QK^T, PV; dQ, dK, dP, dV backward) are rooflines over their score traffic, each at the
    throughput of its shape (:mod:`autotune.simulators.gemm_table`); the masked
    softmax and, when the run drops out, the dropout are memory-bound passes over the scores
    (Korthikanti et al. 2022 Table 2: fp16 scores, softmax output and dropout output, 1-byte
    dropout mask).
    """
    heads = model.num_attention_heads / layout.tp
    scores = tokens * heads * train.seq_len  # score elements of this micro-batch
    flops = 2.0 * model.core_attention_flops_per_token(train.seq_len) * tokens / layout.tp
    peak = device.peak_flops(train.compute_dtype) * device.gemm_efficiency(train.compute_dtype)
    bandwidth = device.achieved_memory_bytes_per_s
    b = _unfused_attention_bytes(model, train, layout, c)
    # Each product is one batch of per-head GEMMs with half the FLOPs, at its own tiles and
    # waves: scores and dP write [s_q, s_k] (depth d); context and dQ write [s_q, d] (depth
    # s_k); dK and dV write [s_k, d] (depth s_q).
    s_q, s_k, d = tokens / layout.micro_batch, train.seq_len, model.head_dim
    batch = layout.micro_batch * heads
    score_w = shape_efficiency(device, s_q, s_k, d, batch)
    query_w = shape_efficiency(device, s_q, d, s_k, batch)
    key_w = shape_efficiency(device, s_k, d, s_q, batch)
    forward_gemm_s = flops / 2 * (1 / score_w + 1 / query_w) / peak
    backward_gemm_s = flops / 2 * (1 / score_w + 1 / query_w + 2 / key_w) / peak
    forward = max(forward_gemm_s, scores * b["forward_gemm"] / bandwidth)
    forward += scores * b["forward_elementwise"] / bandwidth
    backward = max(backward_gemm_s, scores * b["backward_gemm"] / bandwidth)
    backward += scores * b["backward_elementwise"] / bandwidth
    return forward, backward


def host_ops(job: Job, layout: Layout, c: AnalyticalConstants) -> tuple[int, int]:
    """The host calls of one layer's forward and backward: Megatron's GPT layer, and the
    more PyTorch's fp32 softmax issues where the unfused path's fused kernel does not run."""
    fp32_softmax = not job.flash_attention and job.train.softmax_in_fp32(
        job.model, layout.micro_batch, layout.tp
    )
    extra = c.host_ops_fp32_softmax if fp32_softmax else 0
    return c.host_ops_per_layer_forward + extra, c.host_ops_per_layer_backward + extra


def _unfused_attention_bytes(
    model: ModelSpec, train: TrainSpec, layout: Layout, c: AnalyticalConstants
) -> dict[str, float]:
    """Bytes per score element of the unfused core attention: the fused softmax kernel's, or
    PyTorch's fp32 softmax where the kernel does not take the scores (:meth:`simulators.
    TrainSpec.softmax_in_fp32`), plus the dropout's where the run drops out (at probability 0
    PyTorch skips the kernel and keeps the softmax output as the probabilities)."""
    b = dict(
        c.unfused_attention_fp32_bytes_per_score
        if train.softmax_in_fp32(model, layout.micro_batch, layout.tp)
        else c.unfused_attention_bytes_per_score
    )
    if train.drops_out(model):
        for key, value in c.unfused_attention_dropout_bytes_per_score.items():
            b[key] += value
        b["saved"] -= b["kept_copy"]  # PV keeps the dropout's output instead of the copy
    return b


def _activation_bytes_per_token(
    model: ModelSpec,
    moe: bool,
    layout: Layout,
    act: int,
    linear_in: int,
    dropout: bool,
    flash: bool,
    framework: FrameworkSpec,
) -> float:
    """Bytes one layer saves for backward per token, but the unfused path's scores
    (docs/reference.md 3.3).

    Norm inputs and outputs (4 tensors of h, split by TP only with SP), Q/K/V (K and V at the
    width core attention reads them, :func:`_kernel_kv_width`) and the attention
    output plus, with flash attention, its fp32 log-sum-exp per head, MLA latents, and the
    MLP's activation (:func:`_mlp_saved_per_f`); an MoE layer keeps
    the dispatched top-k token copies, their expert activations and fp32 router probabilities,
    the router's own bf16 input (where FP8 layers keep a 1-byte copy of it: the shared
    experts'), and, unless ``weighted`` (the experts weight their activation by the
    probabilities, ``moe_weighted_activation``), the top-k expert outputs the combine
    multiplies by them;
    with ``dropout`` the 1-byte masks of the two hidden dropouts (the ``sbh`` mask terms of
    Korthikanti et al. 2022 Table 2), split by TP only with SP. The inputs of the linear layers
    (norm outputs, attention output, MLP activation output, dispatched tokens) take
    ``linear_in`` bytes per element: 1 where FP8 layers save them quantized (docs/reference.md
    7.6), else ``act``.
    """
    tp = layout.tp
    seq_shard = tp if layout.sequence_parallel else 1
    h = model.hidden_size
    norms = 2 * (act + linear_in) * h / seq_shard
    attention = act * (model.q_width / tp + _kernel_kv_width(model, tp, framework))
    attention += linear_in * model.attn_out_width / tp
    kernel_keeps_lse = flash and "core_attn" not in layout.recomputed_modules
    lse = 4 * model.num_attention_heads / tp if kernel_keeps_lse else 0.0
    if model.attention == "mla":
        # the down-projections' outputs (the latents, with K's rope part) for the latent norms,
        # and the normed latents the up-projections read (their own 1-byte copies in FP8)
        latents = model.q_lora_rank + model.kv_lora_rank
        attention += act * (latents + model.qk_rope_head_dim) + linear_in * latents
        if linear_in != act:  # FP8: the second down-projection keeps its own copy of its input
            attention += linear_in * h / seq_shard
    per_f = _mlp_saved_per_f(model, act, linear_in, framework)
    weighted = framework.moe_weighted_activation
    if not moe:
        mlp = per_f * model.ffn_hidden_size / tp
    else:
        k = model.moe_top_k
        mlp = k * (
            linear_in * h * _expert_share(layout) + per_f * model.expert_ffn_hidden_size / tp
        )
        mlp += 4 * model.num_experts + per_f * model.shared_expert_ffn_hidden_size / tp
        mlp += (act - linear_in) * h / seq_shard  # the router keeps the norm output in bf16
        if model.shared_expert_ffn_hidden_size and linear_in != act:
            mlp += linear_in * h / seq_shard  # the shared experts' FP8 copy of it
        if not weighted:
            mlp += k * act * h / seq_shard  # the combine keeps the experts' outputs
    masks = 2 * h / seq_shard if dropout else 0.0
    return norms + attention + lse + mlp + masks


def _mlp_saved_per_f(
    model: ModelSpec, act: int, linear_in: int, framework: FrameworkSpec
) -> float:
    """Bytes the MLP activation keeps per element of its output: SwiGLU's gate and up
    outputs, GeLU's input, and the output the second projection reads (``linear_in``); SwiGLU
    as PyTorch operators (``swiglu_keeps_silu``) keeps SiLU's output too."""
    if model.activation != "swiglu":
        return act + linear_in
    return act * (3 if framework.swiglu_keeps_silu else 2) + linear_in


def _ulysses_s(job: Job, token_bytes: float, layout: Layout) -> tuple[float, float]:
    """(forward, backward) seconds of the Ulysses all-to-alls on one TP rank, one call per
    tensor over the CP group (``token_bytes``: tokens times the activation bytes).

    Forward sends Q, K, V and the output. Transformer Engine's style sends K and V with the
    rank's KV heads, and in backward the kept output again beside its gradient, then dQ, dK,
    dV; DeepSpeed's style repeats K and V to the query heads (K as wide as Q, V as the output)
    and sends the four gradients (docs/reference.md 3.5).
    """
    model, cluster, train = job.model, job.cluster, job.train
    group = layout.group("cp", cluster.devices_per_node)
    q_width, out_width = model.q_width / layout.tp, model.attn_out_width / layout.tp
    forward: tuple[float, ...] = (q_width, q_width, out_width, out_width)
    backward = forward
    if train.framework.cp_a2a_style == "te":
        kv_width = _kv_local_width(model, layout.tp) / 2
        forward = (q_width, kv_width, kv_width, out_width)
        backward = (out_width, *forward)

    def exchanges_s(widths: tuple[float, ...]) -> float:
        return sum(all_to_all_time_s(token_bytes * width, group, cluster) for width in widths)

    return exchanges_s(forward), exchanges_s(backward)


def _tp_transfers(model: ModelSpec, moe: bool, train: TrainSpec) -> tuple[float, float]:
    """How many token-sized all-reduces (all-gather + reduce-scatter with SP) a layer runs in
    each pass: over TP (one around attention, one around a dense MLP), and over the experts'
    TP (ETP).

    An MoE layer's dispatcher gathers over ETP what the experts compute: the top-k copies that
    arrived by all-to-all (``alltoall``, ``deepep``), or the tokens once (``allgather``, whose
    ETP x EP gather is priced as an ETP stage here and an EP stage with the experts). Shared
    experts gather the tokens over TP again, as a dense MLP does (docs/reference.md 7.7).
    """
    if not moe:
        return 2.0, 0.0
    routed = 1 if train.token_dispatcher == "allgather" else model.moe_top_k
    shared = 1 if model.shared_expert_ffn_hidden_size else 0
    return 1.0 + shared, float(routed)


def _hide(seconds: float, idle_s: float) -> tuple[float, float]:
    """(exposed, idle left) of ``seconds`` of communication run in ``idle_s`` of device idle
    time."""
    return max(0.0, seconds - idle_s), max(0.0, idle_s - seconds)


# size: one term per line with its source; splitting would pass the same shapes to every piece
def layer_times_s(
    job: Job,
    moe: bool,
    layout: Layout,
    c: AnalyticalConstants,
) -> tuple[float, ...]:
    """The seconds of one layer (:class:`LayerCost`'s first eleven fields): compute, the core
    attention that selective recompute repeats, the exposed TP, EP and CP communication, what
    an activation checkpoint's own host calls add when the layer is recomputed, and what full
    recompute saves by running the recomputed forward and the backward as one phase. The
    recompute mode only says how often each applies, and what a layer keeps
    (:func:`layer_bytes`)."""
    model, cluster, train = job.model, job.cluster, job.train
    device = cluster.device
    precision = train.compute_dtype
    act = dtype_bytes(precision)
    tokens = layout.micro_batch * train.seq_len / layout.cp
    gemm_s, gemm_backward_s = _gemms_s(model, moe, tokens, layout, train, device)
    core_flops = tokens * model.core_attention_flops_per_token(train.seq_len) / layout.tp
    if job.flash_attention:
        core_s = core_flops / (device.peak_flops(precision) * c.attention_efficiency)
        core_backward_s = c.attention_backward_factor * core_s
    else:
        core_s, core_backward_s = _unfused_attention_s(model, tokens, train, layout, device, c)
    elementwise_s = (
        tokens
        * _elementwise_bytes_per_token(model, moe, layout, act, train, job.flash_attention)
        / (device.achieved_memory_bytes_per_s)
    )
    cast_s = (0.0, 0.0)
    if train.fp8:
        bandwidth = device.achieved_memory_bytes_per_s
        cast_bytes = _fp8_cast_bytes(model, moe, tokens, layout, act, train.fp8_kept)
        cast_s = (cast_bytes[0] / bandwidth, cast_bytes[1] / bandwidth)
    launch_s = c.kernels_per_layer_forward * c.kernel_overhead_us * 1e-6
    device_forward_s = gemm_s + core_s + elementwise_s + cast_s[0] + launch_s
    device_backward_s = (
        gemm_backward_s + 2 * (elementwise_s + launch_s) + core_backward_s + cast_s[1]
    )
    # Eager PyTorch issues every operator from one host thread; when the GPU work of a layer is
    # shorter than the host's dispatch of its operators, the host sets the pace. The backward
    # runs the autograd engine's nodes (weight-gradient accumulation included).
    host_op_s = c.host_op_overhead_us * 1e-6
    ops_forward, ops_backward = host_ops(job, layout, c)
    host_forward_s = ops_forward * host_op_s
    host_backward_s = ops_backward * host_op_s
    forward_s = max(device_forward_s, host_forward_s)
    backward_s = max(device_backward_s, host_backward_s)
    # The collectives below run on the device in the same sequence as the compute: while the
    # host sets the pace, they fill the device's idle time first (as the hierarchical
    # simulator's phases, max(device time with collectives, host time)).
    idle_fwd, idle_bwd = forward_s - device_forward_s, backward_s - device_backward_s

    # Tensor parallel: all-reduces (or all-gather + reduce-scatter with SP) each way.
    tp_group = layout.group("tp", cluster.devices_per_node)
    tp_bytes = tokens * model.hidden_size * act
    dense_transfers, routed_transfers = _tp_transfers(model, moe, train)
    tp_all = dense_transfers * all_reduce_time_s(tp_bytes, tp_group, cluster)
    if routed_transfers:  # the routed experts' gathers, over ETP ranks' share of the tokens
        etp_group = layout.group("etp", cluster.devices_per_node)
        expert_bytes = tp_bytes * _expert_share(layout)
        tp_all += routed_transfers * all_reduce_time_s(expert_bytes, etp_group, cluster)
    # With the overlap (userbuffers) the collectives run chunk by chunk under the GEMMs they
    # feed, so they hide up to those GEMMs' time.
    hidden = layout.hides_tp_comm(train)
    tp_pre = (
        (max(0.0, tp_all - gemm_s), max(0.0, tp_all - gemm_backward_s))
        if hidden
        else (tp_all, tp_all)
    )
    tp_forward, idle_fwd = _hide(tp_pre[0], idle_fwd)
    tp_backward, idle_bwd = _hide(tp_pre[1], idle_bwd)

    # Expert parallel: dispatch and combine all-to-alls of the top-k token copies.
    ep_exposed = 0.0
    if moe and layout.ep > 1:
        ep_group = layout.group("ep", cluster.devices_per_node)
        seq_shard = layout.tp if layout.sequence_parallel else 1
        token_bytes = tokens / seq_shard * model.hidden_size * act
        if train.token_dispatcher == "deepep":
            ep_exposed = 2 * deepep_time_s(token_bytes, model.moe_top_k, ep_group, cluster)
        elif train.token_dispatcher == "allgather":
            # Past the ETP stage each rank holds ETP ranks' tokens; the EP stage gathers the
            # group's (ep times as many) and reduce-scatters the outputs back.
            gathered = tokens * _expert_share(layout) * layout.ep * model.hidden_size * act
            ep_exposed = all_reduce_time_s(gathered, ep_group, cluster)
        else:
            ep_exposed = 2 * all_to_all_time_s(model.moe_top_k * token_bytes, ep_group, cluster)
    # With the EP all-to-all overlap, one micro-batch's forward runs beside another's backward
    # (Megatron-Core's combined 1F1B): each all-to-all hides under the other pass's compute.
    # The warm-up and cool-down passes, which have no partner, are not told apart.
    ep_pre = (
        (max(0.0, ep_exposed - backward_s), max(0.0, ep_exposed - forward_s))
        if train.moe_a2a_overlap
        else (ep_exposed, ep_exposed)
    )
    ep_forward, idle_fwd = _hide(ep_pre[0], idle_fwd)
    ep_backward, idle_bwd = _hide(ep_pre[1], idle_bwd)

    cp_pre = (0.0, 0.0)
    if layout.cp > 1 and train.context_exchange == "a2a":
        # Ulysses: all-to-alls around the attention kernel, which waits for them.
        cp_pre = _ulysses_s(job, tokens * act, layout)
    elif layout.cp > 1:
        # The ring passes K and V (forward) and K, V, dK, dV (backward) beside attention.
        cp_group = layout.group("cp", cluster.devices_per_node)
        kv_bytes = tokens * _kv_local_width(model, layout.tp) * act
        ring_s = ring_exchange_time_s((layout.cp - 1) * kv_bytes, cp_group, cluster)
        # each pass hides the ring under its own attention kernels (the unfused backward is
        # not the flash kernel's multiple of its forward)
        hidden_fwd = core_s if c.cp_comm_overlap else 0.0
        hidden_bwd = core_backward_s if c.cp_comm_overlap else 0.0
        cp_pre = (max(0.0, ring_s - hidden_fwd), max(0.0, 2 * ring_s - hidden_bwd))
    cp_forward = _hide(cp_pre[0], idle_fwd)[0]
    cp_backward = _hide(cp_pre[1], idle_bwd)[0]

    # An activation checkpoint's own host calls (RNG states saved and restored, inputs
    # detached, the inner backward) add to a pass's host time: they cost what they exceed the
    # margin by which the device's work (collectives included) outlasts the host's.
    margin_fwd = forward_s + tp_forward + ep_forward + cp_forward - host_forward_s
    margin_bwd = backward_s + tp_backward + ep_backward + cp_backward - host_backward_s
    checkpoint_backward_s = c.host_ops_per_checkpoint_backward * host_op_s
    checkpoint_s = max(0.0, c.host_ops_per_checkpoint_forward * host_op_s - margin_fwd)
    checkpoint_s += max(0.0, checkpoint_backward_s - margin_bwd)
    # Full recompute reruns a layer's forward inside its backward pass: the host issues the
    # recomputed forward and then the backward, and the device runs them as they come, so the
    # two are one host-device phase (as the hierarchical simulator's chunk phases), not two.
    # What one phase saves against two passes (at most the recomputed forward's own time):
    device_fwd = device_forward_s + tp_pre[0] + ep_pre[0] + cp_pre[0]
    device_bwd = device_backward_s + tp_pre[1] + ep_pre[1] + cp_pre[1]
    apart = (
        max(device_fwd, host_forward_s)
        + max(device_bwd, host_backward_s)
        + max(0.0, checkpoint_backward_s - margin_bwd)
    )
    together = max(
        device_fwd + device_bwd, host_forward_s + host_backward_s + checkpoint_backward_s
    )
    recompute_saving_s = min(forward_s, apart - together)
    return (
        forward_s,
        backward_s,
        core_s,
        tp_forward,
        tp_backward,
        ep_forward,
        ep_backward,
        cp_forward,
        cp_backward,
        checkpoint_s,
        recompute_saving_s,
    )


def layer_bytes(
    job: Job,
    moe: bool,
    layout: Layout,
    c: AnalyticalConstants,
) -> tuple[float, float, float]:
    """(saved activation bytes, input bytes, core attention's bytes that selective recompute
    rebuilds) of one layer: :class:`LayerCost`'s last fields."""
    model, train = job.model, job.train
    act = dtype_bytes(train.compute_dtype)
    tokens = layout.micro_batch * train.seq_len / layout.cp
    seq_shard = layout.tp if layout.sequence_parallel else 1
    linear_in = 1 if train.fp8_kept else act
    dropout = train.drops_out(model)
    flash = job.flash_attention
    weighted = train.framework.moe_weighted_activation
    activation_bytes = tokens * _activation_bytes_per_token(
        model, moe, layout, act, linear_in, dropout, flash, train.framework
    )
    if moe and not weighted and train.token_dispatcher == "allgather" and seq_shard > 1:
        # The allgather dispatcher weights the experts' outputs before its TP reduce-scatter,
        # so the combine keeps every gathered copy, not a sequence-parallel share of them.
        activation_bytes += (
            tokens * model.moe_top_k * act * model.hidden_size * (1 - 1 / seq_shard)
        )
    kept = "core_attn" not in layout.recomputed_modules  # selective recompute reruns it
    core_bytes = 0.0
    if not flash:
        # The unfused path keeps softmax output, dropout mask and dropout output: 5as/h per
        # token-hidden in Korthikanti et al. 2022 Table 2 (docs/reference.md 3.3); without
        # dropout, the softmax output alone.
        heads = model.num_attention_heads / layout.tp
        saved = _unfused_attention_bytes(model, train, layout, c)["saved"]
        core_bytes = tokens * heads * train.seq_len * saved
        if kept:
            activation_bytes += core_bytes
    ulysses = layout.cp > 1 and train.context_exchange == "a2a"
    if ulysses and train.framework.cp_a2a_style == "deepspeed" and kept:
        # DeepSpeed-style Ulysses: K and V repeated to the query heads, and a flash kernel's
        # own output (before the exchange back; the unfused path's backward reads its
        # probabilities and V, not its output) (docs/reference.md 3.5); selective recompute
        # keeps neither.
        repeated_kv = (model.q_width + model.attn_out_width) / layout.tp
        extra = repeated_kv - _kv_local_width(model, layout.tp)
        extra += model.attn_out_width / layout.tp if flash else 0.0
        activation_bytes += tokens * extra * act
    elif flash and kept and (train.framework.flash_output_copy or train.fp8_kept):
        # The kernel's output, kept for its backward beside the projection's rearranged copy
        # (docs/reference.md 3.3) or its FP8 one (7.6).
        activation_bytes += tokens * model.attn_out_width / layout.tp * act
    return activation_bytes, tokens * model.hidden_size * act / seq_shard, core_bytes
