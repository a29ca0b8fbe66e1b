"""The training framework: what the software stack does that changes step time or memory.

A simulator never branches on a framework's name; it asks the framework's facts, which live in
``conf/framework/<name>.yaml`` with their sources (docs/reference.md 7): how the layers are
split over pipeline stages, whether virtual stages exist, how the data-parallel gradient
reduction is timed and sized, what a pipeline send carries, and whether FP8 GEMMs exist.
"""

# size: one table of a stack's facts (FrameworkSpec), each field beside its check

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from autotune.simulators._checks import constants_from_mapping
from autotune.simulators._checks import require_choice
from autotune.simulators._checks import require_non_negative
from autotune.simulators.errors import SpecError
from autotune.simulators.fused_softmax import FUSED_SOFTMAX_RULES
from autotune.simulators.prediction import MEMORY_MEASURES
from autotune.simulators.recompute_modules import RECOMPUTE_MODULES

__all__ = [
    "CP_A2A_STYLES",
    "CP_COMM_TYPES",
    "GRAD_ACCUMULATIONS",
    "LAYER_SPLITS",
    "MOE_DISPATCHERS",
    "OPTIMIZER_MODES",
    "P2P_EXCHANGES",
    "RECOMPUTE_LAYERS_SPREADS",
    "ROPE_KERNELS",
    "FrameworkSpec",
    "StateBytes",
    "deepspeed_split",
    "deepspeed_splits",
]

# How context parallelism exchanges the sequence (docs/reference.md 3.5):
#   p2p  ring attention: K and V blocks pass round the CP ring beside the attention kernels
#        (Megatron-Core --cp-comm-type p2p, MindSpeed --context-parallel-algo megatron_cp_algo)
#   a2a  Ulysses: all-to-alls scatter the heads and gather the sequence before attention, and
#        the reverse after it (--cp-comm-type a2a, MindSpeed ulysses_cp_algo)
CP_COMM_TYPES = ("p2p", "a2a")
# How the a2a exchange is built (docs/reference.md 3.5):
#   te         Transformer Engine's AttnFuncWithCPAndQKVOA2A: one autograd function; Q and the
#              KV heads split as they are; the output is kept once, after its exchange, and sent
#              back again in backward beside its gradient
#   deepspeed  DeepSpeed-Ulysses' structure (MindSpeed's UlyssesContextAttention): an autograd
#              all-to-all around the local attention for each of Q, K, V and the output; the KV
#              heads are repeated to the query heads first (--kv-head-repeat-before-uly-alltoall)
CP_A2A_STYLES = ("te", "deepspeed")

# How a stack rotates Q and K (RoPE; docs/reference.md 3.3), and how often each rotated tensor
# crosses HBM in the forward, read or written, in units of the tensor in the model's dtype:
#   fused    one kernel (Transformer Engine's fused RoPE, MindSpeed's fused rotary kernel): 2
#   halves   t * cos + rotate_half(t) * sin as PyTorch operators (Megatron-DeepSpeed's
#            apply_rotary_pos_emb): mul 2, neg of one half 1, cat 2, mul 2, add 3: 10
#   complex  each pair of t cast to an fp32 complex number times the frequency, and back
#            (torchtitan's apply_rotary_emb): cast 3, complex mul 4, cast back 3: 10
ROPE_KERNELS = {"fused": 2, "halves": 10, "complex": 10}

# How MoE tokens reach their experts (docs/reference.md 7.7):
#   alltoall   a copy per routed expert, an all-to-all over EP (--moe-token-dispatcher-type
#              alltoall, what the recipes pass; every stack's default in conf/framework/)
#   allgather  every token all-gathered over the TP x EP group, each rank keeping the copies for
#              its experts, and reduce-scattered back (Megatron-Core's own default)
#   deepep     Megatron-Core's flex dispatcher with DeepEP: one copy per destination node
MOE_DISPATCHERS = ("alltoall", "allgather", "deepep")

# How a rank adds each micro-batch's weight gradients to what the step reduces
# (docs/reference.md 7.2):
#   fused      the weight-gradient GEMM accumulates into the gradient buffer in its epilogue
#              (Megatron's --gradient-accumulation-fusion, TE's fuse_wgrad_accumulation)
#   main_grad  the GEMM writes the gradient in the model dtype and Megatron's DDP hook adds it
#              into the buffer (param.main_grad.add_; --no-gradient-accumulation-fusion)
#   autograd   PyTorch adds it into param.grad in the model dtype (DeepSpeed's engine); an
#              optimizer that keeps a wider buffer (DeepSpeed's BF16_Optimizer) clears
#              param.grad before each backward and adds a cast copy into that buffer after it
GRAD_ACCUMULATIONS = ("fused", "main_grad", "autograd")

# How the optimizer states are held, by ZeRO stage (Layout.sharding): ``replicated`` on every
# data-parallel rank (0), ``distributed`` (Megatron's distributed optimizer, DeepSpeed ZeRO-1;
# Layout ``distributed_optimizer``), ``sharded_grads`` (ZeRO-2, Megatron-FSDP optim_grads:
# the gradients too) and ``sharded_params`` (ZeRO-3, Megatron-FSDP optim_grads_params: the
# parameters too). Every framework lists the first two, and the others for the stages it runs.
OPTIMIZER_MODES = ("replicated", "distributed", "sharded_grads", "sharded_params")


@dataclass(frozen=True, slots=True, kw_only=True)
class StateBytes:
    """Bytes per parameter that a rank keeps for each parameter it holds.

    ``weight`` and ``grad`` (the gradient buffer) are kept whole; ``optimizer`` bytes are kept
    whole too, ``sharded_optimizer`` bytes are split over data parallelism (the master weights
    and Adam moments of a distributed optimizer; DeepSpeed's bf16 optimizer shards them even
    without ZeRO). ``sharded_grad`` and ``sharded_weight`` are the gradient buffer and the
    weight where ZeRO-2 and ZeRO-3 split them over data parallelism too (0 below those stages);
    ``gathered_weight`` the bytes of the whole weight ZeRO-3 gathers from that shard (None: the
    shard's dtype; torchtitan's FSDP2 gathers its fp32 shard as bf16). ``step_grad`` and
    ``sharded_step_grad`` (whole, and split over data parallelism) are what the optimizer
    allocates for its step alone, the fp32 copy of 16-bit gradients it updates from, and frees
    before the next forward: they never share the device with activations
    (:func:`autotune.simulators.states.step_excess_bytes`).
    """

    weight: float
    grad: float
    optimizer: float
    sharded_optimizer: float
    sharded_grad: float = 0.0
    sharded_weight: float = 0.0
    gathered_weight: float | None = None
    step_grad: float = 0.0
    sharded_step_grad: float = 0.0

    def __post_init__(self) -> None:
        require_non_negative(
            "state bytes",
            weight=self.weight,
            grad=self.grad,
            optimizer=self.optimizer,
            sharded_optimizer=self.sharded_optimizer,
            sharded_grad=self.sharded_grad,
            sharded_weight=self.sharded_weight,
            gathered_weight=self.gathered_weight or 0.0,
            step_grad=self.step_grad,
            sharded_step_grad=self.sharded_step_grad,
        )

    @property
    def gather_bytes(self) -> float:
        """Bytes per parameter of a weight ZeRO-3 gathers whole: ``gathered_weight`` where the
        gather casts the shard (FSDP2 keeps an fp32 shard and gathers bf16), else the shard's
        own ``sharded_weight``."""
        return self.sharded_weight if self.gathered_weight is None else self.gathered_weight


def _state_table(values: Mapping[str, Any]) -> dict[str, dict[str, StateBytes]]:
    """``{precision: {mode: {weight, grad, optimizer, sharded_optimizer, ...}}}``: ``replicated``
    always, the other modes (:data:`OPTIMIZER_MODES`) for the ZeRO stages the framework runs."""
    try:
        table = {
            str(precision): {str(mode): StateBytes(**dict(sizes)) for mode, sizes in modes.items()}
            for precision, modes in values.items()
        }
    except (TypeError, AttributeError) as exc:
        raise SpecError(
            f"state_bytes_per_param: {exc}; expected {{precision: {{replicated|distributed: "
            "{weight, grad, optimizer, sharded_optimizer}}}}"
        ) from None
    for precision, modes in table.items():
        if not {OPTIMIZER_MODES[0]} <= set(modes) <= set(OPTIMIZER_MODES):
            raise SpecError(
                f"state_bytes_per_param.{precision}: expected {OPTIMIZER_MODES[0]} "
                f"and any of {', '.join(OPTIMIZER_MODES[1:])}, got {', '.join(modes)}"
            )
    return table


# How a framework assigns layers to pipeline stages when nothing explicit is given, and which
# explicit splits it can express:
#   even       num_layers % pp == 0 is required; no other split (Megatron-LM of 2020-22)
#   any        an even split by default; any split through its flags (Megatron-Core's
#              --pipeline-model-parallel-layout / first-last flags, MindSpeed's
#              --num-layer-list / --noop-layers); layers that do not divide go to the middle
#   deepspeed  DeepSpeed PipelineModule, partition 'type:transformer': the first
#              num_layers % pp stages take one layer more; no other split
LAYER_SPLITS = ("even", "any", "deepspeed")
# How a pipeline rank trades a micro-batch with a neighbour (docs/reference.md 7.3): the
# activation and its gradient at once (Megatron's send_forward_recv_backward), or one after
# the other, each a blocking send and receive (DeepSpeed's TrainSchedule).
P2P_EXCHANGES = ("batched", "sequential")
# How full recompute of k layers per pipeline stage (Layout.recompute_layers) runs over the
# model chunks of an interleaved rank (docs/reference.md 4.1, 4.2); one chunk takes min(k, its
# layers) every way:
#   per_chunk  the count is per model chunk (Megatron-Core's --recompute-num-layers with
#              --recompute-method block: the first that many layers of each chunk); the launch
#              files pass ceil(k / vpp), so a rank recomputes up to vpp - 1 layers more than k
#   per_rank   k per rank (MindSpeed's --enable-recompute-layers-per-pp-rank, which the launch
#              files pass): layer l of chunk c is recomputed when l * vpp + c < k
#   every_nth  k per rank, every (S / k)-th of its S blocks whole, counted over its chunks in
#              order (torchtitan's selective_ac_option N, a module-level counter)
RECOMPUTE_LAYERS_SPREADS = ("per_chunk", "per_rank", "every_nth")


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameworkSpec:
    """A training stack as it is run: the facts the simulators and the layout rules ask.

    ``virtual_pipeline``: interleaved 1F1B exists. ``p2p_tp_sliced``: a pipeline send carries
    each TP rank's 1/tp slice of the activation, all-gathered over TP by the receiver
    (DeepSpeed's partitioned pipeline, Megatron-LM's old scatter/gather); otherwise each rank
    sends the whole activation (1/tp of it only with sequence parallelism).
    ``overlap_p2p_comm``: the interleaved schedule runs its pipeline transfers beside the next
    chunk's compute (Megatron-Core's default with virtual stages); otherwise they block.
    ``flash_attention``: the stack has fused (flash) attention; without it every job runs
    Megatron's unfused path. ``flash_output_copy``: the flash-attention path keeps the kernel's
    output for its backward and, apart from it, the rearranged copy the output projection
    reads (Megatron-DeepSpeed's ``FlashSelfAttention``); otherwise the projection reads the
    kernel's output itself. ``flash_input_copy``: the flash-attention path copies Q, K and V
    into the kernel's layout first (Megatron-DeepSpeed's ``rearrange(...).contiguous()``).
    ``gqa_repeats_kv``: with fewer KV heads than query heads, K and V are copied out to the
    query heads before attention, which keeps them at that width (Megatron-DeepSpeed's
    ``repeat_kv``); otherwise the kernel reads the KV heads as they are. ``rope_kernel``: how
    Q and K are rotated (:data:`ROPE_KERNELS`). ``swiglu_keeps_silu``: SwiGLU runs as PyTorch
    operators, ``F.silu(gate) * up``, and keeps SiLU's output for the product's backward
    beside the gate and up outputs (Megatron-DeepSpeed, torchtitan); otherwise one fused
    kernel keeps only its input (Megatron-Core's ``bias_swiglu_impl``, MindSpeed's
    ``npu_swiglu``). On the unfused path, the fused softmax kernel takes keys up to
    ``fused_softmax_max_seq`` and shapes that pass ``fused_softmax_rule``'s check
    (:mod:`autotune.simulators.fused_softmax`); other shapes run PyTorch's fp32 softmax.
    ``logits_bytes_per_element``: what the last stage's logits and loss hold per element of
    the logits at their peak; ``vocab_parallel_logits_bytes_per_element`` the same when TP
    splits the vocabulary (:meth:`logits_bytes`); ``logits_16bit_bytes_per_element``: of
    both, the bytes of the 16-bit logits (or of their gradient) at the peak, which an fp32 run
    lacks: its output layer writes fp32 logits and the loss's ``.float()`` returns them as
    they are.
    ``can_overlap_grad_reduce``: the data-parallel gradient reduction can run in buckets during
    the last micro-batch's backward (Megatron-Core's DDP); ``overlap_grad_reduce``: it does as
    the framework is usually run (else after the whole pipeline). ``overlap_param_gather``: the
    distributed optimizer's parameter all-gather hides in the next forward. A run may say
    otherwise (:class:`simulators.TrainSpec`).
    ``grad_accumulation``: how each micro-batch's weight gradients reach the gradient buffer
    (:data:`GRAD_ACCUMULATIONS`); ``expert_grad_accumulation``: the same for the routed
    experts' grouped GEMMs. ``grad_reduce_in_fp32``: bf16 gradients are reduced in fp32
    (Megatron's fp32 main grads), else in the model's dtype; ``grad_reduce_fixed_for``: the
    precisions whose gradient dtype the stack fixes, whatever a run asks (torchtitan's FSDP2
    reduces in fp32 only; Megatron-LM of 2022 forces fp32 for bf16). Buckets hold
    ``max(grad_bucket_params_min, grad_bucket_params_per_dp * dp)`` gradients;
    ``reduce_scatter_grads``: a distributed optimizer reduce-scatters the gradients (else
    every rank all-reduces them).
    ``state_bytes_per_param``: what a rank keeps per parameter, by precision and optimizer
    mode (:class:`StateBytes`). ``tp_comm_overlap``: TP collectives hide behind GEMMs.
    ``fp8``: FP8 GEMMs (Transformer Engine, torchao). ``fp8_keeps_quantized``: FP8 layers keep
    FP8 tensors between passes, the weights' FP8 copies (``DeviceSpec.fp8_weight_copies``) and
    their inputs saved quantized (Transformer Engine); otherwise each pass casts anew from the
    high-precision tensors the layer saves (torchao, docs/decisions/0062).
    ``fp8_param_gather``: FP8 runs keep the
    linear layers' weights only in FP8 (``--fp8-param-gather``; no bf16 copy of them) and
    all-gather them in FP8. ``moe_dispatchers``: the MoE token dispatchers the stack can run
    (:data:`MOE_DISPATCHERS`), the one it runs unless told first.
    ``expert_tensor_parallel``: the experts can have a TP degree of their own (ETP, Megatron's
    ``--expert-tensor-parallel-size``); without it they reuse TP.
    ``moe_a2a_overlap``: the expert all-to-all can run under another micro-batch's compute
    (Megatron-Core's ``--overlap-moe-expert-parallel-comm``). ``moe_weighted_activation``: the
    routed experts weight their activation by the router's probabilities, so the combine only
    sums the experts' outputs; otherwise the combine multiplies those outputs by the
    probabilities and keeps them for the probabilities' gradient (top-k copies of the hidden
    state per token). ``cp_comm_types``: the context-
    parallel exchanges the stack can run (:data:`CP_COMM_TYPES`), its default first; empty: no
    context parallelism. ``cp_a2a_style``: how its all-to-all exchange is built
    (:data:`CP_A2A_STYLES`; None without one); ``cp_a2a_gqa``: that exchange runs models with
    fewer KV heads than query heads (else multi-head attention only);
    ``cp_excludes_sequence_parallel``: context parallelism and Megatron's sequence parallelism
    cannot run together.
    ``recompute_modules``: the submodules selective recompute can checkpoint on this stack
    (Megatron-Core's ``--recompute-modules``; :mod:`autotune.simulators.recompute_modules`),
    core attention first (empty: no selective recompute the simulators price);
    ``recompute_layers_spread``: how full recompute of ``Layout.recompute_layers`` per stage
    runs over an interleaved rank's chunks (:data:`RECOMPUTE_LAYERS_SPREADS`,
    :meth:`recomputed_chunk_layers`);
    ``fused_norm_linear``: a norm before a plain linear layer runs
    inside it (Transformer Engine's ``LayerNormLinear``), so only the norms of their own
    (MLA's input norm, the MoE router's) are left for ``layernorm`` to recompute.
    ``zero_stages``: the ZeRO stages the stack runs (:data:`simulators.ZERO_STAGES`: 0 and 1
    everywhere, 2 and 3 through Megatron-FSDP or DeepSpeed's ZeRO), ``pipeline_zero_stages``
    those it runs with pipeline parallelism; ``hybrid_sharding``: the sharded states can be
    replicated over groups of data-parallel ranks (``Layout.dp_replicate``);
    ``shard_overlap_stages``: the stages whose per-layer gather and reduce-scatter run beside
    the compute by default; ``shard_prefetch_params``: parameters all-gathered ahead of the
    layer in use under ZeRO-3; ``pipeline_keeps_gathered``: with pipeline parallelism ZeRO-3
    keeps a stage's weights gathered and its gradients whole (accumulated in the reduction's
    dtype) from the first micro-batch to the stage's last backward, gathering and
    reduce-scattering once a step (torchtitan: FSDP2 with ``reshard_after_forward = not pp``
    under PyTorch's pipeline stage, which turns off gradient sync between micro-batches); an
    interleaved rank's chunks, each a stage, free theirs one after the other
    (docs/decisions/0060).
    ``ddp_alone``: replicated data parallelism (ZeRO-0 with dp > 1) runs only without TP, PP and
    CP (torchtitan's DDP). ``replicas_outside_cp``: hybrid sharding replicates over data-parallel
    ranks only, so the replicas divide DP (torchtitan's ``dp_replicate`` x ``dp_shard`` = DP;
    else they divide DP x CP). ``sequence_parallel_always``: TP runs with sequence parallelism
    only (torchtitan's TP plan). ``seq_len_tp_2cp``: the sequence length is a multiple of
    tp x 2 x cp, whatever the CP degree (torchtitan's ``seq_len_divisor``).
    ``release``: the release of the stack the launch files are written for (the launchers
    write only options it accepts); ``releases``: the releases autotune knows, oldest first.
    ``logged_peak_memory``: what the peak memory the stack's log prints counts
    (:data:`simulators.prediction.MEMORY_MEASURES`), the measure a probe's filled-in peak is
    read as.
    The facts above do not change between them, but for ``unequal_chunks_since``: the first
    release that can give virtual stages unequal layer counts (None: every release can).
    """

    name: str
    layer_split: str
    virtual_pipeline: bool
    p2p_tp_sliced: bool
    p2p_exchange: str
    overlap_p2p_comm: bool
    flash_attention: bool
    flash_output_copy: bool
    flash_input_copy: bool
    gqa_repeats_kv: bool
    rope_kernel: str
    swiglu_keeps_silu: bool
    fused_softmax_max_seq: int
    fused_softmax_rule: str
    logits_bytes_per_element: float
    vocab_parallel_logits_bytes_per_element: float
    logits_16bit_bytes_per_element: float
    grad_accumulation: str
    expert_grad_accumulation: str
    can_overlap_grad_reduce: bool
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    grad_reduce_in_fp32: bool
    grad_reduce_fixed_for: tuple[str, ...]
    grad_bucket_params_min: int
    grad_bucket_params_per_dp: int
    reduce_scatter_grads: bool
    state_bytes_per_param: Mapping[str, Mapping[str, StateBytes]] = field(hash=False)
    tp_comm_overlap: bool
    fp8: bool
    fp8_param_gather: bool
    fp8_keeps_quantized: bool
    moe_dispatchers: tuple[str, ...]
    moe_a2a_overlap: bool
    expert_tensor_parallel: bool
    moe_weighted_activation: bool
    cp_comm_types: tuple[str, ...]
    cp_a2a_style: str | None
    cp_a2a_gqa: bool
    cp_excludes_sequence_parallel: bool
    recompute_modules: tuple[str, ...]
    recompute_layers_spread: str
    fused_norm_linear: bool
    zero_stages: tuple[int, ...]
    pipeline_zero_stages: tuple[int, ...]
    hybrid_sharding: bool
    shard_overlap_stages: tuple[int, ...]
    shard_prefetch_params: int
    pipeline_keeps_gathered: bool
    ddp_alone: bool
    replicas_outside_cp: bool
    sequence_parallel_always: bool
    seq_len_tp_2cp: bool
    release: str
    releases: tuple[str, ...]
    logged_peak_memory: str
    unequal_chunks_since: str | None = None

    @classmethod
    def from_mapping(cls, name: str, values: Mapping[str, Any]) -> FrameworkSpec:
        """Build from ``conf/framework/<name>.yaml``; unknown or missing keys raise SpecError."""
        return constants_from_mapping(
            cls,
            values,
            f"framework {name!r}",
            {
                "state_bytes_per_param": _state_table,
                "cp_comm_types": tuple,
                "moe_dispatchers": tuple,
                "recompute_modules": tuple,
                "grad_reduce_fixed_for": tuple,
                "zero_stages": tuple,
                "pipeline_zero_stages": tuple,
                "shard_overlap_stages": tuple,
                "releases": tuple,
            },
            fixed={"name": name},
        )

    def __post_init__(self) -> None:
        owner = f"framework {self.name!r}"
        require_choice(owner, "layer_split", self.layer_split, LAYER_SPLITS)
        require_choice(owner, "p2p_exchange", self.p2p_exchange, P2P_EXCHANGES)
        require_choice(owner, "logged_peak_memory", self.logged_peak_memory, MEMORY_MEASURES)
        require_choice(owner, "fused_softmax_rule", self.fused_softmax_rule, FUSED_SOFTMAX_RULES)
        require_choice(owner, "rope_kernel", self.rope_kernel, tuple(ROPE_KERNELS))
        require_choice(
            owner,
            "recompute_layers_spread",
            self.recompute_layers_spread,
            RECOMPUTE_LAYERS_SPREADS,
        )
        require_non_negative(
            owner, logits_16bit_bytes_per_element=self.logits_16bit_bytes_per_element
        )
        logits = min(self.logits_bytes_per_element, self.vocab_parallel_logits_bytes_per_element)
        if self.logits_16bit_bytes_per_element > logits:
            raise SpecError(
                f"{owner}: logits_16bit_bytes_per_element={self.logits_16bit_bytes_per_element} "
                f"exceeds the {logits} bytes the loss holds per logit"
            )
        for name in ("grad_accumulation", "expert_grad_accumulation"):
            require_choice(owner, name, getattr(self, name), GRAD_ACCUMULATIONS)
        require_non_negative(
            owner,
            grad_bucket_params_min=self.grad_bucket_params_min,
            grad_bucket_params_per_dp=self.grad_bucket_params_per_dp,
        )
        if self.overlap_grad_reduce and not self.can_overlap_grad_reduce:
            raise SpecError(f"{owner}: overlap_grad_reduce needs can_overlap_grad_reduce")
        if self.overlap_param_gather and not self.overlap_grad_reduce:
            raise SpecError(f"{owner}: overlap_param_gather needs overlap_grad_reduce")
        for kind in self.cp_comm_types:
            require_choice(owner, "cp_comm_types", kind, CP_COMM_TYPES)
        if not self.moe_dispatchers:
            raise SpecError(
                f"{owner}: moe_dispatchers lists none; it needs its default first, from "
                f"{', '.join(MOE_DISPATCHERS)}"
            )
        for kind in self.moe_dispatchers:
            require_choice(owner, "moe_dispatchers", kind, MOE_DISPATCHERS)
        for name in self.recompute_modules:
            require_choice(owner, "recompute_modules", name, RECOMPUTE_MODULES)
        if self.recompute_modules and self.recompute_modules[0] != "core_attn":
            raise SpecError(
                f"{owner}: recompute_modules must start with core_attn (selective), or be empty "
                "(no selective recompute)"
            )
        if "a2a" in self.cp_comm_types:
            require_choice(owner, "cp_a2a_style", str(self.cp_a2a_style), CP_A2A_STYLES)
        self._check_sharding(owner)
        if self.release not in self.releases:
            raise SpecError(
                f"framework.release={self.release!r} is not a release of {self.name} that "
                f"autotune writes launch files for; supported: {', '.join(self.releases)}"
            )
        since = self.unequal_chunks_since
        if since is not None and since not in self.releases:
            raise SpecError(f"{owner}: unequal_chunks_since={since!r} is not in releases")

    def _check_sharding(self, owner: str) -> None:
        """ZeRO stages 0 and 1 everywhere; each stage beyond has its state bytes."""
        require_non_negative(owner, shard_prefetch_params=self.shard_prefetch_params)
        if not {0} <= set(self.zero_stages) <= set(range(len(OPTIMIZER_MODES))):
            raise SpecError(f"{owner}: zero_stages must list 0, and stages up to 3 only")
        if not set(self.pipeline_zero_stages) <= set(self.zero_stages):
            raise SpecError(f"{owner}: pipeline_zero_stages must be among zero_stages")
        for precision, modes in self.state_bytes_per_param.items():
            lacking = [
                OPTIMIZER_MODES[s] for s in self.zero_stages if OPTIMIZER_MODES[s] not in modes
            ]
            if lacking:
                raise SpecError(
                    f"{owner}: state_bytes_per_param.{precision} lacks {', '.join(lacking)} "
                    "for its zero_stages"
                )

    @property
    def unequal_chunks(self) -> bool:
        """Whether this release can give virtual stages unequal layer counts."""
        since = self.unequal_chunks_since
        return since is None or self.releases.index(self.release) >= self.releases.index(since)

    def logits_bytes(self, tp: int, compute_dtype: str) -> float:
        """Bytes per element of the last stage's logits at their peak: the loss's own way
        (``logits_bytes_per_element``), or its vocabulary-parallel way when TP splits the
        logits (``vocab_parallel_logits_bytes_per_element``); without the 16-bit logits'
        share (``logits_16bit_bytes_per_element``) where the activations' dtype
        (``TrainSpec.compute_dtype``) is fp32."""
        nbytes = (
            self.vocab_parallel_logits_bytes_per_element
            if tp > 1
            else self.logits_bytes_per_element
        )
        if compute_dtype == "fp32":
            return nbytes - self.logits_16bit_bytes_per_element
        return nbytes

    def recomputed_chunk_layers(self, count: int, chunks: Sequence[int]) -> tuple[int, ...]:
        """Layers of each model chunk of a pipeline rank that full recompute checkpoints, as
        this stack runs ``count`` layers per stage (``Layout.recompute_layers``;
        :data:`RECOMPUTE_LAYERS_SPREADS`): ``chunks`` holds the layers of the rank's chunks,
        its first chunk first. The launch files give Megatron the largest of them."""
        vpp, total = len(chunks), sum(chunks)
        if self.recompute_layers_spread == "per_chunk":  # --recompute-num-layers per chunk
            each = -(-count // vpp)
            return tuple(min(each, layers) for layers in chunks)
        if self.recompute_layers_spread == "per_rank":  # layer l of chunk c: l * vpp + c < k
            return tuple(
                min(layers, max(0, -(-(count - chunk) // vpp)))
                for chunk, layers in enumerate(chunks)
            )
        if total == 0:
            return tuple(chunks)
        kept = min(count, total)  # blocks checkpointed up to each chunk's end: floor(end / N)
        marks = [end * kept // total for end in itertools.accumulate(chunks, initial=0)]
        return tuple(b - a for a, b in itertools.pairwise(marks))

    def boundary_s(self, transfer_s: float, gather_s: float) -> float:
        """What one pipeline boundary costs a middle rank per micro-batch (1F1B): ``transfer_s``
        a send of the boundary activation, ``gather_s`` its TP all-gather on arrival where sends
        are sliced over TP.

        Batched, the activation and the gradient cross at once: one transfer and one gather.
        Sequential (DeepSpeed), both cross one after the other, each blocking both ranks: two
        transfers; the rank all-gathers the received activation, its own output (rebuilt for
        its backward) and the received gradient, three gathers over its two boundaries.
        """
        if self.p2p_exchange == "sequential":
            return 2 * transfer_s + 1.5 * gather_s
        return transfer_s + gather_s

    @property
    def cp_comm_type(self) -> str | None:
        """The context-parallel exchange the stack runs unless told (None: it has no CP)."""
        return self.cp_comm_types[0] if self.cp_comm_types else None

    def default_split(self, num_layers: int, pp: int) -> tuple[int, ...]:
        """Layers per pipeline stage when the layout gives no explicit split.

        An even split when ``pp`` divides the layers. Otherwise DeepSpeed gives the first
        ``num_layers % pp`` stages one layer more; frameworks that take any split put the extra
        layers on the middle stages (the first holds the embedding, the last the output layer
        and the loss); a framework with only even splits has none (the rules refuse it).
        """
        base, extra = divmod(num_layers, pp)
        if extra == 0:
            return (base,) * pp
        if self.layer_split == "deepspeed":
            return deepspeed_split(num_layers, pp, balanced=False, embedding_slots=False)
        by_centre = sorted(range(pp), key=lambda rank: (min(rank, pp - 1 - rank), rank))
        heavier = set(by_centre[::-1][:extra])
        return tuple(base + (rank in heavier) for rank in range(pp))

    def split_variants(self, num_layers: int, pp: int) -> dict[str, tuple[int, ...]]:
        """The splits worth searching, by name: ``default`` and, where the framework takes
        any split, ``light_ends``: the first and last stages one layer lighter for the
        embedding and the output layer with the loss (Megatron's
        ``--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split``:
        ``num_layers + 2`` slots split evenly, the two end slots not layers)."""
        variants = {"default": self.default_split(num_layers, pp)}
        if self.layer_split == "any" and pp > 2:
            slots = list(self.default_split(num_layers + 2, pp))
            slots[0], slots[-1] = slots[0] - 1, slots[-1] - 1
            light = tuple(slots)
            if min(light) >= 1 and light != variants["default"]:
                variants["light_ends"] = light
        return variants

    def can_split(self, split: tuple[int, ...], num_layers: int) -> bool:
        """Whether this framework can run the per-stage layer counts ``split``.

        DeepSpeed's pipeline runs its current split, the one of its releases before 0.12.5 and,
        in BigScience's fork, either with the embeddings weighed as layers
        (:func:`deepspeed_splits`).
        """
        if self.layer_split == "any":
            return True
        if self.layer_split == "deepspeed":
            return split in deepspeed_splits(num_layers, len(split))
        return split == self.default_split(num_layers, len(split)) and num_layers % len(split) == 0

    def grad_reduce_bytes(self, precision: str) -> float:
        """Bytes per gradient element in the data-parallel reduction."""
        if precision == "fp32" or (precision in ("bf16", "fp8") and self.grad_reduce_in_fp32):
            return 4.0
        return 2.0

    def state_bytes(self, precision: str, distributed_optimizer: bool | int) -> StateBytes:
        """What a rank keeps per parameter for ``precision`` and the optimizer mode: the ZeRO
        stage (``Layout.sharding``; a bool is stage 0 or 1).

        Raises:
            SpecError: a precision this framework's table does not list.
        """
        if precision not in self.state_bytes_per_param:
            raise SpecError(
                f"framework {self.name!r} lists no state bytes for precision {precision!r}; "
                f"it has {', '.join(self.state_bytes_per_param)}"
            )
        mode = OPTIMIZER_MODES[int(distributed_optimizer)]
        modes = self.state_bytes_per_param[precision]
        if mode not in modes:
            raise SpecError(
                f"framework {self.name!r} lists no state bytes for ZeRO stage "
                f"{int(distributed_optimizer)} ({mode}); it runs stages "
                f"{', '.join(map(str, self.zero_stages))}"
            )
        return modes[mode]

    def grad_bucket_params(self, dp: int) -> int:
        """Gradients per reduction bucket for a data-parallel group of ``dp``."""
        return max(self.grad_bucket_params_min, self.grad_bucket_params_per_dp * dp)

    def grad_buckets(self, params: float, dp: int, overlapped: bool) -> int:
        """Buckets the gradients of ``params`` parameters are reduced in (at least one): one
        collective per bucket when ``overlapped`` with the backward."""
        if not overlapped:
            return 1  # without overlap the whole buffer is one collective after the pipeline
        return max(1, math.ceil(params / self.grad_bucket_params(dp)))


def deepspeed_split(
    num_layers: int, pp: int, *, balanced: bool, embedding_slots: bool
) -> tuple[int, ...]:
    """Layers per stage as DeepSpeed's pipeline engine splits Megatron-DeepSpeed's GPT model.

    ``partition_method='type:transformer'`` weighs the transformer layers 1 and everything
    else 0 (docs/reference.md 7.1). DeepSpeed 0.12.5 and later give the first ``L mod pp``
    stages one layer more. Before it (``balanced``), ``partition_balanced`` filled each stage
    in turn up to the smallest bottleneck that fits, ``ceil(L / pp)``: 78 layers over 12 stages
    give eleven stages of 7 and a last stage of 1. BigScience's fork adds
    ``--pp-partition-method 'type:transformer|embedding'`` (``embedding_slots``): the two
    embedding copies on the first and last stage weigh as layers too, so either rule splits
    ``L + 2`` items and the end stages hold one layer fewer. A stage may come out empty (the
    rules refuse such a split).
    """
    items = num_layers + (2 if embedding_slots and pp > 1 else 0)
    if balanced:
        bottleneck = -(-items // pp)
        stages = [min(bottleneck, max(items - rank * bottleneck, 0)) for rank in range(pp)]
    else:
        base, extra = divmod(items, pp)
        stages = [base + (rank < extra) for rank in range(pp)]
    if items > num_layers:
        stages[0], stages[-1] = stages[0] - 1, stages[-1] - 1
    return tuple(stages)


def deepspeed_splits(num_layers: int, pp: int) -> tuple[tuple[int, ...], ...]:
    """Every split :func:`deepspeed_split` gives (no stage empty), the current one first."""
    found: list[tuple[int, ...]] = []
    for embedding_slots in (False, True):
        for balanced in (False, True):
            split = deepspeed_split(
                num_layers, pp, balanced=balanced, embedding_slots=embedding_slots
            )
            if min(split) >= 1 and split not in found:
                found.append(split)
    return tuple(found)
