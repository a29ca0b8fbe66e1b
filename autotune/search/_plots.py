"""Figures of a search: Optuna's own plots and predicted time against memory, as one HTML page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
import pandas as pd

from autotune.figures import html_page
from autotune.order import sort_frame
from autotune.simulators import LAYOUT_FIELDS

__all__ = ["MEMORY_WINDOW", "MemoryWindow", "memory_window", "search_page"]

MEMORY_WINDOW = 1.5  # the memory axis runs from 0 to this many times the device memory
_FITS = {True: "fits", False: "does not fit"}


@dataclass(frozen=True, slots=True)
class MemoryWindow:
    """The layouts shown on the time-vs-memory plot, and how many lie beyond its axis.

    ``shown`` holds one row per distinct layout with at most ``limit_gib`` of peak memory,
    those that fit first, then the fastest; ``beyond`` layouts need more and are left out.
    """

    shown: pd.DataFrame
    capacity_gib: float  # the device's memory
    fits_below_gib: float  # the peak a layout may have to fit, with the memory margin
    limit_gib: float
    beyond: int

    @property
    def title(self) -> str:
        title = "Predicted step time against peak memory per device"
        if self.beyond:
            title += f" ({self.beyond} layouts above {self.limit_gib:.0f} GiB not shown)"
        return title


def memory_window(trials: pd.DataFrame) -> MemoryWindow:
    """The distinct layouts of ``trials`` within ``MEMORY_WINDOW`` x the device memory.

    A layout that needs 20 times the device memory would squash the region that matters, near
    the capacity, into a sliver; when no layout lies within the window, every one is shown.
    """
    layout_columns = [c for c in LAYOUT_FIELDS if c in trials.columns]
    layouts = sort_frame(trials, "fits", "step_time_s", "memory_gib").drop_duplicates(
        layout_columns
    )
    fits_below = float(layouts["memory_capacity_gib"].iloc[0])
    capacity = float(layouts.get("device_memory_gib", layouts["memory_capacity_gib"]).iloc[0])
    limit = MEMORY_WINDOW * capacity
    inside = layouts["memory_gib"] <= limit
    if not inside.any():
        limit, inside = float(layouts["memory_gib"].max()), pd.Series(True, index=layouts.index)
    shown = layouts[inside].assign(memory=layouts["fits"].map(_FITS)).reset_index(drop=True)
    return MemoryWindow(shown, capacity, fits_below, limit, int((~inside).sum()))


def search_page(study: optuna.Study, trials: pd.DataFrame) -> str:
    """``plots.html``: optimization history (a grid: its ranked profile), parallel
    coordinates, the Pareto front (multi-objective samplers), time vs memory."""
    multi = len(study.directions) > 1
    target = (lambda t: t.values[0]) if multi else None
    grid = bool(study.trials) and all(
        t.user_attrs.get("autotune.origin") == "grid" for t in study.trials
    )
    figures = [
        _ranked_profile(trials)
        if grid  # its trials are the best layouts in rank order: no history to show
        else optuna.visualization.plot_optimization_history(
            study, target=target, target_name="step time (s)"
        ),
        optuna.visualization.plot_parallel_coordinate(
            study, target=target, target_name="step time (s)"
        ),
    ]
    if multi:
        figures.append(
            optuna.visualization.plot_pareto_front(
                study, target_names=["step time (s)", "peak memory (GiB)"]
            )
        )
    if not trials.empty:
        figures.append(_time_vs_memory(memory_window(trials)))
    return html_page(f"Search {study.study_name}", figures)


def _ranked_profile(trials: pd.DataFrame) -> Any:
    """Step time by rank of every layout a grid priced (a grid has no search history)."""
    import plotly.express as px

    return px.scatter(
        trials.assign(memory=trials["fits"].map(_FITS)),
        x="rank",
        y="step_time_s",
        color="memory",
        category_orders={"memory": list(_FITS.values())},
        hover_data=[c for c in LAYOUT_FIELDS if c in trials.columns],
        labels={"rank": "rank (the grid priced every layout)", "step_time_s": "step time (s)"},
        title="Ranked profile: predicted step time of every layout, best first",
    )


def _time_vs_memory(window: MemoryWindow) -> Any:
    import plotly.express as px

    scatter = px.scatter(
        window.shown,
        x="memory_gib",
        y="step_time_s",
        color="memory",
        category_orders={"memory": list(_FITS.values())},
        hover_data=[c for c in ("rank", *LAYOUT_FIELDS) if c in window.shown.columns],
        labels={"memory_gib": "peak memory per device (GiB)", "step_time_s": "step time (s)"},
        title=window.title,
    )
    scatter.update_xaxes(range=[0, window.limit_gib])
    scatter.add_vline(
        x=window.capacity_gib,
        line_dash="dash",
        annotation_text=f"device memory {window.capacity_gib:.0f} GiB",
    )
    if window.fits_below_gib < window.capacity_gib:
        scatter.add_vline(
            x=window.fits_below_gib,
            line_dash="dot",
            annotation_text=f"fits below {window.fits_below_gib:.1f} GiB (memory margin)",
            annotation_position="bottom left",
        )
    return scatter
