"""The parallel layout of a training job, the table of its dimensions, and its rules.

:class:`Layout` owns its dimensions the way torchtitan's ``ParallelDims`` does: every field
carries its metadata (what it means, whether it is a parallel degree, whether the search
chooses it and from which candidates, whether it changes what one layer costs, its Megatron
flag). The search space, the config schema, the measurement columns, the report columns, the
JSON form and the simulators' cache keys are all derived from :data:`LAYOUT_FIELDS`; adding a
dimension is one field here plus the simulators that price it (docs/architecture.md lists
the files).

Rules come from Megatron-LM and MindSpeed (docs/reference.md 3.7); each is a small function
returning the sentences of what it finds broken, so :meth:`Layout.violations` reports every
broken rule at once.
"""

# size: the layout and its rules (each rule reads the layout's derived fields; their names are API)

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from autotune.simulators._checks import require_at_most
from autotune.simulators._checks import require_choice
from autotune.simulators._checks import require_integers
from autotune.simulators._checks import require_positive
from autotune.simulators.collectives import GroupPlacement
from autotune.simulators.collectives import place_group
from autotune.simulators.errors import LayoutError
from autotune.simulators.errors import SpecError
from autotune.simulators.job import Job
from autotune.simulators.limits import MAX_BATCH
from autotune.simulators.limits import MAX_DEVICES
from autotune.simulators.recompute_modules import DEFAULT_MODULES
from autotune.simulators.recompute_modules import layer_modules
from autotune.simulators.recompute_modules import model_problems
from autotune.simulators.recompute_modules import normalized_modules
from autotune.simulators.recompute_modules import standalone_norms
from autotune.simulators.specs import ClusterSpec
from autotune.simulators.specs import ModelSpec
from autotune.simulators.specs import TrainSpec

__all__ = [
    "DEGREES",
    "GROUPS",
    "LAYOUT_FIELDS",
    "RECOMPUTE_MODES",
    "RULE_NAMES",
    "ZERO_GRADS",
    "ZERO_PARAMS",
    "ZERO_STAGES",
    "SEARCHED",
    "FieldInfo",
    "Layout",
    "deal_chunks",
    "divisors",
    "field_info",
    "sharding_spelt",
]

RECOMPUTE_MODES = ("none", "selective", "full")
# ZeRO stages (Rajbhandari et al. 2020), what data parallelism shards: nothing, the optimizer
# states (Megatron's distributed optimizer), the gradients too, the parameters too (FSDP).
ZERO_STAGES = (0, 1, 2, 3)
ZERO_GRADS, ZERO_PARAMS = 2, 3

# search settings (conf/search/*.yaml) -> the values a searched field may take for a job
Candidates = Callable[[ModelSpec, ClusterSpec, Mapping[str, Any]], Sequence[Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldInfo:
    """What the rest of the project needs to know about one layout field.

    ``degree``: a parallel degree (an integer >= 1 that splits the world or the model).
    ``searched``: the search chooses it, from ``candidates`` (dp follows from the others).
    ``layer_cost``: it changes what one layer costs on one rank (a simulator cache key).
    ``flag``: the Megatron-LM flag that sets it one-to-one (``""`` when the launcher derives
    it from several fields). ``required_column``: a measurement table must give it (else the
    field's default fills an empty cell); ``choices``: the values a text field allows.
    """

    doc: str
    required_column: bool = False
    choices: tuple[str, ...] = ()
    degree: bool = False
    searched: bool = False
    layer_cost: bool = False
    flag: str = ""
    candidates: Candidates | None = None


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in ascending order (O(sqrt n), so a huge world stays fast)."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def _world_divisors(limit_key: str | None = None) -> Candidates:
    def candidates(model: ModelSpec, cluster: ClusterSpec, search: Mapping[str, Any]) -> list[int]:
        found = divisors(cluster.num_devices)
        return [d for d in found if limit_key is None or d <= search[limit_key]]

    return candidates


def _pipeline_candidates(
    model: ModelSpec, cluster: ClusterSpec, search: Mapping[str, Any]
) -> list[int]:
    """Stages that divide the world; they need not divide the layers (frameworks that split
    unevenly run them, the rules refuse the rest)."""
    return [d for d in divisors(cluster.num_devices) if d <= model.num_layers]


def _expert_candidates(
    model: ModelSpec, cluster: ClusterSpec, search: Mapping[str, Any]
) -> list[int]:
    if not model.is_moe:
        return [1]
    return [d for d in divisors(cluster.num_devices) if model.num_experts % d == 0]


def _expert_tp_candidates(
    model: ModelSpec, cluster: ClusterSpec, search: Mapping[str, Any]
) -> list[int | None]:
    """None (the experts reuse TP), then every expert TP up to ``max_etp`` (1 by default:
    whole experts); a dense model has no experts to split."""
    if not model.is_moe:
        return [None]
    return [None, *(d for d in divisors(cluster.num_devices) if d <= search["max_etp"])]


def _zero_stage_candidates(
    model: ModelSpec, cluster: ClusterSpec, search: Mapping[str, Any]
) -> list[int | None]:
    """None (the stage ``distributed_optimizer`` spells: 1 or 0), then the stages beyond it
    that ``search.zero_stages`` lists (2: gradients sharded too, 3: parameters too); the
    default lists none, so a default search is what it was (docs/decisions/0049)."""
    return [None, *sorted({int(s) for s in search["zero_stages"] if int(s) >= ZERO_GRADS})]


def _replicate_candidates(
    model: ModelSpec, cluster: ClusterSpec, search: Mapping[str, Any]
) -> list[int]:
    """Full sharding (1), then every replica count up to ``search.max_dp_replicate`` (1 by
    default: full sharding only) that divides the world; the rules keep those that divide
    the data-parallel groups."""
    return [d for d in divisors(cluster.num_devices) if d <= search["max_dp_replicate"]]


def sharding_spelt(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with ZeRO stage 0 or 1 spelt as the layout spells it: a ``zero_stage`` of 0
    or 1 sets ``distributed_optimizer`` when that is not given, and is then no field of its
    own (``zero_stage`` None). A contradiction (``zero_stage=0`` beside
    ``distributed_optimizer=true``) is left for the layout to refuse."""
    found = dict(values)
    stage = found.get("zero_stage")
    if isinstance(stage, int) and not isinstance(stage, bool) and stage in (0, 1):
        if found.get("distributed_optimizer") is None:
            found["distributed_optimizer"] = bool(stage)
        if found["distributed_optimizer"] == bool(stage):
            found["zero_stage"] = None
    return found


def _up_to(limit_key: str) -> Candidates:
    def candidates(model: ModelSpec, cluster: ClusterSpec, search: Mapping[str, Any]) -> list[int]:
        return list(range(1, int(search[limit_key]) + 1))

    return candidates


def _listed(key: str, ordered: bool = False) -> Candidates:
    def candidates(model: ModelSpec, cluster: ClusterSpec, search: Mapping[str, Any]) -> list[Any]:
        values = list(dict.fromkeys(search[key]))
        return sorted(values) if ordered else values

    return candidates


def deal_chunks(stage_layers: tuple[int, ...], vpp: int) -> tuple[int, ...]:
    """Layers of every virtual stage, indexed ``chunk * pp + rank`` (Megatron's order): a
    stage's layers dealt over its ``vpp`` chunks as evenly as possible, the first chunks taking
    the remainder."""
    pp = len(stage_layers)
    return tuple(
        stage_layers[rank] // vpp + (chunk < stage_layers[rank] % vpp)
        for chunk in range(vpp)
        for rank in range(pp)
    )


def _info(doc: str, **options: Any) -> dict[str, FieldInfo]:
    return {"layout": FieldInfo(doc=doc, **options)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Data, tensor, pipeline, context and expert parallel degrees and memory options.

    ``ep`` shards the routed experts and ``etp`` splits each of them (expert tensor
    parallelism; ``None``, Megatron's default, reuses TP: :attr:`expert_tp`); the expert grid
    is ETP x EP x expert-DP x PP, so expert data parallelism is ``world / (etp * ep * pp)``
    ("MoE parallel folding": attention runs over TP x CP x DP x PP). ``vpp`` is the
    number of model chunks per pipeline rank (1: plain 1F1B). ``recompute_layers`` counts
    the layers per pipeline stage that full recompute checkpoints (Megatron's block method);
    ``None`` means all of them. With virtual stages the framework decides how they fall on
    the chunks (:meth:`recomputed_chunks`).

    Example:
        >>> lay = Layout.resolve(64, tp=8, pp=2)
        >>> lay.describe()
        'dp4 tp8 pp2 cp1 ep1 vpp1 mbs1 rc=none sp do'
        >>> lay.group("dp_cp", devices_per_node=8)
        GroupPlacement(size=4, stride=8, per_node=1, nodes=4)
    """

    dp: int = field(
        default=1,
        metadata=_info(
            "data parallel degree (follows from the others)", degree=True, required_column=True
        ),
    )
    tp: int = field(
        default=1,
        metadata=_info(
            "tensor parallel degree",
            required_column=True,
            degree=True,
            searched=True,
            layer_cost=True,
            flag="--tensor-model-parallel-size",
            candidates=_world_divisors("max_tp"),
        ),
    )
    pp: int = field(
        default=1,
        metadata=_info(
            "pipeline parallel degree (stages)",
            required_column=True,
            degree=True,
            searched=True,
            flag="--pipeline-model-parallel-size",
            candidates=_pipeline_candidates,
        ),
    )
    cp: int = field(
        default=1,
        metadata=_info(
            "context parallel degree (splits the sequence)",
            required_column=True,
            degree=True,
            searched=True,
            layer_cost=True,
            flag="--context-parallel-size",
            candidates=_world_divisors("max_cp"),
        ),
    )
    ep: int = field(
        default=1,
        metadata=_info(
            "expert parallel degree (splits the routed experts)",
            required_column=True,
            degree=True,
            searched=True,
            layer_cost=True,
            flag="--expert-model-parallel-size",
            candidates=_expert_candidates,
        ),
    )
    etp: int | None = field(
        default=None,
        metadata=_info(
            "expert tensor parallel degree (splits each routed expert; empty: tp)",
            degree=True,
            searched=True,
            layer_cost=True,
            flag="--expert-tensor-parallel-size",
            candidates=_expert_tp_candidates,
        ),
    )
    vpp: int = field(
        default=1,
        metadata=_info(
            "model chunks per pipeline rank (interleaved 1F1B when > 1)",
            degree=True,
            searched=True,
            candidates=_up_to("max_vpp"),
        ),
    )
    micro_batch: int = field(
        default=1,
        metadata=_info(
            "sequences per micro-batch",
            required_column=True,
            searched=True,
            layer_cost=True,
            flag="--micro-batch-size",
            candidates=_listed("micro_batch", ordered=True),
        ),
    )
    recompute: str = field(
        default="none",
        metadata=_info(
            "activation recomputation: none, selective (core attention) or full",
            required_column=True,
            choices=RECOMPUTE_MODES,
            searched=True,
            layer_cost=True,
            candidates=_listed("recompute"),
        ),
    )
    layer_split: tuple[int, ...] | None = field(
        default=None,
        metadata=_info(
            "layers per pipeline stage, first to last (None: the framework's default split)"
        ),
    )
    recompute_layers: int | None = field(
        default=None,
        metadata=_info("layers per stage that full recompute checkpoints (None: all)"),
    )
    recompute_modules: tuple[str, ...] | None = field(
        default=None,
        metadata=_info(
            "submodules selective recompute checkpoints, sorted (None: core_attn only)",
            layer_cost=True,
        ),
    )
    sequence_parallel: bool = field(
        default=False,
        metadata=_info(
            "sequence parallelism inside the TP group (default: tp > 1)",
            layer_cost=True,
            flag="--sequence-parallel",
        ),
    )
    distributed_optimizer: bool = field(
        default=True,
        metadata=_info(
            "optimizer states sharded over data parallelism (ZeRO-1)",
            searched=True,
            flag="--use-distributed-optimizer",
            candidates=_listed("distributed_optimizer"),
        ),
    )
    zero_stage: int | None = field(
        default=None,
        metadata=_info(
            "data-parallel sharding beyond the optimizer states: 2 the gradients too (ZeRO-2, "
            "Megatron-FSDP optim_grads), 3 the parameters too (ZeRO-3, FSDP, optim_grads_"
            "params); empty: 1 with distributed_optimizer, else 0",
            searched=True,
            candidates=_zero_stage_candidates,
        ),
    )
    dp_replicate: int = field(
        default=1,
        metadata=_info(
            "replicas of the sharded states (hybrid sharding: each replica shards over "
            "dp*cp/dp_replicate ranks, experts over expert-DP/dp_replicate); 1: full sharding",
            searched=True,
            candidates=_replicate_candidates,
        ),
    )

    def __post_init__(self) -> None:
        if self.etp is not None and self.etp == self.tp:
            object.__setattr__(self, "etp", None)  # one spelling per layout: ETP = TP is None
        # one spelling per layout: sorted, and the default set (core attention) is None
        object.__setattr__(self, "recompute_modules", normalized_modules(self.recompute_modules))
        self._check_sharding()
        degrees = {
            name: getattr(self, name) for name in DEGREES if getattr(self, name) is not None
        }
        require_integers("layout", **degrees, micro_batch=self.micro_batch)
        require_positive("layout", **degrees)
        require_positive("layout", micro_batch=self.micro_batch)
        require_at_most("layout", MAX_DEVICES, "the largest clusters have ~2e5 devices", **degrees)
        require_at_most("layout", MAX_BATCH, "sequences", micro_batch=self.micro_batch)
        require_choice("layout", "recompute", self.recompute, RECOMPUTE_MODES)
        if self.recompute_layers is not None:
            require_integers("layout", recompute_layers=self.recompute_layers)
            require_positive("layout", recompute_layers=self.recompute_layers)
        if self.layer_split is not None:
            split = self.layer_split
            if not isinstance(split, tuple) or not all(isinstance(n, int) for n in split):
                raise SpecError(f"layout: layer_split={split!r} must be a tuple of integers")
            if not split or min(split) < 1:
                raise SpecError(
                    f"layout: layer_split={list(split)} has a stage with no layers; every "
                    "stage needs at least one"
                )

    def _check_sharding(self) -> None:
        """``zero_stage`` and ``dp_replicate`` on their own and beside
        ``distributed_optimizer``; ZeRO stage 0 or 1 is ``distributed_optimizer``'s to say
        (one spelling: an agreeing ``zero_stage`` of 0 or 1 becomes None)."""
        stage, replicas = self.zero_stage, self.dp_replicate
        require_integers("layout", dp_replicate=replicas)
        require_positive("layout", dp_replicate=replicas)
        require_at_most(
            "layout", MAX_DEVICES, "the largest clusters have ~2e5 devices", dp_replicate=replicas
        )
        if stage is None:
            return
        require_integers("layout", zero_stage=stage)
        if stage not in ZERO_STAGES:
            raise SpecError(f"layout: zero_stage={stage!r} is not one of 0, 1, 2, 3")
        if stage < ZERO_GRADS and bool(stage) != self.distributed_optimizer:
            raise SpecError(
                f"layout: zero_stage={stage} contradicts distributed_optimizer="
                f"{str(self.distributed_optimizer).lower()} (which is ZeRO stage "
                f"{int(self.distributed_optimizer)}); give one of them"
            )
        if stage >= ZERO_GRADS and not self.distributed_optimizer:
            raise SpecError(
                f"layout: zero_stage={stage} shards the optimizer states too; it needs "
                "distributed_optimizer=true"
            )
        if stage < ZERO_GRADS:
            object.__setattr__(self, "zero_stage", None)  # one spelling: the optimizer's

    @classmethod
    def resolve(cls, world_size: int, **given: object) -> Layout:
        """Build a layout from the fields given; dp fills the rest of the world.

        ``None`` values count as not given. ``sequence_parallel`` defaults to ``tp > 1`` as
        Megatron recommends. When tp*pp*cp does not divide the world size, dp is rounded
        down and :meth:`violations` reports the broken world-size rule with the others.
        """
        unknown = sorted(set(given) - set(LAYOUT_FIELDS))
        if unknown:
            raise LayoutError(
                f"unknown layout field(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(sorted(LAYOUT_FIELDS))}"
            )
        values = sharding_spelt({k: v for k, v in given.items() if v is not None})
        values = {k: v for k, v in values.items() if v is not None}
        split = values.get("layer_split")
        if isinstance(split, list):
            values["layer_split"] = tuple(split)  # from a config or JSON list
        tp, pp, cp = (int(values.get(k, 1)) for k in ("tp", "pp", "cp"))  # type: ignore[call-overload]
        values.setdefault("dp", max(1, world_size // max(1, tp * pp * cp)))
        values.setdefault("sequence_parallel", tp > 1)
        return cls(**values)  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Layout:
        """The inverse of :meth:`as_dict` (unknown keys are refused)."""
        unknown = sorted(set(values) - set(LAYOUT_FIELDS))
        if unknown:
            raise LayoutError(f"unknown layout field(s) {', '.join(unknown)}")
        split = values.get("layer_split")
        return cls(**{**values, "layer_split": tuple(split) if split is not None else None})

    # ---- derived -------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel degree: ``etp``, or TP when it is not set."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel degree: world / (ETP * EP * PP)."""
        return self.world_size // (self.expert_tp * self.ep * self.pp)

    @property
    def sharding(self) -> int:
        """The ZeRO stage in use: ``zero_stage``, else 1 with the distributed optimizer, 0
        without."""
        return int(self.distributed_optimizer) if self.zero_stage is None else self.zero_stage

    @property
    def dp_shard(self) -> int:
        """Data-parallel (DP x CP) ranks one shard group spans: all of them, or
        ``dp * cp / dp_replicate`` with hybrid sharding."""
        return max(1, self.dp * self.cp // self.dp_replicate)

    @property
    def edp_shard(self) -> int:
        """Expert data-parallel ranks one shard group of the experts' states spans."""
        return max(1, self.expert_dp // self.dp_replicate)

    def num_microbatches(self, train: TrainSpec) -> int:
        """Micro-batches per step and per data-parallel rank: GBS / (mbs * DP)."""
        return train.global_batch_size // (self.micro_batch * self.dp)

    def hides_tp_comm(self, train: TrainSpec) -> bool:
        """Whether the TP collectives hide behind the GEMMs: the run overlaps them (Transformer
        Engine's userbuffers, MindSpeed's COC) and the layout has sequence parallelism, which
        the overlap needs (Megatron asserts it, docs/reference.md 7.5)."""
        return train.overlaps_tp_comm and self.sequence_parallel

    def stage_layers(self, model: ModelSpec, train: TrainSpec) -> tuple[int, ...]:
        """Transformer layers of each pipeline stage, first to last.

        The explicit ``layer_split``, else the framework's default split (even when ``pp``
        divides the layers; see :meth:`simulators.FrameworkSpec.default_split`).
        """
        if self.layer_split is not None:
            return self.layer_split
        return train.framework.default_split(model.num_layers, self.pp)

    def chunk_layers(self, model: ModelSpec, train: TrainSpec) -> tuple[int, ...]:
        """Layers of every virtual stage, indexed ``chunk * pp + rank`` (:func:`deal_chunks`)."""
        return deal_chunks(self.stage_layers(model, train), self.vpp)

    def recomputed_chunks(self, stage_layers: int, train: TrainSpec) -> tuple[int, ...]:
        """Of a pipeline stage of ``stage_layers``, dealt over its ``vpp`` chunks
        (:func:`deal_chunks`, its first chunk first), the layers of each chunk whose
        activations are recomputed in full, as the framework runs ``recompute_layers``
        (:meth:`simulators.FrameworkSpec.recomputed_chunk_layers`: Megatron-Core counts them
        per chunk, MindSpeed-LLM per rank)."""
        chunks = deal_chunks((stage_layers,), self.vpp)
        if self.recompute != "full":
            return (0,) * self.vpp
        if self.recompute_layers is None:
            return chunks
        return train.framework.recomputed_chunk_layers(self.recompute_layers, chunks)

    def recomputed_layers(self, stage_layers: int, train: TrainSpec) -> int:
        """Layers of a stage of ``stage_layers`` whose activations are recomputed in full: the
        sum of :meth:`recomputed_chunks` (an interleaved Megatron-Core rank recomputes more
        than ``recompute_layers`` where ``vpp`` does not divide it)."""
        return sum(self.recomputed_chunks(stage_layers, train))

    @property
    def recomputed_modules(self) -> tuple[str, ...]:
        """The submodules selective recompute checkpoints (none without it): the layout's
        ``recompute_modules``, or core attention, Megatron's default."""
        if self.recompute != "selective":
            return ()
        return self.recompute_modules or DEFAULT_MODULES

    def layer_key(self) -> tuple[object, ...]:
        """The fields that change what one layer costs (a cache key for per-layer costs)."""
        return tuple(getattr(self, name) for name in LAYER_COST_FIELDS)

    def group(self, name: str, devices_per_node: int) -> GroupPlacement:
        """Size and placement of a process group, in Megatron's rank order.

        Ranks are numbered TP fastest, then CP, DP, PP (``order="tp-cp-ep-dp-pp"`` in
        ``megatron/core/parallel_state.py``); the expert grid numbers ETP, EP, expert-DP, PP.
        Groups: ``tp``, ``cp``, ``dp``, ``dp_cp`` (dense gradients: DP x CP), ``etp``
        (expert tensor parallel), ``ep``, ``edp`` (expert data parallel), ``pp`` and
        ``embedding``: the first and the last
        pipeline stage, which hold the two copies of a tied embedding (Megatron's embedding
        group; one rank without pipelining).
        """
        if name not in GROUPS:
            raise ValueError(f"unknown process group {name!r}; known: {', '.join(GROUPS)}")
        if name == "embedding":  # the first and last stage: one node when the pipeline is
            stride = (self.pp - 1) * (self.world_size // self.pp)
            if self.pp == 1:
                return place_group(1, stride, devices_per_node)
            one_node = self.group("pp", devices_per_node).nodes == 1
            return GroupPlacement(2, stride, 2 if one_node else 1, 1 if one_node else 2)
        size, stride = {
            "tp": (self.tp, 1),
            "cp": (self.cp, self.tp),
            "dp": (self.dp, self.tp * self.cp),
            "dp_cp": (self.dp * self.cp, self.tp),
            "etp": (self.expert_tp, 1),
            "ep": (self.ep, self.expert_tp),
            "edp": (self.expert_dp, self.expert_tp * self.ep),
            "pp": (self.pp, self.world_size // self.pp),
            # hybrid sharding (Megatron's partial distributed optimizer, parallel_state.py):
            # each replica shards over consecutive DP x CP ranks, replicas stride past them
            "dp_shard": (self.dp_shard, self.tp),
            "dp_replicate": (self.dp_replicate, self.tp * self.dp_shard),
            "edp_shard": (self.edp_shard, self.expert_tp * self.ep),
            "edp_replicate": (self.dp_replicate, self.expert_tp * self.ep * self.edp_shard),
        }[name]
        return place_group(size, stride, devices_per_node)

    def as_dict(self) -> dict[str, Any]:
        """Every field by name: the JSON form and the measurement table's layout columns."""
        return {name: getattr(self, name) for name in LAYOUT_FIELDS}

    def as_cells(self) -> dict[str, Any]:
        """:meth:`as_dict` as a measurement file writes it: a tuple field's values joined by
        ``/`` (``layer_split`` 19/21/21/19, ``recompute_modules`` core_attn/mlp)."""
        return {
            name: "/".join(map(str, value)) if isinstance(value, tuple) else value
            for name, value in self.as_dict().items()
        }

    def describe(self) -> str:
        """A compact one-line form, e.g. ``dp4 tp8 pp2 cp1 ep1 vpp1 mbs1 rc=none sp do``."""
        degrees = " ".join(
            f"{d}{getattr(self, d)}" for d in DEGREES if getattr(self, d) is not None
        )
        rc = self.recompute
        if self.recompute == "full" and self.recompute_layers is not None:
            rc += f":{self.recompute_layers}"
        if self.recompute_modules is not None:
            rc += ":" + "+".join(self.recompute_modules)
        flags = ("sp " if self.sequence_parallel else "") + (
            "do" if self.distributed_optimizer else ""
        )
        if self.zero_stage is not None:
            flags += f" zero{self.zero_stage}"
        if self.dp_replicate > 1:
            flags += f" hsdp{self.dp_replicate}"
        split = (
            "" if self.layer_split is None else " split=" + "/".join(map(str, self.layer_split))
        )
        return f"{degrees} mbs{self.micro_batch} rc={rc} {flags}".strip() + split

    # ---- rules ---------------------------------------------------------------------------
    def world_size_problems(self, num_devices: int, where: str = "") -> list[str]:
        """The world-size rule alone: dp * tp * pp * cp must equal the devices."""
        if self.world_size == num_devices:
            return []
        return [
            f"dp({self.dp}) * tp({self.tp}) * pp({self.pp}) * cp({self.cp}) = "
            f"{self.world_size} != {num_devices} devices{where}"
        ]

    def split_problems(self, num_layers: int) -> list[str]:
        """The explicit ``layer_split`` against the layout and the model, whatever the
        framework: one count per pipeline stage, summing to the layers."""
        split = self.layer_split
        if split is None:
            return []
        found = []
        if len(split) != self.pp:
            found.append(f"layer_split has {len(split)} stages, expected pp={self.pp}")
        if sum(split) != num_layers:
            found.append(
                f"layer_split {list(split)} sums to {sum(split)}, expected num_layers={num_layers}"
            )
        return found

    def violations(self, job: Job) -> list[str]:
        """Every rule of Megatron-LM / MindSpeed this layout breaks, one sentence each."""
        found: list[str] = []
        for rule in _RULES.values():
            found.extend(rule(self, job))
        return found

    def broken_rules(self, job: Job) -> dict[str, list[str]]:
        """:meth:`violations` by rule: each broken rule's name (:data:`RULE_NAMES`) and its
        sentences, in the order of the rules."""
        found = {}
        for name, rule in _RULES.items():
            sentences = rule(self, job)
            if sentences:
                found[name] = sentences
        return found

    def check(self, job: Job) -> None:
        """Raise LayoutError listing every broken rule, if any."""
        broken = self.violations(job)
        if broken:
            raise LayoutError(
                f"layout {self.describe()} is invalid:\n  - " + "\n  - ".join(broken)
            )


def field_info(name: str) -> FieldInfo:
    """The metadata of the layout field ``name``."""
    info: FieldInfo = _FIELDS[name].metadata["layout"]
    return info


_FIELDS = {f.name: f for f in dataclasses.fields(Layout)}
# Every field, in order: the JSON form, the data columns, the report columns.
LAYOUT_FIELDS: tuple[str, ...] = tuple(_FIELDS)
DEGREES: tuple[str, ...] = tuple(n for n in LAYOUT_FIELDS if field_info(n).degree)
SEARCHED: tuple[str, ...] = tuple(n for n in LAYOUT_FIELDS if field_info(n).searched)
LAYER_COST_FIELDS: tuple[str, ...] = tuple(n for n in LAYOUT_FIELDS if field_info(n).layer_cost)
GROUPS = (
    "tp",
    "cp",
    "dp",
    "dp_cp",
    "etp",
    "ep",
    "edp",
    "pp",
    "embedding",
    "dp_shard",
    "dp_replicate",
    "edp_shard",
    "edp_replicate",
)

Rule = Callable[[Layout, Job], list[str]]


def _world_size(lay: Layout, job: Job) -> list[str]:
    """world = DP * TP * PP * CP (megatron/core/parallel_state.py initialize_model_parallel)."""
    cluster = job.cluster
    return lay.world_size_problems(cluster.num_devices, f" of cluster {cluster.name}")


def _heads(lay: Layout, job: Job) -> list[str]:
    """Heads % TP == 0; KV groups % TP == 0 or TP a multiple of them (transformer_config.py)."""
    model = job.model
    found = []
    if model.num_attention_heads % lay.tp:
        found.append(
            f"tp={lay.tp} does not divide num_attention_heads={model.num_attention_heads}"
        )
    g = model.num_kv_heads
    if model.attention == "gqa" and g % lay.tp and lay.tp % g:
        found.append(f"tp={lay.tp} and num_kv_heads={g}: neither divides the other")
    return found


def _layers(lay: Layout, job: Job) -> list[str]:
    """Layers per stage as the framework can split them (docs/reference.md 7.1).

    An explicit split has one count per stage and sums to the layers; without one, a
    framework that splits evenly only needs pp to divide the layers.
    """
    model, train = job.model, job.train
    framework = train.framework
    split = lay.layer_split
    if split is None:
        if framework.layer_split == "even" and model.num_layers % lay.pp:
            return [
                f"pp={lay.pp} does not divide num_layers={model.num_layers} "
                f"({framework.name} splits layers evenly only)"
            ]
        if model.num_layers < lay.pp:
            return [f"pp={lay.pp} exceeds num_layers={model.num_layers}: a stage would be empty"]
        return []
    found = lay.split_problems(model.num_layers)
    if not found and not framework.can_split(split, model.num_layers):
        allowed = framework.default_split(model.num_layers, lay.pp)
        found.append(
            f"{framework.name} cannot run layer_split {list(split)}; its only split for "
            f"pp={lay.pp} is {list(allowed)}"
        )
    return found


def _virtual_pipeline(lay: Layout, job: Job) -> list[str]:
    """VPP needs the framework's interleaved schedule, PP > 1 (PP > 2 where its sends block:
    two blocking exchanges with the same neighbour would meet in one batch; arguments.py), m
    a multiple of PP and whole chunks.

    The interleaved schedule runs the micro-batches through each chunk in groups of PP and
    refuses a step whose last group is short: ``num_microbatches % pipeline_parallel_size``
    must be 0 in ``schedules.py`` of core_v0.6.0, and ``0 < m % N < PP`` raises from
    core_r0.12.0 to main, with N (``microbatch_group_size_per_vp_stage``) = PP unless set
    (docs/reference.md 3.4).

    With an even split Megatron needs vpp to divide the layers per stage (arguments.py); an
    uneven split may leave a chunk empty, as the chunks that hold only the embedding or the
    loss do with ``--account-for-embedding/loss-in-pipeline-split`` (docs/reference.md 7.1).
    A release that cannot give virtual stages unequal layer counts
    (``FrameworkSpec.unequal_chunks``, MindSpeed-LLM 26.0.0) refuses such a split.
    """
    model, train = job.model, job.train
    if lay.vpp == 1:
        return []
    found = []
    if not train.framework.virtual_pipeline:
        found.append(f"vpp={lay.vpp}: {train.framework.name} has no virtual pipeline stages")
    if lay.pp == 1:
        found.append(f"vpp={lay.vpp} needs pp > 1")
    elif lay.pp == 2 and not train.framework.overlap_p2p_comm:
        found.append(
            f"vpp={lay.vpp} needs pp > 2 on {train.framework.name} (its interleaved schedule "
            "blocks on its sends)"
        )
    elif lay.layer_split is None and model.num_layers % lay.pp == 0:
        if (model.num_layers // lay.pp) % lay.vpp:
            found.append(
                f"vpp={lay.vpp} does not divide the {model.num_layers}/{lay.pp} layers per stage"
            )
    framework = train.framework
    if lay.pp > 1 and not framework.unequal_chunks and not _layers(lay, job):
        chunks = lay.chunk_layers(model, train)
        if len(set(chunks)) > 1:
            found.append(
                f"vpp={lay.vpp} with {'/'.join(map(str, chunks))} layers per virtual stage: "
                f"{framework.name} {framework.release} gives virtual stages equal layer counts "
                f"only (from framework.release={framework.unequal_chunks_since} they may differ)"
            )
    if lay.pp > 1 and _divides(lay.micro_batch * lay.dp, train.global_batch_size):
        m = lay.num_microbatches(train)
        if m % lay.pp:
            found.append(
                f"vpp={lay.vpp} needs micro-batches per step ({m}) to be a multiple of "
                f"pp ({lay.pp}): the interleaved schedule runs them in groups of pp"
            )
    return found


def _context(lay: Layout, job: Job) -> list[str]:
    """CP > 1 needs a framework with context parallelism and seq_len % (2*CP) == 0
    (arguments.py; load-balanced chunks). The all-to-all exchange splits heads over CP: the
    query heads of a TP rank, and its KV heads where Transformer Engine splits them as they
    are (DeepSpeed-style Ulysses repeats them to the query heads first, or, on
    Megatron-DeepSpeed, takes multi-head attention only); Transformer Engine has no MLA
    all-to-all; and Megatron-DeepSpeed's sequence parallelism excludes Megatron's
    (docs/reference.md 3.5). Transformer Engine's context parallelism runs in its fused
    attention alone: Megatron-Core's own ``DotProductAttention`` asserts a CP of 1, and TE
    drops its unfused backend under CP."""
    model, train = job.model, job.train
    if lay.cp == 1:
        return []
    framework = train.framework
    if not framework.cp_comm_types:
        return [f"cp={lay.cp}: {framework.name} has no context parallelism (use cp=1)"]
    if framework.cp_a2a_style == "te" and not job.flash_attention:
        return [
            f"cp={lay.cp} needs fused attention: {framework.name} runs context parallelism "
            "only in Transformer Engine's fused attention, which this run does not use "
            "(train.flash_attention=false, or a device without it)"
        ]
    found = []
    if train.seq_len % (2 * lay.cp):
        found.append(f"cp={lay.cp} needs seq_len={train.seq_len} divisible by 2*cp={2 * lay.cp}")
    if framework.cp_excludes_sequence_parallel and lay.sequence_parallel:
        found.append(f"cp={lay.cp} does not run with sequence_parallel on {framework.name}")
    if train.context_exchange != "a2a":
        return found
    if model.attention == "mla" and framework.cp_a2a_style == "te":
        return [*found, f"cp={lay.cp} with cp_comm_type a2a: Transformer Engine runs no MLA a2a"]
    heads = model.num_attention_heads // lay.tp
    if heads % lay.cp:
        found.append(
            f"cp={lay.cp} with cp_comm_type a2a needs cp to divide the {heads} attention heads "
            f"per TP rank"
        )
    if not framework.cp_a2a_gqa and model.num_kv_heads < model.num_attention_heads:
        found.append(
            f"cp={lay.cp}: {framework.name}'s all-to-all needs as many KV heads as attention "
            f"heads ({model.name} has {model.num_kv_heads} of {model.num_attention_heads})"
        )
    kv_heads = max(1, model.num_kv_heads // lay.tp)
    if framework.cp_a2a_style == "te" and kv_heads % lay.cp:
        found.append(
            f"cp={lay.cp} with cp_comm_type a2a needs cp to divide the {kv_heads} KV heads per "
            f"TP rank ({framework.name} splits them as they are)"
        )
    return found


def _experts(lay: Layout, job: Job) -> list[str]:
    """EP needs experts % EP == 0 and the expert grid world % (ETP*EP*PP) == 0
    (``parallel_state.py``, "expert_tensor_model_pipeline_parallel_size"); ETP other than TP
    needs experts, and a framework whose experts can have their own TP."""
    model, train = job.model, job.train
    if not model.is_moe:
        given = [f"ep={lay.ep}"] * (lay.ep > 1) + [f"etp={lay.etp}"] * (lay.etp is not None)
        dense = f"needs a mixture-of-experts model; {model.name} is dense"
        return [f"{degree} {dense}" for degree in given]
    found = []
    if lay.etp is not None and not train.framework.expert_tensor_parallel:
        found.append(
            f"etp={lay.etp}: {train.framework.name} splits experts over TP only "
            f"(etp must equal tp={lay.tp})"
        )
    if model.num_experts % lay.ep:
        found.append(f"ep={lay.ep} does not divide num_experts={model.num_experts}")
    grid = lay.expert_tp * lay.ep * lay.pp
    if lay.world_size % grid:
        found.append(
            f"expert grid etp({lay.expert_tp}) * ep({lay.ep}) * pp({lay.pp}) = {grid} does not "
            f"divide the world size {lay.world_size}"
        )
    if lay.ep > 1 and lay.tp > 1 and not lay.sequence_parallel:
        found.append("ep > 1 with tp > 1 needs sequence_parallel (model_parallel_config.py)")
    return found


def _sequence_parallel(lay: Layout, job: Job) -> list[str]:
    """SP is meaningless with TP == 1 (Megatron turns it off); with it, TP splits the sequence
    of each CP rank (seq / CP tokens) into equal parts (``_split_along_first_dim`` in
    ``megatron/core/tensor_parallel/mappings.py`` asserts it). torchtitan's TP always runs
    with SP and its sequence is a multiple of tp x 2 x cp (``parallel_dims.py``
    ``seq_len_divisor``, asserted in ``parallelize.py``; docs/torchtitan.md 2)."""
    train = job.train
    framework = train.framework
    found = []
    if framework.seq_len_tp_2cp and train.seq_len % (2 * lay.tp * lay.cp):
        found.append(
            f"seq_len={train.seq_len} is not a multiple of tp*2*cp={2 * lay.tp * lay.cp} "
            f"({framework.name}'s sequence divisor)"
        )
    if framework.sequence_parallel_always and lay.tp > 1 and not lay.sequence_parallel:
        found.append(f"tp={lay.tp} on {framework.name} runs with sequence_parallel only")
    if not lay.sequence_parallel:
        return found
    if lay.tp == 1:
        return [*found, "sequence_parallel needs tp > 1"]
    if train.seq_len % (lay.cp * lay.tp):
        found.append(
            f"sequence_parallel with tp={lay.tp} needs seq_len={train.seq_len} divisible by "
            f"cp*tp={lay.cp * lay.tp} (tp splits each CP rank's sequence)"
        )
    return found


def _batch(lay: Layout, job: Job) -> list[str]:
    """global_batch % (micro_batch * DP) == 0 (num_microbatches_calculator.py)."""
    train = job.train
    if not _divides(lay.micro_batch * lay.dp, train.global_batch_size):
        return [
            f"micro_batch({lay.micro_batch}) * dp({lay.dp}) = {lay.micro_batch * lay.dp} does "
            f"not divide global_batch_size={train.global_batch_size}"
        ]
    return []


def _recompute(lay: Layout, job: Job) -> list[str]:
    """recompute_layers only with full recompute, and at most the layers of a stage;
    recompute_modules only with selective recompute (transformer_config.py reads them then);
    selective recompute only where the framework recomputes modules (torchtitan's selective
    modes are not Megatron's: docs/torchtitan.md 5)."""
    model, train = job.model, job.train
    found = []
    if lay.recompute == "selective" and not train.framework.recompute_modules:
        found.append(
            f"recompute=selective: {train.framework.name} has no selective recompute of "
            "modules (use none or full)"
        )
    if lay.recompute_modules is not None and lay.recompute != "selective":
        found.append(
            f"recompute_modules=[{','.join(lay.recompute_modules)}] needs recompute=selective"
        )
    if lay.recompute_layers is None:
        return found
    if lay.recompute != "full":
        return [*found, f"recompute_layers={lay.recompute_layers} needs recompute=full"]
    stages = lay.stage_layers(model, train)
    if len(stages) == lay.pp and lay.recompute_layers > max(stages):
        found.append(
            f"recompute_layers={lay.recompute_layers} exceeds the "
            f"{max(stages)} layers per pipeline stage"
        )
    return found


def _recompute_modules(lay: Layout, job: Job) -> list[str]:
    """Each module of ``recompute_modules`` is one the model has
    (:func:`autotune.simulators.recompute_modules.model_problems`) and the framework can
    checkpoint (``FrameworkSpec.recompute_modules``); ``layernorm`` needs a norm that runs on
    its own; and Megatron-Core's refusals (``transformer_config.py``): ``moe_act`` needs the
    experts' grouped GEMMs (the launch files give ``--moe-grouped-gemm`` to bf16 runs), and
    ``moe_act`` and ``layernorm`` refuse FP8's delayed scaling (Megatron's default
    ``--fp8-recipe``, which the launch files keep). ``moe`` beside the EP all-to-all overlap
    is the expert-overlap rule's."""
    model, train = job.model, job.train
    modules = lay.recompute_modules
    if modules is None or lay.recompute != "selective":
        return []
    framework = train.framework
    found = model_problems(modules, model)
    lacking = {name for name in modules if not layer_modules((name,), model, model.is_moe)}
    for name in modules:
        if name not in framework.recompute_modules and name not in lacking:
            found.append(
                f"recompute module {name}: {framework.name} cannot recompute it (its modules: "
                f"{', '.join(framework.recompute_modules)})"
            )
    kinds = [
        moe for moe, n in ((False, model.num_dense_layers), (True, model.num_moe_layers)) if n
    ]
    fused = framework.fused_norm_linear
    if "layernorm" in modules and not any(standalone_norms(model, m, fused) for m in kinds):
        found.append(
            f"recompute module layernorm: {framework.name} fuses every norm of {model.name} "
            "into the linear layer after it (Transformer Engine), no norm runs on its own"
        )
    if train.fp8:
        found += [
            f"recompute module {name} does not run with FP8's delayed scaling, the recipe "
            "of the launch files (transformer_config.py)"
            for name in modules
            if name in ("layernorm", "moe_act")
        ]
    if "moe_act" in modules and model.is_moe:
        runs = job.dtype
        if runs != "bf16":
            found.append(
                "recompute module moe_act needs the experts' grouped GEMMs "
                f"(--moe-grouped-gemm), which the launch files give bf16 runs only (this one "
                f"runs {runs})"
            )
    return found


def _expert_overlap(lay: Layout, job: Job) -> list[str]:
    """The EP all-to-all overlap needs EP, virtual stages when pp > 1, no full recompute and
    no recompute of the MoE layer (Megatron-Core's transformer_config.py asserts each)."""
    model, train = job.model, job.train
    if not (train.moe_a2a_overlap and model.is_moe):
        return []
    found = []
    if lay.ep == 1:
        found.append("moe_a2a_overlap needs ep > 1")
    if lay.pp > 1 and lay.vpp == 1:
        found.append(f"moe_a2a_overlap with pp={lay.pp} needs vpp > 1")
    if lay.recompute == "full":
        found.append("moe_a2a_overlap does not run with recompute=full")
    if "moe" in lay.recomputed_modules:
        found.append("moe_a2a_overlap does not run with recompute module moe")
    return found


def _sharding(lay: Layout, job: Job) -> list[str]:
    """The ZeRO stage is one the framework runs (``FrameworkSpec.zero_stages``: Megatron-FSDP
    for 2 and 3 on Megatron-Core, DeepSpeed's ZeRO on Megatron-DeepSpeed), with pipeline
    parallelism only where it can (DeepSpeed's pipeline engine asserts stage < 2,
    ``deepspeed/runtime/pipe/engine.py``); hybrid sharding (``dp_replicate`` > 1) needs a
    framework that replicates sharded states (Megatron's ``--num-distributed-optimizer-
    instances``), sharded states to replicate, and replicas that divide the data-parallel
    ranks and the expert-DP ranks (``parallel_state.py`` asserts both) (docs/reference.md 7.9).
    torchtitan (docs/torchtitan.md 2): DDP refuses TP, PP and CP (``parallelize.py``: "DDP has
    not supported > 1D parallelism"), without FSDP (a shard group of one rank) TP and PP run
    in fp32 (``maybe_enable_amp``), and ``dp_replicate`` divides DP (``parallel_dims.py``:
    ``dp_replicate x dp_shard x cp x tp x pp`` is the world)."""
    model, train = job.model, job.train
    framework, stage, replicas = train.framework, lay.sharding, lay.dp_replicate
    found = []
    stages = "/".join(map(str, framework.zero_stages))
    if stage not in framework.zero_stages:
        found.append(f"zero_stage={stage}: {framework.name} runs ZeRO stages {stages} only")
    elif lay.pp > 1 and stage not in framework.pipeline_zero_stages:
        allowed = "/".join(map(str, framework.pipeline_zero_stages))
        found.append(
            f"zero_stage={stage} with pp={lay.pp}: {framework.name} runs ZeRO stages {allowed} "
            "with pipeline parallelism (use pp=1)"
        )
    if framework.ddp_alone and stage == 0 and lay.dp > 1 and max(lay.tp, lay.pp, lay.cp) > 1:
        found.append(
            f"zero_stage=0 with dp={lay.dp}: {framework.name}'s replicated data parallelism "
            "(DDP) runs without tp, pp and cp only (use zero_stage=3)"
        )
    elif framework.ddp_alone and lay.tp * lay.pp > 1 and (stage == 0 or lay.dp_shard == 1):
        found.append(
            f"tp={lay.tp} pp={lay.pp} without FSDP over more than one rank (zero_stage={stage}, "
            f"dp*cp/dp_replicate={lay.dp_shard}): {framework.name} runs TP and PP in mixed "
            "precision only under FSDP, else the step trains in fp32 or, replicated, does not "
            "start (use zero_stage=3 with dp*cp/dp_replicate > 1)"
        )
    if replicas == 1:
        return found
    if framework.replicas_outside_cp and lay.dp % replicas:
        found.append(
            f"dp_replicate={replicas} does not divide dp={lay.dp}: {framework.name} replicates "
            "over data-parallel ranks only"
        )
    if not framework.hybrid_sharding:
        found.append(f"dp_replicate={replicas}: {framework.name} has no hybrid sharding")
    if not lay.distributed_optimizer:
        found.append(
            f"dp_replicate={replicas} replicates sharded states: it needs distributed_optimizer"
        )
    if (lay.dp * lay.cp) % replicas:
        found.append(
            f"dp_replicate={replicas} does not divide the dp*cp={lay.dp * lay.cp} "
            "data-parallel ranks"
        )
    elif model.is_moe and lay.expert_dp % replicas:
        found.append(
            f"dp_replicate={replicas} does not divide the {lay.expert_dp} expert-DP ranks"
        )
    return found


def _divides(divisor: int, value: int) -> bool:
    return divisor > 0 and value % divisor == 0


# Each rule by the name that reports count broken layouts under.
_RULES: dict[str, Rule] = {
    "world size": _world_size,
    "heads": _heads,
    "layers": _layers,
    "virtual pipeline": _virtual_pipeline,
    "context parallel": _context,
    "experts": _experts,
    "sequence parallel": _sequence_parallel,
    "batch": _batch,
    "recompute": _recompute,
    "recompute modules": _recompute_modules,
    "expert overlap": _expert_overlap,
    "sharding": _sharding,
}
RULE_NAMES: tuple[str, ...] = tuple(_RULES)
