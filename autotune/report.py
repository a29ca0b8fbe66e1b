"""What the terminal shows: the top layouts, their time breakdown, and the launch flags."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import cast

import pandas as pd

from autotune.launch import layout_flags
from autotune.simulators import BREAKDOWN_KEYS
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import Prediction

__all__ = [
    "breakdown_table",
    "launch_text",
    "layout_row",
    "layout_table",
    "op_class_table",
    "op_costs_text",
    "rank_table",
    "rank_views",
]

# Short column names of the time breakdown (BREAKDOWN_KEYS).
_TIME_LABELS = {
    "compute": "compute",
    "recompute": "recompute",
    "tp_comm": "TP",
    "cp_comm": "CP",
    "ep_comm": "EP",
    "pp_comm": "PP p2p",
    "dp_comm": "DP",
    "bubble": "bubble",
    "optimizer": "optim",
}
# Pipeline ranks listed one by one; past this, the first, last, slowest and fullest only.
_MAX_RANK_ROWS = 16


def layout_row(layout: Layout, prediction: Prediction) -> dict[str, object]:
    """One layout and its headline figures as a flat row (trial and top-k tables)."""
    fields = layout.as_cells()  # as a measurement file writes it: 19/21/21/19
    return {
        **fields,
        "step_time_s": prediction.step_time_s,
        "tokens_per_s_per_device": prediction.tokens_per_s_per_device,
        "mfu": prediction.mfu,
        "memory_gib": prediction.memory_gib,
        "memory_capacity_gib": prediction.memory_capacity_gib,
        "device_memory_gib": prediction.device_memory_gib,
        "memory_margin": prediction.memory_margin,
        "fits": prediction.fits,
        **{f"time_{k}_s": prediction.breakdown.get(k, 0.0) for k in BREAKDOWN_KEYS},
    }


def layout_table(ranked: Sequence[tuple[Layout, Prediction]]) -> str:
    """The top layouts: degrees, options, step time, tokens/s, MFU, memory vs capacity.

    A ``split`` column (layers per pipeline stage) appears when a listed layout sets its own
    split: two layouts that differ only there would otherwise look the same. An ``etp``
    column (the experts' TP) appears likewise when a listed layout gives its experts a TP
    of their own, and a ``zero`` column (the ZeRO stage, ``xN`` with N replicas of the
    shards) when a listed layout shards beyond the optimizer states or replicates them;
    ``dist-opt`` says stages 0 and 1 otherwise."""
    show_split = any(lay.layer_split is not None for lay, _ in ranked)
    show_etp = any(lay.etp is not None for lay, _ in ranked)
    show_zero = any(lay.zero_stage is not None or lay.dp_replicate > 1 for lay, _ in ranked)
    rows = []
    for rank, (lay, pred) in enumerate(ranked, start=1):
        recompute = lay.recompute
        if lay.recompute_layers is not None:
            recompute += f":{lay.recompute_layers}"
        if lay.recompute_modules is not None:
            recompute += ":" + "+".join(lay.recompute_modules)
        split = {}
        if show_split:
            split["split"] = "default" if lay.layer_split is None else _split_text(lay.layer_split)
        rows.append(
            {
                "#": rank,
                "dp": lay.dp,
                "tp": lay.tp,
                "pp": lay.pp,
                "cp": lay.cp,
                "ep": lay.ep,
                **({"etp": lay.expert_tp} if show_etp else {}),
                "vpp": lay.vpp,
                **split,
                "mbs": lay.micro_batch,
                "recompute": recompute,
                "sp": "yes" if lay.sequence_parallel else "no",
                "dist-opt": "yes" if lay.distributed_optimizer else "no",
                **({"zero": _zero_text(lay)} if show_zero else {}),
                "step s": f"{pred.step_time_s:.3f}",
                "tok/s/dev": f"{pred.tokens_per_s_per_device:.0f}",
                "MFU": f"{100 * pred.mfu:.1f}%",
                **_memory_columns(pred),
            }
        )
    return pd.DataFrame(rows).to_string(index=False)


def _memory_columns(prediction: Prediction) -> dict[str, str]:
    """The predicted peak over the device's memory; with a memory margin, the peak with the
    margin added beside it (what must fit). OOM marks a layout that does not fit."""
    oom = "" if prediction.fits else " OOM"
    used = f"{prediction.memory_gib:.1f}/{prediction.device_memory_gib:.0f}"
    if prediction.memory_margin == 0:
        return {"mem GiB": used + oom}
    return {"mem GiB": used, "+margin": f"{prediction.memory_with_margin_gib:.1f}{oom}"}


def _zero_text(layout: Layout) -> str:
    """The ZeRO stage, with the replicas of hybrid sharding: ``3``, ``1x2``."""
    replicas = f"x{layout.dp_replicate}" if layout.dp_replicate > 1 else ""
    return f"{layout.sharding}{replicas}"


def _split_text(split: Sequence[int]) -> str:
    """Layers per stage with runs folded: (2, 4, 4, 4, 3) -> ``2/4x3/3``."""
    runs = [(count, len(list(group))) for count, group in itertools.groupby(split)]
    return "/".join(f"{count}x{times}" if times > 1 else str(count) for count, times in runs)


def breakdown_table(ranked: Sequence[tuple[Layout, Prediction]]) -> str:
    """Where each top layout's step time goes, in seconds (columns sum to the step)."""
    rows = [
        {
            "#": rank,
            **{_TIME_LABELS[k]: f"{pred.breakdown.get(k, 0.0):.3f}" for k in BREAKDOWN_KEYS},
        }
        for rank, (_, pred) in enumerate(ranked, start=1)
    ]
    return pd.DataFrame(rows).to_string(index=False)


def rank_views(prediction: Prediction) -> dict[str, Any] | None:
    """Per pipeline rank: layers, step time and its breakdown (s), memory and its breakdown
    (GiB), compute time by operator class (s); the slowest rank's operator classes; what a
    profiled op-cost table covers. JSON-ready (finite numbers or null); None for a prediction
    without per-rank views (the analytical simulator's).
    """
    detail = prediction.detail
    if "rank_time_s" not in detail:
        return None
    rank_time = cast(list[float], detail["rank_time_s"])
    columns = {
        "layers": detail["stage_layers"],
        "step_time_s": rank_time,
        "breakdown_s": detail["rank_breakdown_s"],
        "memory_gib": detail["rank_memory_gib"],
        "memory_breakdown_gib": detail["rank_memory_breakdown_gib"],
        "op_category_time_s": detail["rank_op_category_time_s"],
    }
    ranks = [
        {"rank": r, **{key: cast(list[Any], values)[r] for key, values in columns.items()}}
        for r in range(len(rank_time))
    ]
    views: dict[str, Any] = {
        "schedule": detail.get("schedule"),
        "slowest_rank": detail["slowest_rank"],
        "ranks": ranks,
        "op_category_time_s": detail["op_category_time_s"],
    }
    if "op_costs" in detail:
        views["op_costs"] = detail["op_costs"]
    return cast(dict[str, Any], _finite(views))


def rank_table(views: Mapping[str, Any]) -> str:
    """Time (s per step) and memory (GiB) of each pipeline rank, from :func:`rank_views`.

    Time columns that are zero on every rank are left out. Past 16 ranks, only the first,
    the last, the slowest and the one with the most memory are listed.
    """
    ranks = views["ranks"]
    keys = [
        k
        for k in BREAKDOWN_KEYS
        if k in ("compute", "bubble") or any(r["breakdown_s"].get(k) for r in ranks)
    ]
    shown = ranks
    if len(ranks) > _MAX_RANK_ROWS:
        fullest = max(range(len(ranks)), key=lambda r: ranks[r]["memory_gib"] or 0.0)
        picked = sorted({0, len(ranks) - 1, views["slowest_rank"], fullest})
        shown = [ranks[r] for r in picked]
    rows = []
    for rank in shown:
        memory = rank["memory_breakdown_gib"]
        states = sum(v or 0.0 for k, v in memory.items() if k not in ("activations", "reserved"))
        rows.append(
            {
                "rank": rank["rank"],
                "layers": rank["layers"],
                "step s": _fixed(rank["step_time_s"]),
                **{_TIME_LABELS[k]: _fixed(rank["breakdown_s"].get(k, 0.0)) for k in keys},
                "mem GiB": _fixed(rank["memory_gib"], 1),
                "states": _fixed(states, 1),
                "activations": _fixed(memory.get("activations"), 1),
            }
        )
    table = pd.DataFrame(rows).to_string(index=False)
    if len(shown) < len(ranks):
        table += f"\n({len(ranks) - len(shown)} more ranks in output=json)"
    return table


def op_class_table(views: Mapping[str, Any]) -> str:
    """Compute time by operator class of the slowest rank: seconds per step and share."""
    seconds = views["op_category_time_s"]
    total = sum(v or 0.0 for v in seconds.values())
    rows = [
        {
            "class": name,
            "seconds": _fixed(value),
            "share": f"{100 * (value or 0.0) / total:.1f}%" if total > 0 else "-",
        }
        for name, value in seconds.items()
    ]
    return pd.DataFrame(rows).to_string(index=False)


def op_costs_text(views: Mapping[str, Any]) -> tuple[str, str | None]:
    """What a profiled op-cost table covers of the layout, and a warning when the table was
    timed on another device than the cluster's (None when it was not)."""
    costs = views["op_costs"]
    line = (
        f"Op costs: {costs['profiled']} of the layout's {costs['operators']} operators from "
        f"{costs['table']} (timed on {costs['table_device']}), "
        f"{costs['roofline']} by roofline"
    )
    warning = None
    if not costs["same_device"]:
        warning = (
            f"warning: {costs['table']} was profiled on {costs['table_device']}, "
            f"not on the cluster's {costs['cluster_device']}: its times are that device's"
        )
    return line, warning


def _fixed(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _finite(value: object) -> object:
    """``value`` with every non-finite float (nan, inf) replaced by None (JSON null)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def launch_text(job: Job, layout: Layout) -> str:
    """The options that launch the layout on the job's framework, ready to paste, or what
    that framework cannot run of it; ``autotune.launch.write_launch_files`` writes the whole
    launch (README: Launch the pick)."""
    launch = layout_flags(job, layout)
    stack = f"{launch.title} ({launch.framework} {launch.release})"
    if launch.refused:
        refused = "".join(f"\n  - {line}" for line in launch.refused)
        return f"{stack} cannot launch this layout:{refused}"
    return f"{stack}:\n  " + " \\\n  ".join(launch.flags)
