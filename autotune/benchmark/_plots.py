"""Plots of a benchmark result: regret per simulator, predicted vs measured, regret per source.

The data of each plot is a plain frame built first; plotly renders the interactive HTML (with
plotly.js inside, :mod:`autotune.figures`) and matplotlib the PNG files (no kaleido needed).
Regret is shown in percent, as in the tables, and a simulator with no scenario to score shows
"no data", never an empty or zero bar.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autotune.benchmark._protocol_tables import curve_label
from autotune.benchmark._protocol_tables import regret_curve
from autotune.benchmark._score import BenchmarkResult
from autotune.figures import html_page
from autotune.simulators.files import atomic_writer
from autotune.simulators.files import write_atomically

__all__ = ["NO_DATA", "PLOT_FILES", "matplotlib_figures", "plot_frames", "write_plots"]

NO_DATA = "no data"
_TITLES = {
    "regret_per_simulator.png": "Regret@1 per scenario",
    "predicted_vs_measured.png": "Predicted vs measured step time",
    "regret_per_source.png": "Mean regret@1 per source",
    "regret_vs_probes.png": "Mean regret@1 against the number of probes K",
}
PLOT_FILES = ("plots.html", *_TITLES)  # every file write_plots may write


def plot_frames(result: BenchmarkResult) -> dict[str, pd.DataFrame]:
    """The data of the plots.

    ``rankers``: every simulator, peer and baseline in the tables' order, with its number of
    scored scenarios; ``regret``: regret@1 per (simulator, scenario); ``scatter``: predicted
    and measured time per row; ``by_source``: every (source, simulator) pair with its scored
    scenarios, mean regret@1 (NaN when none) and the bar's label.
    """
    shown = _headline(result)
    rankers = pd.DataFrame(
        {
            "simulator": shown,
            "n_scenarios": [result.summaries[name]["n_scenarios"] for name in shown],
        }
    )
    eligible = result.scenarios[
        result.scenarios["eligible"] & result.scenarios["simulator"].isin(shown)
    ]
    regret = eligible[["simulator", "source", "scenario", "regret_at_1"]]
    rows = result.rows
    if len(rows):
        rows = rows[rows["simulator"].isin(shown)]
        finite = rows["predicted_step_time_s"].notna() & rows["step_time_s"].notna()
        scatter = rows.loc[
            finite,
            ["simulator", "source", "scenario", "layout", "step_time_s", "predicted_step_time_s"],
        ]
    else:
        scatter = pd.DataFrame(
            columns=["simulator", "source", "step_time_s", "predicted_step_time_s"]
        )
    return {
        "rankers": rankers,
        "regret": regret,
        "scatter": scatter,
        "by_source": _by_source(result.scenarios, regret, list(rankers["simulator"])),
        "curve": regret_curve(result),
    }


def _headline(result: BenchmarkResult) -> list[str]:
    """The rankers the per-ranker plots show: every one but the probe protocols at K other
    than the k of regret@k (or the largest K); the others are in the regret-against-K plot."""
    ks = {s.get("probes") or 0 for s in result.summaries.values()} - {0}
    top_k = [
        int(c.rsplit("_", 1)[1]) for c in result.scenarios.columns if c.startswith("regret_at_")
    ]
    shown = next((k for k in top_k if k in ks and k != 1), max(ks, default=0))
    return [n for n, s in result.summaries.items() if s.get("probes") in (None, 0, shown)]


def _by_source(scenarios: pd.DataFrame, regret: pd.DataFrame, rankers: list[str]) -> pd.DataFrame:
    pairs = pd.MultiIndex.from_product(
        [sorted(scenarios["source"].unique()), rankers], names=["source", "simulator"]
    ).to_frame(index=False)
    scored = regret.groupby(["source", "simulator"], as_index=False).agg(
        n_scenarios=("regret_at_1", "size"), regret_at_1=("regret_at_1", "mean")
    )
    frame = pairs.merge(scored, how="left", on=["source", "simulator"])
    frame["n_scenarios"] = frame["n_scenarios"].fillna(0).astype(int)
    frame["label"] = [
        f"{100 * value:.1f}%" if n else NO_DATA
        for n, value in zip(frame["n_scenarios"], frame["regret_at_1"], strict=True)
    ]
    return frame


def write_plots(result: BenchmarkResult, report_dir: Path) -> list[Path]:
    """Write ``plots.html`` (plotly) and one PNG per plot (matplotlib), each whole or not at
    all; the paths written."""
    frames = plot_frames(result)
    html = report_dir / "plots.html"
    write_atomically(html, _plotly_html(frames), follow_symlinks=False)
    written = [html]
    for name, figure in matplotlib_figures(frames).items():
        written.append(_save(figure, report_dir / name))
    return written


def _plotly_html(frames: dict[str, pd.DataFrame]) -> str:
    import plotly.express as px

    order = {"simulator": list(frames["rankers"]["simulator"])}
    regret = px.box(
        frames["regret"],
        x="simulator",
        y="regret_at_1",
        points="all",
        hover_data=["source", "scenario"],
        category_orders=order,
        title=_TITLES["regret_per_simulator.png"],
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
        title=_TITLES["predicted_vs_measured.png"] + " (s)",
    )
    by_source = px.bar(
        frames["by_source"].fillna({"regret_at_1": 0.0}),
        x="source",
        y="regret_at_1",
        color="simulator",
        text="label",
        barmode="group",
        hover_data=["n_scenarios"],
        category_orders=order,
        title=_TITLES["regret_per_source.png"],
    )
    by_source.update_yaxes(tickformat=".0%")
    by_source.update_traces(textposition="outside")
    figures = [regret, scatter, by_source]
    curve = frames["curve"]
    if len(curve):
        lines = px.line(
            curve.assign(
                ranker=[curve_label(*pair) for pair in curve[["simulator", "protocol"]].to_numpy()]
            ),
            x="K",
            y="regret_at_1_mean",
            color="ranker",
            markers=True,
            title=_TITLES["regret_vs_probes.png"],
        )
        lines.update_yaxes(tickformat=".1%")
        figures.append(lines)
    return html_page("Simulator benchmark", figures)


def matplotlib_figures(frames: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """One matplotlib figure per PNG file name, each with its title."""
    import matplotlib

    matplotlib.use("Agg")
    figures = {
        "regret_per_simulator.png": _regret_figure(frames["rankers"], frames["regret"]),
        "predicted_vs_measured.png": _scatter_figure(frames["scatter"]),
        "regret_per_source.png": _by_source_figure(frames["by_source"]),
    }
    if len(frames["curve"]):
        figures["regret_vs_probes.png"] = _curve_figure(frames["curve"])
    return figures


def _curve_figure(curve: pd.DataFrame) -> Any:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for (simulator, protocol), group in curve.groupby(["simulator", "protocol"], sort=False):
        group = group.sort_values("K")
        ax.plot(
            group["K"],
            group["regret_at_1_mean"],
            marker="o",
            label=curve_label(simulator, protocol),
        )
    ax.set_xticks(sorted(curve["K"].unique()))
    ax.set_xlabel("probes K (measured layouts per scenario)")
    ax.set_ylabel("mean regret@1")
    ax.set_ylim(bottom=0)
    _percent_axis(ax)
    ax.legend(fontsize=7)
    ax.set_title(_TITLES["regret_vs_probes.png"])
    return fig


def _percent_axis(ax: Any) -> None:
    from matplotlib.ticker import PercentFormatter

    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))


def _regret_figure(rankers: pd.DataFrame, regret: pd.DataFrame) -> Any:
    import matplotlib.pyplot as plt

    names = list(rankers["simulator"])
    fig, ax = plt.subplots(figsize=(7, 4))
    scored = [i for i, n in enumerate(rankers["n_scenarios"]) if n]
    if scored:
        ax.boxplot(
            [regret.loc[regret["simulator"] == names[i], "regret_at_1"] for i in scored],
            positions=[i + 1 for i in scored],
        )
    for i in set(range(len(names))) - set(scored):
        ax.text(i + 1, 0.5, NO_DATA, transform=ax.get_xaxis_transform(), ha="center")
    ax.set_xticks(range(1, len(names) + 1), names)
    ax.set_xlim(0.5, len(names) + 0.5)
    ax.set_ylabel("regret@1")
    _percent_axis(ax)
    ax.set_title(_TITLES["regret_per_simulator.png"])
    return fig


def _scatter_figure(scatter: pd.DataFrame) -> Any:
    import matplotlib.pyplot as plt

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
    else:
        ax.text(0.5, 0.5, NO_DATA, transform=ax.transAxes, ha="center")
    ax.set_xlabel("measured step time (s)")
    ax.set_ylabel("predicted step time (s)")
    ax.set_title(_TITLES["predicted_vs_measured.png"])
    return fig


def _by_source_figure(by_source: pd.DataFrame) -> Any:
    import matplotlib.pyplot as plt

    sources = list(dict.fromkeys(by_source["source"]))
    names = list(dict.fromkeys(by_source["simulator"]))
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(max(7, 1.5 * len(sources)), 4.5))
    for i, name in enumerate(names):
        mine = by_source[by_source["simulator"] == name].set_index("source").loc[sources]
        bars = ax.bar(
            np.arange(len(sources)) + (i - (len(names) - 1) / 2) * width,
            mine["regret_at_1"].fillna(0.0),
            width,
            label=name,
        )
        ax.bar_label(bars, list(mine["label"]), rotation=90, fontsize=6, padding=2)
    scenarios = by_source.groupby("source", sort=False)["n_scenarios"].max()
    ax.set_xticks(
        range(len(sources)),
        [f"{s}\n{scenarios[s]} scenario{'' if scenarios[s] == 1 else 's'}" for s in sources],
        fontsize=8,
    )
    ax.margins(y=0.2)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("mean regret@1")
    _percent_axis(ax)
    ax.legend(fontsize=7)
    ax.set_title(_TITLES["regret_per_source.png"])
    return fig


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    try:
        fig.tight_layout()
        with atomic_writer(path, binary=True, follow_symlinks=False) as handle:
            fig.savefig(handle, format="png", dpi=110)
    finally:
        plt.close(fig)
    return path
