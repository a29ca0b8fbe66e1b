"""The parallel layout of a training job and the rules it must obey.

Rules come from Megatron-LM and MindSpeed (shared/reference/specs.md section 3.7); each is a
small function returning the sentences of what it finds broken, so
:meth:`Layout.violations` reports every broken rule at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import fields

from simulators._checks import require_choice
from simulators._checks import require_positive
from simulators.errors import LayoutError
from simulators.specs import ClusterSpec
from simulators.specs import ModelSpec
from simulators.specs import TrainSpec

__all__ = ["DEGREES", "LAYOUT_FIELDS", "RECOMPUTE_MODES", "Layout"]

RECOMPUTE_MODES = ("none", "selective", "full")
DEGREES = ("dp", "tp", "pp", "cp", "ep", "vpp")
# The fields of a layout as the measurement table and the JSON output name them.
LAYOUT_FIELDS = (
    *DEGREES,
    "micro_batch",
    "recompute",
    "sequence_parallel",
    "distributed_optimizer",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Data, tensor, pipeline, context and expert parallel degrees and memory options.

    ``ep`` shards the routed experts; the expert grid reuses the TP degree inside experts
    (ETP = TP), so expert data parallelism is ``world / (tp * ep * pp)``. ``vpp`` is the
    number of model chunks per pipeline rank (1: plain 1F1B). ``recompute_layers`` counts
    the layers per pipeline stage that full recompute checkpoints (Megatron's block method);
    ``None`` means all of them.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    micro_batch: int = 1
    recompute: str = "none"
    recompute_layers: int | None = None
    sequence_parallel: bool = False
    distributed_optimizer: bool = True

    def __post_init__(self) -> None:
        require_positive(
            "layout",
            dp=self.dp,
            tp=self.tp,
            pp=self.pp,
            cp=self.cp,
            ep=self.ep,
            vpp=self.vpp,
            micro_batch=self.micro_batch,
        )
        require_choice("layout", "recompute", self.recompute, RECOMPUTE_MODES)
        if self.recompute_layers is not None:
            require_positive("layout", recompute_layers=self.recompute_layers)

    @classmethod
    def resolve(cls, world_size: int, **given: object) -> Layout:
        """Build a layout from the degrees given; dp fills the rest of the world.

        ``sequence_parallel`` defaults to ``tp > 1`` as Megatron recommends. When tp*pp*cp
        does not divide the world size, dp is rounded down and :meth:`violations` reports the
        broken world-size rule with the others.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise LayoutError(
                f"unknown layout field(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(sorted(known))}"
            )
        values = {k: v for k, v in given.items() if v is not None}
        tp, pp, cp = (int(values.get(k, 1)) for k in ("tp", "pp", "cp"))  # type: ignore[call-overload]
        values.setdefault("dp", max(1, world_size // max(1, tp * pp * cp)))
        values.setdefault("sequence_parallel", tp > 1)
        return cls(**values)  # type: ignore[arg-type]

    # ---- derived -------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel degree: world / (ETP * EP * PP), with ETP = TP."""
        return self.world_size // (self.tp * self.ep * self.pp)

    def num_microbatches(self, train: TrainSpec) -> int:
        """Micro-batches per step and per data-parallel rank: GBS / (mbs * DP)."""
        return train.global_batch_size // (self.micro_batch * self.dp)

    def layers_per_stage(self, model: ModelSpec) -> int:
        return model.num_layers // self.pp

    def recomputed_layers_per_stage(self, model: ModelSpec) -> int:
        """Layers per pipeline stage whose activations are recomputed in full."""
        if self.recompute != "full":
            return 0
        per_stage = self.layers_per_stage(model)
        if self.recompute_layers is None:
            return per_stage
        return min(self.recompute_layers, per_stage)

    def as_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def describe(self) -> str:
        """A compact one-line form, e.g. ``dp4 tp8 pp2 cp1 ep1 vpp1 mbs1 rc=none sp do``."""
        degrees = " ".join(f"{d}{getattr(self, d)}" for d in DEGREES)
        rc = self.recompute
        if self.recompute == "full" and self.recompute_layers is not None:
            rc += f":{self.recompute_layers}"
        flags = ("sp " if self.sequence_parallel else "") + (
            "do" if self.distributed_optimizer else ""
        )
        return f"{degrees} mbs{self.micro_batch} rc={rc} {flags}".strip()

    # ---- rules ---------------------------------------------------------------------------
    def violations(self, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec) -> list[str]:
        """Every rule of Megatron-LM / MindSpeed this layout breaks, one sentence each."""
        found: list[str] = []
        for rule in _RULES:
            found.extend(rule(self, model, cluster, train))
        return found

    def check(self, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec) -> None:
        """Raise LayoutError listing every broken rule, if any."""
        broken = self.violations(model, cluster, train)
        if broken:
            raise LayoutError(
                f"layout {self.describe()} is invalid:\n  - " + "\n  - ".join(broken)
            )


Rule = Callable[[Layout, ModelSpec, ClusterSpec, TrainSpec], list[str]]


def _world_size(
    lay: Layout, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec
) -> list[str]:
    """world = DP * TP * PP * CP (megatron/core/parallel_state.py initialize_model_parallel)."""
    if lay.world_size != cluster.num_devices:
        return [
            f"dp({lay.dp}) * tp({lay.tp}) * pp({lay.pp}) * cp({lay.cp}) = {lay.world_size} "
            f"!= {cluster.num_devices} devices of cluster {cluster.name}"
        ]
    return []


def _heads(lay: Layout, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec) -> list[str]:
    """Heads % TP == 0; KV groups % TP == 0 or TP a multiple of them (transformer_config.py)."""
    found = []
    if model.num_attention_heads % lay.tp:
        found.append(
            f"tp={lay.tp} does not divide num_attention_heads={model.num_attention_heads}"
        )
    g = model.num_kv_heads
    if model.attention == "gqa" and g % lay.tp and lay.tp % g:
        found.append(f"tp={lay.tp} and num_kv_heads={g}: neither divides the other")
    return found


def _layers(lay: Layout, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec) -> list[str]:
    """num_layers % PP == 0 (arguments.py; uneven splits are not modelled)."""
    if model.num_layers % lay.pp:
        return [f"pp={lay.pp} does not divide num_layers={model.num_layers}"]
    return []


def _virtual_pipeline(
    lay: Layout, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec
) -> list[str]:
    """VPP needs PP > 1, vpp | layers per stage, and m >= PP (arguments.py, schedules.py)."""
    if lay.vpp == 1:
        return []
    found = []
    if lay.pp == 1:
        found.append(f"vpp={lay.vpp} needs pp > 1")
    elif model.num_layers % lay.pp == 0 and (model.num_layers // lay.pp) % lay.vpp:
        found.append(
            f"vpp={lay.vpp} does not divide the {model.num_layers}/{lay.pp} layers per stage"
        )
    if lay.pp > 1 and _divides(lay.micro_batch * lay.dp, train.global_batch_size):
        m = lay.num_microbatches(train)
        if m < lay.pp:
            found.append(f"vpp={lay.vpp} needs micro-batches per step ({m}) >= pp ({lay.pp})")
    return found


def _context(lay: Layout, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec) -> list[str]:
    """CP > 1 needs seq_len % (2*CP) == 0 (arguments.py; load-balanced ring chunks)."""
    if lay.cp > 1 and train.seq_len % (2 * lay.cp):
        return [f"cp={lay.cp} needs seq_len={train.seq_len} divisible by 2*cp={2 * lay.cp}"]
    return []


def _experts(lay: Layout, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec) -> list[str]:
    """EP needs experts % EP == 0 and the expert grid world % (TP*EP*PP) == 0."""
    if lay.ep == 1:
        return []
    if not model.is_moe:
        return [f"ep={lay.ep} needs a mixture-of-experts model; {model.name} is dense"]
    found = []
    if model.num_experts % lay.ep:
        found.append(f"ep={lay.ep} does not divide num_experts={model.num_experts}")
    grid = lay.tp * lay.ep * lay.pp
    if lay.world_size % grid:
        found.append(
            f"expert grid tp({lay.tp}) * ep({lay.ep}) * pp({lay.pp}) = {grid} does not divide "
            f"the world size {lay.world_size}"
        )
    if lay.tp > 1 and not lay.sequence_parallel:
        found.append("ep > 1 with tp > 1 needs sequence_parallel (model_parallel_config.py)")
    return found


def _sequence_parallel(
    lay: Layout, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec
) -> list[str]:
    """SP is meaningless with TP == 1 (Megatron turns it off)."""
    if lay.sequence_parallel and lay.tp == 1:
        return ["sequence_parallel needs tp > 1"]
    return []


def _batch(lay: Layout, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec) -> list[str]:
    """global_batch % (micro_batch * DP) == 0 (num_microbatches_calculator.py)."""
    if not _divides(lay.micro_batch * lay.dp, train.global_batch_size):
        return [
            f"micro_batch({lay.micro_batch}) * dp({lay.dp}) = {lay.micro_batch * lay.dp} does "
            f"not divide global_batch_size={train.global_batch_size}"
        ]
    return []


def _recompute(lay: Layout, model: ModelSpec, cluster: ClusterSpec, train: TrainSpec) -> list[str]:
    """recompute_layers only with full recompute, and at most the layers of a stage."""
    if lay.recompute_layers is None:
        return []
    if lay.recompute != "full":
        return [f"recompute_layers={lay.recompute_layers} needs recompute=full"]
    if model.num_layers % lay.pp == 0 and lay.recompute_layers > model.num_layers // lay.pp:
        return [
            f"recompute_layers={lay.recompute_layers} exceeds the "
            f"{model.num_layers // lay.pp} layers per pipeline stage"
        ]
    return []


def _divides(divisor: int, value: int) -> bool:
    return divisor > 0 and value % divisor == 0


_RULES: tuple[Rule, ...] = (
    _world_size,
    _heads,
    _layers,
    _virtual_pipeline,
    _context,
    _experts,
    _sequence_parallel,
    _batch,
    _recompute,
)
