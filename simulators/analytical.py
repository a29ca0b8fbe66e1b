"""The closed-form simulator: roofline operators, alpha-beta collectives, pipeline formulas.

Per micro-batch and pipeline stage it adds up the time of every layer's GEMMs (roofline),
flash attention, memory-bound elementwise work and kernel launches, plus the exposed tensor,
context and expert parallel communication. The pipeline runs ``m`` micro-batches at the pace
of the slowest stage plus a fill-and-drain bubble divided by the virtual stages
(Narayanan et al. 2021, docs/reference.md 3.4). Data-parallel gradient reduction hides behind the
last micro-batch's backward. Memory is weights, gradients and optimizer states (sharded by
DP or expert-DP with the distributed optimizer, docs/reference.md 3.2) plus the activations of the
micro-batches the schedule holds in flight (Korthikanti et al. 2022 with flash attention,
docs/reference.md 3.3), checked on every pipeline rank.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simulators._checks import constants_from_mapping
from simulators._checks import require_positive
from simulators.collectives import all_gather_time_s
from simulators.collectives import all_reduce_time_s
from simulators.collectives import all_to_all_time_s
from simulators.collectives import p2p_time_s
from simulators.collectives import reduce_scatter_time_s
from simulators.layout import Layout
from simulators.prediction import Prediction
from simulators.specs import ClusterSpec
from simulators.specs import DeviceSpec
from simulators.specs import ModelSpec
from simulators.specs import TrainSpec
from simulators.states import optimizer_step_s
from simulators.states import state_bytes_of
from simulators.states import state_memory_bytes

__all__ = ["AnalyticalConstants", "AnalyticalSimulator"]

GIB = 1024**3


@dataclass(frozen=True, slots=True, kw_only=True)
class AnalyticalConstants:
    """The simulator's own constants; ``conf/simulator/analytical.yaml`` gives their sources."""

    attention_efficiency: float
    attention_backward_factor: float
    kernels_per_layer_forward: int
    kernel_overhead_us: float
    host_ops_per_layer_forward: int
    host_op_overhead_us: float
    unfused_attention_bytes_per_score: Mapping[str, float]
    cp_comm_overlap: bool
    optimizer_traffic_bytes_per_param: float
    logits_bytes_per_element: float
    reserved_memory_gib: float

    def __post_init__(self) -> None:
        require_positive(
            "analytical simulator",
            attention_efficiency=self.attention_efficiency,
            attention_backward_factor=self.attention_backward_factor,
        )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> AnalyticalConstants:
        """Build from ``conf/simulator/analytical.yaml``; unknown or missing keys raise."""
        return constants_from_mapping(cls, values, "simulator analytical")


@dataclass(frozen=True, slots=True)
class _LayerCost:
    """One layer, one micro-batch, one device: seconds and saved-activation bytes."""

    forward_s: float  # compute of the forward pass
    backward_s: float  # compute of the backward pass
    core_attention_s: float  # forward flash attention (what selective recompute repeats)
    tp_forward_s: float  # exposed TP collectives of one forward
    tp_backward_s: float
    ep_forward_s: float  # expert all-to-alls of one forward
    ep_backward_s: float
    cp_s: float  # exposed context-parallel exchange, forward + backward
    activation_bytes: float  # saved for backward without recompute
    input_bytes: float  # the layer input, all that full recompute keeps


class AnalyticalSimulator:
    """Closed-form step time and memory; microseconds per layout.

    Example:
        >>> import catalog
        >>> catalog.load_simulator("analytical").name
        'analytical'
    """

    name = "analytical"

    def __init__(self, constants: AnalyticalConstants) -> None:
        self.constants = constants
        # A layer's cost depends on the layout fields marked ``layer_cost`` (Layout.layer_key):
        # layouts that differ only in dp, pp, vpp or optimizer sharding share it.
        self._layers: dict[tuple[object, ...], _LayerCost] = {}

    @classmethod
    def from_config(cls, constants: Mapping[str, Any]) -> AnalyticalSimulator:
        return cls(AnalyticalConstants.from_mapping(constants))

    def simulate(
        self, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, layout: Layout
    ) -> Prediction:
        return _simulate(model, cluster, train, layout, self.constants, self._layer_cost)

    def _layer_cost(
        self, model: ModelSpec, moe: bool, cluster: ClusterSpec, train: TrainSpec, layout: Layout
    ) -> _LayerCost:
        key = (model, moe, cluster, train, layout.layer_key())
        cost = self._layers.get(key)
        if cost is None:
            cost = self._layers[key] = _layer_cost(
                model, moe, cluster, train, layout, self.constants
            )
        return cost


# ---- operators ---------------------------------------------------------------------------


def gemm_time_s(m: float, k: float, n: float, device: DeviceSpec, precision: str) -> float:
    """Roofline time of an (m x k) @ (k x n) GEMM in ``precision``: compute- or memory-bound.

    An ``fp8`` GEMM reads FP8 operands and writes a bf16 result (Transformer Engine).
    """
    flops = 2.0 * m * k * n
    operand = 1 if precision == "fp8" else _dtype_bytes(precision)
    nbytes = operand * (m * k + k * n) + _dtype_bytes(precision) * m * n
    compute = flops / (device.peak_flops(precision) * device.matmul_efficiency)
    memory = nbytes / (device.achieved_memory_bytes_per_s)
    return max(compute, memory)


def _dtype_bytes(precision: str) -> int:
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


def _linear_gemms(
    model: ModelSpec, moe: bool, tokens: float, layout: Layout
) -> list[tuple[float, float, float, float]]:
    """(m, k, n, count) of a layer's linear layers: what FP8 runs in FP8 (not the router)."""
    tp = layout.tp
    gemms = [(m, k, n, 1.0) for m, k, n in _attention_gemms(model, tokens, tp)]
    if not moe:
        return gemms + _mlp_gemms(model, tokens, model.ffn_hidden_size, tp)
    local_experts = model.num_experts / layout.ep
    tokens_per_expert = model.moe_top_k * tokens / local_experts
    gemms += _mlp_gemms(model, tokens_per_expert, model.expert_ffn_hidden_size, tp, local_experts)
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
) -> float:
    """Forward GEMM seconds of one layer: linear layers (FP8 when the step runs it), router."""
    linear = "fp8" if train.fp8 else train.compute_dtype
    seconds = sum(
        count * gemm_time_s(m, k, n, device, linear)
        for m, k, n, count in _linear_gemms(model, moe, tokens, layout)
    )
    if moe:
        router = (tokens, model.hidden_size, model.num_experts)
        seconds += gemm_time_s(*router, device, train.compute_dtype)
    return seconds


def _elementwise_bytes_per_token(model: ModelSpec, moe: bool, layout: Layout, act: int) -> float:
    """HBM traffic of one layer's forward memory-bound kernels, per token on one device.

    Two norms (read + write h) and two residual adds (read 2h, write h), rotary embedding on
    Q and K, the MLP activation (SwiGLU reads gate and up, writes their product), and for MoE
    the permutation of the top-k token copies before and after the experts.
    """
    tp = layout.tp
    seq_shard = tp if layout.sequence_parallel else 1
    h = model.hidden_size
    norms_residuals = act * (2 * 2 * h + 2 * 3 * h) / seq_shard
    rope = 2 * act * (model.q_width / tp + _kv_local_width(model, tp) / 2)
    per_f = act * (3 if model.activation == "swiglu" else 2)
    if not moe:
        return norms_residuals + rope + per_f * model.ffn_hidden_size / tp
    k = model.moe_top_k
    mlp = k * per_f * model.expert_ffn_hidden_size / tp + per_f * (
        model.shared_expert_ffn_hidden_size / tp
    )
    permute = 2 * 2 * k * act * h
    return norms_residuals + rope + mlp + permute


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
    (QK^T, PV; dQ, dK, dP, dV backward) are rooflines over their score traffic; the masked
    softmax and the dropout are memory-bound passes over the scores (Korthikanti et al. 2022
    Table 2: fp16 scores, softmax output and dropout output, 1-byte dropout mask).
    """
    heads = model.num_attention_heads / layout.tp
    scores = tokens * heads * train.seq_len  # score elements of this micro-batch
    flops = 2.0 * model.core_attention_flops_per_token(train.seq_len) * tokens / layout.tp
    peak = device.peak_flops(train.compute_dtype) * device.matmul_efficiency
    bandwidth = device.achieved_memory_bytes_per_s
    b = c.unfused_attention_bytes_per_score
    forward = max(flops / peak, scores * b["forward_gemm"] / bandwidth)
    forward += scores * b["forward_elementwise"] / bandwidth
    backward = max(2 * flops / peak, scores * b["backward_gemm"] / bandwidth)
    backward += scores * b["backward_elementwise"] / bandwidth
    return forward, backward


def _activation_bytes_per_token(
    model: ModelSpec, moe: bool, layout: Layout, act: int, linear_in: int
) -> float:
    """Bytes one layer saves for backward per token, with flash attention (docs/reference.md 3.3).

    Norm inputs and outputs (4 tensors of h, split by TP only with SP), Q/K/V and the attention
    output plus fp32 log-sum-exp per head, MLA latents, and the MLP's gate, up and activation
    outputs (SwiGLU) or fc1 and GeLU outputs; an MoE layer keeps the dispatched top-k token
    copies, their expert activations and fp32 router probabilities. The inputs of the linear
    layers (norm outputs, attention output, MLP activation output, dispatched tokens) take
    ``linear_in`` bytes per element: 1 where FP8 layers save them quantized (docs/reference.md
    7.6), else ``act``.
    """
    tp = layout.tp
    seq_shard = tp if layout.sequence_parallel else 1
    h = model.hidden_size
    norms = 2 * (act + linear_in) * h / seq_shard
    attention = act * (model.q_width / tp + _kv_local_width(model, tp))
    attention += linear_in * model.attn_out_width / tp
    lse = 0.0 if layout.recompute == "selective" else 4 * model.num_attention_heads / tp
    if model.attention == "mla":
        attention += act * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
    per_f = act * (2 if model.activation == "swiglu" else 1) + linear_in
    if not moe:
        mlp = per_f * model.ffn_hidden_size / tp
    else:
        k = model.moe_top_k
        mlp = k * (linear_in * h + per_f * model.expert_ffn_hidden_size / tp)
        mlp += 4 * model.num_experts + per_f * model.shared_expert_ffn_hidden_size / tp
    return norms + attention + lse + mlp


# ---- one layer -----------------------------------------------------------------------------


def _layer_cost(
    model: ModelSpec,
    moe: bool,
    cluster: ClusterSpec,
    train: TrainSpec,
    layout: Layout,
    c: AnalyticalConstants,
) -> _LayerCost:
    device = cluster.device
    precision = train.compute_dtype
    act = _dtype_bytes(precision)
    tokens = layout.micro_batch * train.seq_len / layout.cp
    gemm_s = _gemms_s(model, moe, tokens, layout, train, device)
    core_flops = tokens * model.core_attention_flops_per_token(train.seq_len) / layout.tp
    if train.uses_flash_attention(cluster):
        core_s = core_flops / (device.peak_flops(precision) * c.attention_efficiency)
        core_backward_s = c.attention_backward_factor * core_s
    else:
        core_s, core_backward_s = _unfused_attention_s(model, tokens, train, layout, device, c)
    elementwise_s = (
        tokens
        * _elementwise_bytes_per_token(model, moe, layout, act)
        / (device.achieved_memory_bytes_per_s)
    )
    launch_s = c.kernels_per_layer_forward * c.kernel_overhead_us * 1e-6
    # Eager PyTorch issues every operator from one host thread; when the GPU work of a layer is
    # shorter than the host's dispatch of its operators, the host sets the pace. The backward
    # walks one autograd node per recorded forward operator.
    host_s = c.host_ops_per_layer_forward * c.host_op_overhead_us * 1e-6
    forward_s = max(gemm_s + core_s + elementwise_s + launch_s, host_s)
    backward_s = max(2 * (gemm_s + elementwise_s + launch_s) + core_backward_s, host_s)

    # Tensor parallel: two all-reduces (or all-gather + reduce-scatter with SP) each way.
    tp_group = layout.group("tp", cluster.devices_per_node)
    tp_one = all_reduce_time_s(tokens * model.hidden_size * act, tp_group, cluster)
    tp_exposed = 0.0 if train.framework.tp_comm_overlap else 2 * tp_one

    # Expert parallel: dispatch and combine all-to-alls of the top-k token copies.
    ep_exposed = 0.0
    if moe and layout.ep > 1:
        ep_group = layout.group("ep", cluster.devices_per_node)
        seq_shard = layout.tp if layout.sequence_parallel else 1
        send = model.moe_top_k * tokens / seq_shard * model.hidden_size * act
        ep_exposed = 2 * all_to_all_time_s(send, ep_group, cluster)

    # Context parallel: the ring passes K and V (forward) and K, V, dK, dV (backward).
    cp_s = 0.0
    if layout.cp > 1:
        cp_group = layout.group("cp", cluster.devices_per_node)
        kv_bytes = tokens * _kv_local_width(model, layout.tp) * act
        ring_s = all_gather_time_s(layout.cp * kv_bytes, cp_group, cluster)
        hidden_fwd = core_s if c.cp_comm_overlap else 0.0
        hidden_bwd = c.attention_backward_factor * core_s if c.cp_comm_overlap else 0.0
        cp_s = max(0.0, ring_s - hidden_fwd) + max(0.0, 2 * ring_s - hidden_bwd)

    seq_shard = layout.tp if layout.sequence_parallel else 1
    linear_in = 1 if train.fp8 else act
    activation_bytes = tokens * _activation_bytes_per_token(model, moe, layout, act, linear_in)
    if not train.uses_flash_attention(cluster) and layout.recompute != "selective":
        # The unfused path keeps softmax output, dropout mask and dropout output: 5as/h per
        # token-hidden in Korthikanti et al. 2022 Table 2 (docs/reference.md 3.3).
        heads = model.num_attention_heads / layout.tp
        saved = c.unfused_attention_bytes_per_score["saved"]
        activation_bytes += tokens * heads * train.seq_len * saved
    return _LayerCost(
        forward_s=forward_s,
        backward_s=backward_s,
        core_attention_s=core_s,
        tp_forward_s=tp_exposed,
        tp_backward_s=tp_exposed,
        ep_forward_s=ep_exposed,
        ep_backward_s=ep_exposed,
        cp_s=cp_s,
        activation_bytes=activation_bytes,
        input_bytes=tokens * model.hidden_size * act / seq_shard,
    )


# ---- stages, pipeline, data parallelism, memory ----------------------------------------------


@dataclass(frozen=True, slots=True)
class _Stage:
    """One pipeline rank: per-micro-batch times (s), parameters and activation bytes."""

    compute_s: float
    recompute_s: float
    tp_s: float
    cp_s: float
    ep_s: float
    pp_s: float
    last_backward_s: float  # backward of the last micro-batch (what DP reduction hides behind)
    dense_params: float  # parameters sharded by TP (reduced over DP x CP)
    expert_params: float  # routed-expert parameters (reduced over expert-DP)
    linear_params: float  # weights of the layers' linear GEMMs (FP8 caches copies of them)
    activation_bytes: float  # saved per micro-batch on this rank, after recompute
    working_bytes: float  # transient: one layer's activations in its backward, or the logits

    @property
    def per_microbatch_s(self) -> float:
        return self.compute_s + self.recompute_s + self.tp_s + self.cp_s + self.ep_s + self.pp_s


_LayerCostFn = Callable[[ModelSpec, bool, ClusterSpec, TrainSpec, Layout], _LayerCost]


def _p2p_s(
    model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, layout: Layout, tokens: float
) -> float:
    """Pipeline sends of one micro-batch on one rank, forward and backward, every chunk.

    The boundary activation is ``tokens x hidden``, 1/tp of it with sequence parallelism.
    Frameworks that slice sends over TP (DeepSpeed's partitioned pipeline, Megatron-LM's old
    scatter/gather; docs/reference.md 7.3) send each rank's 1/tp slice and all-gather it over
    TP on the receiver, inside the node.
    """
    if layout.pp == 1:
        return 0.0
    act = _dtype_bytes(train.compute_dtype)
    sliced = train.framework.p2p_tp_sliced and not layout.sequence_parallel
    full = tokens * model.hidden_size * act
    send = full / layout.tp if (layout.sequence_parallel or sliced) else full
    same_node = layout.group("pp", cluster.devices_per_node).per_node > 1
    seconds = p2p_time_s(send, same_node, cluster)
    if sliced and layout.tp > 1:
        seconds += all_gather_time_s(full, layout.group("tp", cluster.devices_per_node), cluster)
    return 2 * layout.vpp * seconds


def _logits(
    model: ModelSpec,
    cluster: ClusterSpec,
    train: TrainSpec,
    layout: Layout,
    tokens: float,
    c: AnalyticalConstants,
) -> tuple[float, float]:
    """(seconds, bytes) of the output layer and loss of one micro-batch on the last stage."""
    vocab = model.vocab_size / layout.tp
    seconds = 3 * gemm_time_s(
        tokens, model.hidden_size, vocab, cluster.device, train.compute_dtype
    )
    nbytes = tokens * vocab * c.logits_bytes_per_element
    return seconds + 2 * nbytes / cluster.device.achieved_memory_bytes_per_s, nbytes


def _dense_layers_in(model: ModelSpec, first: int, count: int) -> int:
    """How many of the layers ``first .. first + count - 1`` are dense (not MoE)."""
    if not model.is_moe:
        return count
    return min(max(model.first_dense_layers - first, 0), count)


def _stages(
    model: ModelSpec,
    cluster: ClusterSpec,
    train: TrainSpec,
    layout: Layout,
    c: AnalyticalConstants,
    layer_cost: _LayerCostFn,
) -> list[_Stage]:
    dense = layer_cost(model, False, cluster, train, layout)
    moe = layer_cost(model, True, cluster, train, layout) if model.is_moe else dense
    tokens = layout.micro_batch * train.seq_len / layout.cp
    p2p_s = _p2p_s(model, cluster, train, layout, tokens)
    logits_s, logits_bytes = _logits(model, cluster, train, layout, tokens, c)
    built: dict[tuple[int, int, bool, bool], _Stage] = {}  # most pipeline ranks are alike
    stage_list = []
    first_layer = 0
    counts = layout.stage_layers(model, train)
    for rank, count in enumerate(counts):
        n_dense = _dense_layers_in(model, first_layer, count)
        first_layer += count
        n_moe = count - n_dense
        key = (n_dense, n_moe, rank == 0, rank == layout.pp - 1)
        if key not in built:
            built[key] = _stage(
                model,
                layout,
                dense,
                moe,
                n_dense,
                n_moe,
                key[2],
                key[3],
                p2p_s,
                (logits_s, logits_bytes),
            )
        stage_list.append(built[key])
    return stage_list


def _stage(
    model: ModelSpec,
    layout: Layout,
    dense: _LayerCost,
    moe: _LayerCost,
    n_dense: int,
    n_moe: int,
    first: bool,
    last: bool,
    p2p_s: float,
    logits: tuple[float, float],
) -> _Stage:
    """One pipeline rank holding ``n_dense`` dense and ``n_moe`` MoE layers."""

    def total(attr: str) -> float:
        return n_dense * getattr(dense, attr) + n_moe * getattr(moe, attr)

    share = layout.recomputed_layers(n_dense + n_moe) / (n_dense + n_moe)
    full = layout.recompute == "full"
    if full:
        recompute_s = share * (total("forward_s") + total("tp_forward_s") + total("ep_forward_s"))
    elif layout.recompute == "selective":
        recompute_s = total("core_attention_s")
    else:
        recompute_s = 0.0
    linear_params = (
        n_dense * model.dense_layer_params + n_moe * model.moe_layer_non_expert_params
    ) / layout.tp
    dense_params = linear_params
    if first:
        dense_params += model.embedding_params / layout.tp
    if last:
        dense_params += model.hidden_size  # final norm (replicated; negligible)
        if model.output_params or layout.pp > 1:  # a tied head is copied to the last stage
            dense_params += model.vocab_size * model.hidden_size / layout.tp
    logits_s, logits_bytes = logits
    # The logits live until the loss backward is done, before any layer's backward starts.
    working = max(dense.activation_bytes, moe.activation_bytes, logits_bytes if last else 0)
    expert_params = n_moe * model.expert_params_per_layer / (layout.ep * layout.tp)
    return _Stage(
        compute_s=total("forward_s") + total("backward_s") + (logits_s if last else 0.0),
        recompute_s=recompute_s,
        tp_s=total("tp_forward_s")
        + total("tp_backward_s")
        + (share * total("tp_forward_s") if full else 0.0),
        cp_s=total("cp_s"),
        ep_s=total("ep_forward_s")
        + total("ep_backward_s")
        + (share * total("ep_forward_s") if full else 0.0),
        pp_s=p2p_s,
        last_backward_s=total("backward_s") / layout.vpp,
        dense_params=dense_params,
        expert_params=expert_params,
        linear_params=linear_params + expert_params,
        activation_bytes=(1 - share) * total("activation_bytes") + share * total("input_bytes"),
        working_bytes=working,
    )


def _in_flight_microbatches(layout: Layout, microbatches: int, rank: int) -> float:
    """Micro-batches whose activations pipeline rank ``rank`` holds at its peak.

    1F1B: stage i holds p - i (at most m). Interleaved: the first stage holds
    p * (1 + (p-1)/(p*v)) (Megatron theoretical_memory_usage.py, docs/reference.md 3.3).
    """
    held: float = min(microbatches, layout.pp - rank)
    if layout.vpp > 1:
        held *= 1 + (layout.pp - 1) / (layout.pp * layout.vpp)
    return held


def _dp_times_s(
    stage: _Stage, cluster: ClusterSpec, train: TrainSpec, layout: Layout, c: AnalyticalConstants
) -> tuple[float, float]:
    """(exposed gradient/parameter communication, optimizer step) of one pipeline rank.

    The framework says whether the gradient reduction hides behind the last micro-batch's
    backward, in which dtype it runs, and whether the parameter all-gather hides in the next
    forward (docs/reference.md 7.2).
    """
    framework = train.framework
    sizes = state_bytes_of(train, layout)
    grad_bytes = framework.grad_reduce_bytes(train.precision)
    dense_group = layout.group("dp_cp", cluster.devices_per_node)
    expert_group = layout.group("edp", cluster.devices_per_node)
    reduce_s = gather_s = 0.0
    for params, group in ((stage.dense_params, dense_group), (stage.expert_params, expert_group)):
        if group.size == 1 or params == 0:
            continue
        if layout.distributed_optimizer and framework.reduce_scatter_grads:
            reduce_s += reduce_scatter_time_s(params * grad_bytes, group, cluster)
        else:
            reduce_s += all_reduce_time_s(params * grad_bytes, group, cluster)
        if sizes.sharded_optimizer:  # each rank updated its shard: gather the new weights
            gather_s += all_gather_time_s(params * sizes.weight, group, cluster)
    overlapped = framework.overlap_grad_reduce
    exposed = max(0.0, reduce_s - stage.last_backward_s) if overlapped else reduce_s
    exposed += 0.0 if framework.overlap_param_gather else gather_s
    optimizer_s = optimizer_step_s(
        stage.dense_params,
        stage.expert_params,
        layout,
        sizes,
        c.optimizer_traffic_bytes_per_param,
        cluster.device,
    )
    return exposed, optimizer_s


def _memory_bytes(
    stage: _Stage,
    rank: int,
    microbatches: int,
    cluster: ClusterSpec,
    train: TrainSpec,
    layout: Layout,
    c: AnalyticalConstants,
) -> dict[str, float]:
    states = state_memory_bytes(
        stage.dense_params, stage.expert_params, layout, state_bytes_of(train, layout)
    )
    if train.fp8:  # Transformer Engine's FP8 weight copies (docs/reference.md 7.6)
        states["fp8_weights"] = stage.linear_params * cluster.device.fp8_weight_copies
    return {
        **states,
        "activations": stage.activation_bytes
        * _in_flight_microbatches(layout, microbatches, rank),
        "working": stage.working_bytes,
        "reserved": c.reserved_memory_gib * GIB,
    }


def _simulate(
    model: ModelSpec,
    cluster: ClusterSpec,
    train: TrainSpec,
    layout: Layout,
    c: AnalyticalConstants,
    layer_cost: _LayerCostFn,
) -> Prediction:
    stages = _stages(model, cluster, train, layout, c, layer_cost)
    m = layout.num_microbatches(train)
    slowest = max(stages, key=lambda s: s.per_microbatch_s)
    bubble_s = (sum(s.per_microbatch_s for s in stages) - slowest.per_microbatch_s) / layout.vpp
    dp_s, optimizer_s = max(
        (_dp_times_s(s, cluster, train, layout, c) for s in set(stages)), key=sum
    )
    breakdown = {
        "compute": m * slowest.compute_s,
        "recompute": m * slowest.recompute_s,
        "tp_comm": m * slowest.tp_s,
        "cp_comm": m * slowest.cp_s,
        "ep_comm": m * slowest.ep_s,
        "pp_comm": m * slowest.pp_s,
        "dp_comm": dp_s,
        "bubble": bubble_s,
        "optimizer": optimizer_s,
    }
    step_s = sum(breakdown.values())
    memories = [
        _memory_bytes(s, rank, m, cluster, train, layout, c) for rank, s in enumerate(stages)
    ]
    worst = max(memories, key=lambda mem: sum(mem.values()))
    world = layout.world_size
    tokens_per_s = train.tokens_per_step / step_s
    model_flops = model.flops_per_token(train.seq_len) * train.tokens_per_step
    return Prediction(
        step_time_s=step_s,
        memory_gib=sum(worst.values()) / GIB,
        memory_capacity_gib=cluster.device.memory_gib,
        breakdown=breakdown,
        memory_breakdown_gib={k: v / GIB for k, v in worst.items()},
        tokens_per_s_per_device=tokens_per_s / world,
        mfu=model_flops / (step_s * world * cluster.device.peak_flops(train.compute_dtype)),
        detail={
            "stage_layers": list(layout.stage_layers(model, train)),
            "stage_time_s": [s.per_microbatch_s for s in stages],
            "stage_memory_gib": [sum(mem.values()) / GIB for mem in memories],
        },
    )
