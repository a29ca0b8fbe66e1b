"""Plots of a benchmark result: regret per simulator, predicted vs measured, regret per source.

The data of each plot is a plain frame built first; plotly renders the interactive HTML and
matplotlib the PNG files (no kaleido needed).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from autotune.benchmark._score import BenchmarkResult

__all__ = ["plot_frames", "write_plots"]


def plot_frames(result: BenchmarkResult) -> dict[str, pd.DataFrame]:
    """``regret``: regret@1 per (simulator, scenario); ``scatter``: predicted and measured time
    per row; ``by_source``: mean regret@1 per (source, simulator)."""
    eligible = result.scenarios[result.scenarios["eligible"]]
    regret = eligible[["simulator", "source", "scenario", "regret_at_1"]]
    rows = result.rows
    if len(rows):
        finite = rows["predicted_step_time_s"].notna() & rows["step_time_s"].notna()
        scatter = rows.loc[
            finite,
            ["simulator", "source", "scenario", "layout", "step_time_s", "predicted_step_time_s"],
        ]
    else:
        scatter = pd.DataFrame(
            columns=["simulator", "source", "step_time_s", "predicted_step_time_s"]
        )
    by_source = regret.groupby(["source", "simulator"], as_index=False)["regret_at_1"].mean()
    return {"regret": regret, "scatter": scatter, "by_source": by_source}


def write_plots(result: BenchmarkResult, report_dir: Path) -> list[Path]:
    """Write ``plots.html`` (plotly) and one PNG per plot (matplotlib); the paths written."""
    frames = plot_frames(result)
    html = report_dir / "plots.html"
    html.write_text(_plotly_html(frames), encoding="utf-8")
    return [html, *_matplotlib_pngs(frames, report_dir)]


def _plotly_html(frames: dict[str, pd.DataFrame]) -> str:
    import plotly.express as px

    regret = px.box(
        frames["regret"],
        x="simulator",
        y="regret_at_1",
        points="all",
        hover_data=["source", "scenario"],
        title="Regret@1 per scenario",
    )
    regret.update_yaxes(tickformat=".0%")
    scatter = px.scatter(
        frames["scatter"],
        x="step_time_s",
        y="predicted_step_time_s",
        color="source",
        facet_col="simulator",
        log_x=True,
        log_y=True,
        hover_data=list(frames["scatter"].columns),
        title="Predicted vs measured step time (s)",
    )
    by_source = px.bar(
        frames["by_source"],
        x="source",
        y="regret_at_1",
        color="simulator",
        barmode="group",
        title="Mean regret@1 per source",
    )
    by_source.update_yaxes(tickformat=".0%")
    parts = [
        figure.to_html(full_html=False, include_plotlyjs=(i == 0))
        for i, figure in enumerate((regret, scatter, by_source))
    ]
    return "<html><head><meta charset='utf-8'></head><body>" + "".join(parts) + "</body></html>"


def _matplotlib_pngs(frames: dict[str, pd.DataFrame], report_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    regret = frames["regret"]
    names = list(dict.fromkeys(regret["simulator"]))
    fig, ax = plt.subplots(figsize=(7, 4))
    if names:
        ax.boxplot([regret.loc[regret["simulator"] == n, "regret_at_1"] for n in names])
        ax.set_xticks(range(1, len(names) + 1), names)
    ax.set_ylabel("regret@1")
    ax.set_title("Regret@1 per scenario")
    written.append(_save(fig, report_dir / "regret_per_simulator.png"))

    scatter = frames["scatter"]
    fig, ax = plt.subplots(figsize=(6, 6))
    for (simulator, source), group in scatter.groupby(["simulator", "source"]):
        ax.scatter(
            group["step_time_s"],
            group["predicted_step_time_s"],
            s=8,
            label=f"{simulator} / {source}",
        )
    if len(scatter):
        low = min(scatter["step_time_s"].min(), scatter["predicted_step_time_s"].min())
        high = max(scatter["step_time_s"].max(), scatter["predicted_step_time_s"].max())
        ax.plot([low, high], [low, high], color="black", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=6)
    ax.set_xlabel("measured step time (s)")
    ax.set_ylabel("predicted step time (s)")
    written.append(_save(fig, report_dir / "predicted_vs_measured.png"))

    by_source = frames["by_source"].pivot(
        index="source", columns="simulator", values="regret_at_1"
    )
    fig, ax = plt.subplots(figsize=(7, 4))
    if len(by_source):
        by_source.plot.bar(ax=ax)
    ax.set_ylabel("mean regret@1")
    written.append(_save(fig, report_dir / "regret_per_source.png"))
    return written


def _save(fig: object, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()  # type: ignore[attr-defined]
    fig.savefig(path, dpi=110)  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    return path
