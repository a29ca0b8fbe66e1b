"""Figures of a search: Optuna's own plots and predicted time against memory, as one HTML page."""

from __future__ import annotations

from collections.abc import Sequence
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
# The chosen layout's marker on every plot (README: the search's MLflow record)
_STAR = {"symbol": "star", "size": 18, "color": "gold", "line": {"color": "black", "width": 1.5}}


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


def search_page(
    study: optuna.Study,
    trials: pd.DataFrame,
    chosen: str | None = None,
    notes: Sequence[str] = (),
) -> str:
    """``plots.html``: optimization history (a grid: its ranked profile), parallel
    coordinates, the Pareto front (multi-objective samplers), time vs memory; ``notes`` above.

    ``chosen`` (``Layout.describe()`` of the answer, whose row of ``trials`` has ``chosen``
    true) is marked with a star, legend entry "chosen layout", on every plot but the parallel
    coordinates, and named above them."""
    multi = len(study.directions) > 1
    target = (lambda t: t.values[0]) if multi else None
    grid = bool(study.trials) and all(
        t.user_attrs.get("autotune.origin") == "grid" for t in study.trials
    )
    row = _chosen_row(trials)
    label = _chosen_label(row)
    if grid:  # its trials are the best layouts in rank order: no history to show
        history = _ranked_profile(trials)
        if row is not None:
            _star(history, row["rank"], row["step_time_s"], label)
    else:
        history = optuna.visualization.plot_optimization_history(
            study, target=target, target_name="step time (s)"
        )
        _mark_history(history, study, chosen, row, label)
    figures = [
        history,
        optuna.visualization.plot_parallel_coordinate(
            study, target=target, target_name="step time (s)"
        ),
    ]
    if multi:
        front = optuna.visualization.plot_pareto_front(
            study, target_names=["step time (s)", "peak memory (GiB)"]
        )
        if row is not None and row["fits"]:
            _star(front, row["step_time_s"], row["memory_gib"], label)
            # Optuna's colour bars stand where the legend goes: the legend above the plot
            front.update_layout(
                legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"}
            )
        figures.append(front)
    if not trials.empty:
        figures.append(_time_vs_memory(memory_window(trials), label))
    if row is not None:
        where = "the gold star on each plot" + (
            "" if row["fits"] else "; no evaluated layout fits in memory"
        )
        notes = [f"Chosen layout: {chosen}, {row['step_time_s']:.3f} s per step ({where})", *notes]
    return html_page(f"Search {study.study_name}", figures, notes)


def _chosen_row(trials: pd.DataFrame) -> pd.Series | None:
    """The chosen layout's row of ``trials`` (None without a ``chosen`` column or row)."""
    if "chosen" not in trials.columns or not trials["chosen"].any():
        return None
    return trials[trials["chosen"]].iloc[0]


def _chosen_label(row: pd.Series | None) -> str:
    """The legend entry of the chosen layout's star (the layout itself is named above the
    plots: a long entry squeezes a plot in the MLflow UI's narrow preview)."""
    return "chosen layout" if row is None or row["fits"] else "chosen layout (does not fit)"


def _star(figure: Any, x: float, y: float, label: str) -> None:
    """The chosen layout on ``figure``: a star with its own legend entry."""
    import plotly.graph_objects as go

    figure.add_trace(go.Scatter(x=[x], y=[y], mode="markers", marker=_STAR, name=label))


def _mark_history(
    figure: Any, study: optuna.Study, chosen: str | None, row: pd.Series | None, label: str
) -> None:
    """The chosen layout on the optimization history: a star on its first trial, or, when
    no trial priced it (it was found by pricing every layout beside the sampler), a dashed
    line at its step time across the trials (the distance to the trials' best is the
    sampler's gap)."""
    import plotly.graph_objects as go

    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    own = [t for t in complete if chosen and t.user_attrs.get("layout") == chosen]
    if own:
        _star(figure, own[0].number, own[0].values[0], label)
    elif row is not None and complete:
        numbers = [complete[0].number, complete[-1].number]
        figure.add_trace(
            go.Scatter(
                x=numbers,
                y=[row["step_time_s"]] * 2,
                mode="lines",
                line={"dash": "dash", "color": "black"},
                name=f"{label} (no trial: priced beside)",
            )
        )


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


def _time_vs_memory(window: MemoryWindow, label: str) -> Any:
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
    row = _chosen_row(window.shown)
    if row is not None:
        _star(scatter, row["memory_gib"], row["step_time_s"], label)
    return scatter
