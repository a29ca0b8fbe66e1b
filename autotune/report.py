"""What the terminal shows: the top layouts, their time breakdown, and the launch flags."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from autotune.launch import layout_flags
from simulators import BREAKDOWN_KEYS
from simulators import ClusterSpec
from simulators import Layout
from simulators import ModelSpec
from simulators import Prediction
from simulators import TrainSpec

__all__ = ["breakdown_table", "launch_text", "layout_table", "layout_row"]


def layout_row(layout: Layout, prediction: Prediction) -> dict[str, object]:
    """One layout and its headline figures as a flat row (trial and top-k tables)."""
    fields = layout.as_dict()
    if fields["layer_split"] is not None:  # as a measurement file writes it: 19/21/21/19
        fields["layer_split"] = "/".join(map(str, fields["layer_split"]))
    return {
        **fields,
        "step_time_s": prediction.step_time_s,
        "tokens_per_s_per_device": prediction.tokens_per_s_per_device,
        "mfu": prediction.mfu,
        "memory_gib": prediction.memory_gib,
        "memory_capacity_gib": prediction.memory_capacity_gib,
        "fits": prediction.fits,
        **{f"time_{k}_s": prediction.breakdown.get(k, 0.0) for k in BREAKDOWN_KEYS},
    }


def layout_table(ranked: Sequence[tuple[Layout, Prediction]]) -> str:
    """The top layouts: degrees, options, step time, tokens/s, MFU, memory vs capacity."""
    rows = []
    for rank, (lay, pred) in enumerate(ranked, start=1):
        rows.append(
            {
                "#": rank,
                "dp": lay.dp,
                "tp": lay.tp,
                "pp": lay.pp,
                "cp": lay.cp,
                "ep": lay.ep,
                "vpp": lay.vpp,
                "mbs": lay.micro_batch,
                "recompute": lay.recompute,
                "sp": "yes" if lay.sequence_parallel else "no",
                "dist-opt": "yes" if lay.distributed_optimizer else "no",
                "step s": f"{pred.step_time_s:.3f}",
                "tok/s/dev": f"{pred.tokens_per_s_per_device:.0f}",
                "MFU": f"{100 * pred.mfu:.1f}%",
                "mem GiB": f"{pred.memory_gib:.1f}/{pred.memory_capacity_gib:.0f}"
                + ("" if pred.fits else " OOM"),
            }
        )
    return pd.DataFrame(rows).to_string(index=False)


def breakdown_table(ranked: Sequence[tuple[Layout, Prediction]]) -> str:
    """Where each top layout's step time goes, in seconds (columns sum to the step)."""
    labels = {
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
    rows = [
        {"#": rank, **{labels[k]: f"{pred.breakdown.get(k, 0.0):.3f}" for k in BREAKDOWN_KEYS}}
        for rank, (_, pred) in enumerate(ranked, start=1)
    ]
    return pd.DataFrame(rows).to_string(index=False)


def launch_text(model: ModelSpec, cluster: ClusterSpec, train: TrainSpec, layout: Layout) -> str:
    """The options that launch the layout on the job's framework, ready to paste, or what
    that framework cannot run of it; ``autotune.launch.write_launch_files`` writes the whole
    launch (README: Launch the pick)."""
    launch = layout_flags(model, cluster, train, layout)
    if launch.refused:
        refused = "".join(f"\n  - {line}" for line in launch.refused)
        return f"{launch.title} ({launch.framework}) cannot launch this layout:{refused}"
    return f"{launch.title} ({launch.framework}):\n  " + " \\\n  ".join(launch.flags)
