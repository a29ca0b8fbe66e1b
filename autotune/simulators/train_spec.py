"""The training step a simulator prices: :class:`TrainSpec` (framework, sequence, batch,
precision and the run's settings)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.simulators._checks import require_at_most
from autotune.simulators._checks import require_bools
from autotune.simulators._checks import require_choice
from autotune.simulators._checks import require_integers
from autotune.simulators._checks import require_numbers
from autotune.simulators._checks import require_positive
from autotune.simulators.cluster_spec import ClusterSpec
from autotune.simulators.errors import SpecError
from autotune.simulators.frameworks import CP_COMM_TYPES
from autotune.simulators.frameworks import MOE_DISPATCHERS
from autotune.simulators.frameworks import FrameworkSpec
from autotune.simulators.fused_softmax import FUSED_SOFTMAX_RULES
from autotune.simulators.fused_softmax import fused_softmax_runs
from autotune.simulators.limits import MAX_BATCH
from autotune.simulators.limits import MAX_SEQ_LEN
from autotune.simulators.model_spec import ModelSpec

__all__ = ["MEGATRON_DROPOUT", "OPTIMIZERS", "PRECISIONS", "RUN_SETTINGS", "TrainSpec"]

# fp8: bf16 mixed precision whose linear-layer GEMMs run in FP8 (Transformer Engine).
PRECISIONS = ("bf16", "fp16", "fp32", "fp8")
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
    "fused_softmax_rule",
)
OPTIMIZERS = ("adam",)
# Megatron's --attention-dropout and --hidden-dropout default (arguments.py), which its GPT-family
# scripts keep (docs/reference.md 3.3).
MEGATRON_DROPOUT = 0.1


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
    model's recipe (:meth:`drops_out`). ``fused_softmax_rule`` is the check that decides where
    the unfused path's fused softmax kernel runs (:data:`autotune.simulators.fused_softmax.
    FUSED_SOFTMAX_RULES`); None: the framework's.
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
    fused_softmax_rule: str | None = None

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
        self._check_grad_reduce()
        if self.fp8 and not self.framework.fp8:
            raise SpecError(
                f"train: precision fp8 needs Transformer Engine FP8; framework "
                f"{self.framework.name!r} has none (use bf16)"
            )
        self._check_cp_comm()
        if self.fused_softmax_rule is not None:
            require_choice(
                "train", "fused_softmax_rule", self.fused_softmax_rule, FUSED_SOFTMAX_RULES
            )

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

    def softmax_in_fp32(self, model: ModelSpec, micro_batch: int, tp: int) -> bool:
        """Whether an unfused attention runs PyTorch's softmax in fp32: the fused
        scale-mask-softmax kernel does not take this rank's scores (past the framework's
        sequence, or a shape its check refuses; :func:`autotune.simulators.fused_softmax.
        fused_softmax_runs`, docs/reference.md 3.3)."""
        return not fused_softmax_runs(
            self.fused_softmax_rule or self.framework.fused_softmax_rule,
            micro_batch,
            model.num_attention_heads // tp,
            self.seq_len,
            self.framework.fused_softmax_max_seq,
        )

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

    def _check_grad_reduce(self) -> None:
        """Refuse a gradient dtype the framework does not let a run choose
        (``FrameworkSpec.grad_reduce_fixed_for``): the run would reduce in the other."""
        framework = self.framework
        if self.compute_dtype not in framework.grad_reduce_fixed_for:
            return
        if self.reduces_grads_in_fp32 != framework.grad_reduce_in_fp32:
            own = "fp32" if framework.grad_reduce_in_fp32 else self.compute_dtype
            raise SpecError(
                f"train: grad_reduce_in_fp32={str(self.grad_reduce_in_fp32).lower()}: framework "
                f"{framework.name!r} reduces {self.compute_dtype} gradients in {own} only (use "
                f"{str(framework.grad_reduce_in_fp32).lower()} or leave it empty)"
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
    def fp8_kept(self) -> bool:
        """Whether FP8 layers keep FP8 tensors between passes (Transformer Engine: FP8 weight
        copies, inputs saved quantized), not only run FP8 GEMMs (docs/decisions/0062)."""
        return self.fp8 and self.framework.fp8_keeps_quantized

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
        if self.fused_softmax_rule is not None:
            parts.append(f"{self.fused_softmax_rule} softmax check")
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
        """Refuse a step the cluster cannot run: FP8 on a device without FP8 tensor cores, or
        a bf16 step on a device without bf16 (which runs it in fp16) on a framework that has
        no fp16 training (torchtitan's mixed precision is bf16 or fp32).

        Raises:
            SpecError: naming the device and what is allowed.
        """
        if self.fp8 and not cluster.device.fp8_tflops:
            raise SpecError(
                f"train: precision fp8 on {cluster.device.name}, which has no FP8 tensor cores; "
                f"allowed: {', '.join(p for p in PRECISIONS if p != 'fp8')}"
            )
        runs = cluster.device.runs_as(self.compute_dtype)
        trains = self.framework.state_bytes_per_param
        if runs not in trains:
            here = [p for p in trains if cluster.device.runs_as(p) == p]
            raise SpecError(
                f"train: {cluster.device.name} has no bf16, so a {self.precision} step runs in "
                f"{runs}, which framework {self.framework.name!r} does not train in; allowed: "
                f"train.precision={' or '.join(here)}, or a framework that trains in {runs}"
            )

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch_size
