"""Figures of a search: Optuna's own plots and predicted time against memory."""

from __future__ import annotations

from typing import Any

import optuna
import pandas as pd

__all__ = ["search_figures", "search_page"]


def search_figures(study: optuna.Study, trials: pd.DataFrame) -> dict[str, Any]:
    """Plotly figures by artifact name: history, parallel coordinates, time vs memory."""
    import plotly.express as px

    multi = len(study.directions) > 1
    target = (lambda t: t.values[0]) if multi else None
    figures: dict[str, Any] = {
        "optimization_history.html": optuna.visualization.plot_optimization_history(
            study, target=target, target_name="step time (s)"
        ),
        "parallel_coordinates.html": optuna.visualization.plot_parallel_coordinate(
            study, target=target, target_name="step time (s)"
        ),
    }
    if not trials.empty:
        scatter = px.scatter(
            trials,
            x="memory_gib",
            y="step_time_s",
            color="fits",
            hover_data=["dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch", "recompute"],
            labels={"memory_gib": "peak memory per device (GiB)", "step_time_s": "step time (s)"},
            title="Predicted step time against peak memory",
        )
        scatter.add_vline(x=float(trials["memory_capacity_gib"].iloc[0]), line_dash="dash")
        figures["time_vs_memory.html"] = scatter
    return figures


def search_page(study: optuna.Study, trials: pd.DataFrame) -> str:
    """The search's figures as one HTML page with plotly.js inline (readable offline)."""
    parts = [
        figure.to_html(full_html=False, include_plotlyjs=(i == 0))
        for i, figure in enumerate(search_figures(study, trials).values())
    ]
    return "<html><head><meta charset='utf-8'></head><body>" + "".join(parts) + "</body></html>"
