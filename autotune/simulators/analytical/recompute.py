"""What selective recompute of Megatron-Core's other submodules costs one layer: core attention
is :mod:`.layer`'s (``core_attention_s``, ``core_bytes``), the rest is here.

Each recomputed module's forward runs again in the backward, with the collectives inside it
(a dense MLP's TP all-gather and reduce-scatter, or all-reduce; the MoE layer's dispatch and
combine), and each checkpoint issues its own host calls. Its checkpoint frees what the module
saves inside but its input (``mlp``, ``moe``, ``shared_experts``), or the output the next
module saved (``moe_act``, ``layernorm``, ``mla_up_proj``); the backward rebuilds it
(:mod:`autotune.simulators.recompute_modules`, docs/decisions/0047-recompute-by-module.md).
"""

from __future__ import annotations

from autotune.simulators.analytical.constants import AnalyticalConstants
from autotune.simulators.analytical.layer import _activation_traffic_per_f
from autotune.simulators.analytical.layer import _attention_gemms
from autotune.simulators.analytical.layer import _expert_share
from autotune.simulators.analytical.layer import _kv_local_width
from autotune.simulators.analytical.layer import _linear_gemms
from autotune.simulators.analytical.layer import _mlp_gemms
from autotune.simulators.analytical.layer import _mlp_saved_per_f
from autotune.simulators.analytical.layer import _Roofline
from autotune.simulators.analytical.layer import _rope_bytes_per_token
from autotune.simulators.analytical.layer import _tp_transfers
from autotune.simulators.analytical.layer import dtype_bytes
from autotune.simulators.analytical.layer import host_ops
from autotune.simulators.analytical.layer import layer_bytes
from autotune.simulators.analytical.layer import layer_times_s
from autotune.simulators.collectives import all_reduce_time_s
from autotune.simulators.frameworks import FrameworkSpec
from autotune.simulators.job import Job
from autotune.simulators.layout import Layout
from autotune.simulators.recompute_modules import DEFAULT_MODULES
from autotune.simulators.recompute_modules import layer_modules
from autotune.simulators.recompute_modules import standalone_norms
from autotune.simulators.specs import ModelSpec
from autotune.simulators.specs import TrainSpec

__all__ = ["layer_bytes_with_modules", "layer_times_with_modules"]

Gemm = tuple[float, float, float, float]  # (m, k, n, count) of a linear layer


def layer_times_with_modules(
    job: Job,
    moe: bool,
    layout: Layout,
    c: AnalyticalConstants,
) -> tuple[float, ...]:
    """:func:`.layer.layer_times_s` and the three seconds :func:`module_times_s` adds."""
    base = layer_times_s(job, moe, layout, c)
    return (*base, *module_times_s(job, moe, layout, c, base))


def layer_bytes_with_modules(
    job: Job,
    moe: bool,
    layout: Layout,
    c: AnalyticalConstants,
) -> tuple[float, ...]:
    """:func:`.layer.layer_bytes` with what the module checkpoints free taken from the saved
    activations, and those bytes (rebuilt in the layer's backward) last."""
    saved, inputs, core = layer_bytes(job, moe, layout, c)
    freed = freed_bytes(job, moe, layout)
    return saved - freed, inputs, core, freed


def _modules(layout: Layout, model: ModelSpec, moe: bool) -> tuple[str, ...]:
    """The layout's modules but core attention that a layer of this kind has, whatever the
    recompute mode (the seconds are keyed without it; the stage counts them under selective
    recompute only)."""
    named = layout.recompute_modules or DEFAULT_MODULES
    return tuple(m for m in layer_modules(named, model, moe) if m != "core_attn")


def module_times_s(
    job: Job,
    moe: bool,
    layout: Layout,
    c: AnalyticalConstants,
    base: tuple[float, ...],
) -> tuple[float, float, float]:
    """(recomputed forward and checkpoint host seconds, exposed TP seconds, exposed EP
    seconds) that the modules other than core attention add to one layer's backward.

    The collectives repeat as exposed as in the forward (``base``: :func:`.layer.layer_times_s`):
    their share of its TP transfers, all its EP all-to-alls for ``moe``. The checkpoints' host
    calls cost what they exceed the passes' margins by, beyond core attention's own
    (``checkpoint_s``)."""
    model, train = job.model, job.train
    modules = _modules(layout, model, moe)
    if not modules:
        return 0.0, 0.0, 0.0
    fused = train.framework.fused_norm_linear
    forward_s = sum(_forward_s(name, job, moe, layout) for name in modules)
    tp_s = _tp_share(modules, job, moe, layout) * base[3]
    ep_s = base[5] if "moe" in modules else 0.0
    count = sum(standalone_norms(model, moe, fused) if m == "layernorm" else 1 for m in modules)
    core = int("core_attn" in (layout.recompute_modules or DEFAULT_MODULES))
    ops = host_ops(job, layout, c)
    host_s = _checkpoints_s(core + count, base, c, ops) - _checkpoints_s(core, base, c, ops)
    return forward_s + host_s, tp_s, ep_s


def _checkpoints_s(
    count: int, base: tuple[float, ...], c: AnalyticalConstants, ops: tuple[int, int]
) -> float:
    """Host seconds ``count`` activation checkpoints add to a layer beyond the margins by
    which its passes' device work outlasts their host calls ``ops`` (forward, backward; as
    ``checkpoint_s``)."""
    host_op_s = c.host_op_overhead_us * 1e-6
    forward_s, backward_s, _, tp_f, tp_b, ep_f, ep_b, cp_f, cp_b = base[:9]
    margin_fwd = forward_s + tp_f + ep_f + cp_f - ops[0] * host_op_s
    margin_bwd = backward_s + tp_b + ep_b + cp_b - ops[1] * host_op_s
    forward = count * c.host_ops_per_checkpoint_forward * host_op_s
    backward = count * c.host_ops_per_checkpoint_backward * host_op_s
    return max(0.0, forward - margin_fwd) + max(0.0, backward - margin_bwd)


def _tp_share(
    modules: tuple[str, ...],
    job: Job,
    moe: bool,
    layout: Layout,
) -> float:
    """The share of a layer's forward TP transfers inside the modules: a dense MLP's, the
    shared experts', the routed experts' gathers over ETP (:func:`.layer._tp_transfers`)."""
    model, cluster, train = job.model, job.cluster, job.train
    act = dtype_bytes(train.compute_dtype)
    tokens = layout.micro_batch * train.seq_len / layout.cp
    tp_bytes = tokens * model.hidden_size * act
    one = all_reduce_time_s(tp_bytes, layout.group("tp", cluster.devices_per_node), cluster)
    dense, routed = _tp_transfers(model, moe, train)
    etp = layout.group("etp", cluster.devices_per_node)
    experts = routed * all_reduce_time_s(tp_bytes * _expert_share(layout), etp, cluster)
    total = dense * one + experts
    if not total:
        return 0.0
    shared = float(bool(model.shared_expert_ffn_hidden_size))
    inside = {
        "mlp": one,
        "shared_experts": shared * one,
        "moe": shared * one + experts,
    }
    return sum(inside.get(name, 0.0) for name in modules) / total


def _forward_s(name: str, job: Job, moe: bool, layout: Layout) -> float:
    """Device seconds of one module's forward: its GEMMs (FP8 where the step runs them, with
    their input casts; the router's in the compute dtype) and its memory-bound traffic, as
    :func:`.layer.layer_times_s` prices the layer's."""
    model, cluster, train = job.model, job.cluster, job.train
    device = cluster.device
    act = dtype_bytes(train.compute_dtype)
    tokens = layout.micro_batch * train.seq_len / layout.cp
    gemms, traffic = _module_work(name, model, moe, layout, act, train.framework)
    linear = _Roofline.of(device, "fp8" if train.fp8 else train.compute_dtype)
    seconds = sum(count * linear.gemm_s(m, k, n) for m, k, n, count in _at(gemms, tokens))
    bandwidth = device.achieved_memory_bytes_per_s
    if train.fp8:  # each FP8 GEMM's activation operand cast first (layer._fp8_cast_bytes)
        cast = (act + 1) * sum(count * m * k for m, k, _, count in _at(gemms, tokens))
        seconds += cast / bandwidth
    if name == "moe":
        router = _Roofline.of(device, train.compute_dtype)
        seconds += router.gemm_s(tokens, model.hidden_size, model.num_experts)
    return seconds + tokens * traffic / bandwidth


def _at(gemms: list[Gemm], tokens: float) -> list[Gemm]:
    """GEMMs given per token of rows (m = 1 for each token) at ``tokens`` rows."""
    return [(m * tokens, k, n, count) for m, k, n, count in gemms]


def _module_work(
    name: str, model: ModelSpec, moe: bool, layout: Layout, act: int, framework: FrameworkSpec
) -> tuple[list[Gemm], float]:
    """The linear GEMMs of a module per token of rows, and its memory-bound bytes per token
    (the terms of :func:`.layer._elementwise_bytes_per_token` inside it)."""
    tp, h = layout.tp, model.hidden_size
    seq_shard = tp if layout.sequence_parallel else 1
    fused = framework.fused_norm_linear
    norm = 2 * act * h / seq_shard  # one norm reads and writes h
    per_f = _activation_traffic_per_f(model, act, framework)
    shared = model.shared_expert_ffn_hidden_size
    routed_act = model.moe_top_k * per_f * model.expert_ffn_hidden_size / tp
    if name == "mlp":  # fused: the pre-MLP norm runs inside linear_fc1
        ffn = model.ffn_hidden_size
        return _mlp_gemms(model, 1.0, ffn, tp), per_f * ffn / tp + norm * fused
    if name == "shared_experts":
        return _mlp_gemms(model, 1.0, shared, tp), per_f * shared / tp
    if name == "moe_act":
        return [], routed_act
    if name == "moe":
        attention = len(_attention_gemms(model, 1.0, tp))
        permute = 2 * 2 * model.moe_top_k * act * h * _expert_share(layout)
        return _linear_gemms(model, True, 1.0, layout)[attention:], (
            routed_act + per_f * shared / tp + permute
        )
    if name == "layernorm":
        return [], norm * standalone_norms(model, moe, fused)
    # mla_up_proj: the up projections (or linear_q_proj without a q LoRA) and RoPE
    heads = model.num_attention_heads / tp
    kv_up = (1.0, model.kv_lora_rank, heads * (model.qk_nope_head_dim + model.v_head_dim), 1.0)
    q_up = (1.0, model.q_lora_rank or h, model.q_width / tp, 1.0)
    return [kv_up, q_up], _rope_bytes_per_token(model, tp, act, framework)


def freed_bytes(job: Job, moe: bool, layout: Layout) -> float:
    """Bytes of one layer's saved activations that the checkpoints of its recomputed
    modules (under selective recompute, core attention apart) free, for one micro-batch."""
    model, train = job.model, job.train
    modules = [m for m in layer_modules(layout.recomputed_modules, model, moe) if m != "core_attn"]
    if "moe" in modules:  # the MoE layer's checkpoint frees what its parts' would
        modules = [m for m in modules if m not in ("moe_act", "shared_experts")]
    if not modules:
        return 0.0
    act = dtype_bytes(train.compute_dtype)
    tokens = layout.micro_batch * train.seq_len / layout.cp
    per_token = sum(_freed_per_token(m, model, moe, train, layout, act) for m in modules)
    if "moe" in modules and not train.framework.moe_weighted_activation:
        seq_shard = layout.tp if layout.sequence_parallel else 1
        if train.token_dispatcher == "allgather" and seq_shard > 1:  # as layer_bytes keeps
            per_token += model.moe_top_k * act * model.hidden_size * (1 - 1 / seq_shard)
    return tokens * per_token


def _freed_per_token(
    name: str, model: ModelSpec, moe: bool, train: TrainSpec, layout: Layout, act: int
) -> float:
    """What one module's checkpoint frees per token, in the terms of
    :func:`.layer._activation_bytes_per_token`."""
    tp, h = layout.tp, model.hidden_size
    seq_shard = tp if layout.sequence_parallel else 1
    linear_in = 1 if train.fp8_kept else act
    per_f = _mlp_saved_per_f(model, act, linear_in, train.framework)
    shared, k = model.shared_expert_ffn_hidden_size, model.moe_top_k
    fused = train.framework.fused_norm_linear
    if name == "mlp":  # fc1 and activation outputs; with a fused norm, the norm output too
        return per_f * model.ffn_hidden_size / tp + fused * linear_in * h / seq_shard
    if name == "shared_experts":  # and their FP8 copy of the norm output
        return per_f * shared / tp + (linear_in * h / seq_shard if linear_in != act else 0.0)
    if name == "moe_act":  # the routed copies' activation output, linear_fc2's input
        return k * linear_in * model.expert_ffn_hidden_size / tp
    if name == "moe":  # all the MoE part saves; its input, the norm output, is kept
        saved = k * (
            linear_in * h * _expert_share(layout) + per_f * model.expert_ffn_hidden_size / tp
        )
        saved += 4 * model.num_experts + per_f * shared / tp
        if shared and linear_in != act:
            saved += linear_in * h / seq_shard
        if not train.framework.moe_weighted_activation:
            saved += k * act * h / seq_shard
        return saved
    if name == "layernorm":  # each norm of its own: its output; the router keeps it in bf16
        norms = standalone_norms(model, moe, fused)
        pre_mlp = act if moe else linear_in
        first = norms - (1 if moe else 0) if fused else 1
        return (first * linear_in + (norms - first) * pre_mlp) * h / seq_shard
    # mla_up_proj: the queries, keys and values its output gives core attention
    return act * (model.q_width / tp + _kv_local_width(model, tp))
