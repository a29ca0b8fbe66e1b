"""Score every ranker on every scenario of a measurement table, then aggregate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from math import comb
from typing import Any

import numpy as np
import pandas as pd

from autotune import dataset
from autotune.benchmark._gains import RANDOM_PROBES
from autotune.benchmark._gains import probe_gains
from autotune.benchmark._metrics import ape
from autotune.benchmark._metrics import expected_random_regret
from autotune.benchmark._metrics import feasibility_rates
from autotune.benchmark._metrics import layout_regrets
from autotune.benchmark._metrics import pick_order
from autotune.benchmark._metrics import rank_correlations
from autotune.benchmark._metrics import regret_at_k
from autotune.benchmark._metrics import summarize
from autotune.benchmark._rankers import Ranking
from autotune.dataset import SkippedRow
from autotune.order import sort_frame
from autotune.simulators.prediction import peak_as_measured

__all__ = [
    "RANDOM",
    "BenchmarkResult",
    "ScoreSettings",
    "nothing_to_score",
    "random_probes_name",
    "score",
]

RANDOM = "random"
_KIND_ORDER = ("simulator", "peer", "baseline")  # the order of the tables
_NAN = float("nan")


@dataclass(frozen=True, slots=True)
class ScoreSettings:
    """How regret is charged and aggregated.

    ``oom_penalty_regret`` is the regret of a pick that really ran out of memory; ``top_k`` is
    the k of regret@k; the bootstrap interval of the mean uses ``bootstrap_samples`` resamples
    of the scenarios drawn with ``seed``; ``stop_gain`` is the probe loop's
    (``calibrate.stop_gain``), against which its early stops are checked.
    """

    oom_penalty_regret: float
    top_k: int
    bootstrap_samples: int
    seed: int
    stop_gain: float


@dataclass(frozen=True, slots=True)
class BenchmarkResult:
    """Per-scenario scores, per-row predictions and per-ranker summaries (with ``by_source``),
    the rows left out because their layout breaks a rule, and the probe protocol's gains over
    its baselines (:mod:`autotune.benchmark._gains`)."""

    scenarios: pd.DataFrame
    rows: pd.DataFrame
    summaries: dict[str, dict[str, Any]]
    skipped: tuple[SkippedRow, ...] = ()
    gains: pd.DataFrame = field(default_factory=pd.DataFrame)  # the probe protocol's gains
    changes: pd.DataFrame = field(default_factory=pd.DataFrame)  # what one probe changes


def score(
    table: pd.DataFrame,
    labels: Sequence[str],
    rankings: Sequence[Ranking],
    settings: ScoreSettings,
    with_random: bool,
    in_fit: Sequence[bool] | None = None,
    random_probes: Sequence[int] = (),
) -> BenchmarkResult:
    """Score ``rankings`` (and the exact ``random`` baseline) on the scenarios of ``table``.

    Args:
        table: a loaded measurement table (``dataset.load_measurements``); ``source`` filled.
        labels: a short description of each row's layout, shown as the pick.
        rankings: what each simulator, baseline or peer thinks of the rows it covers.
        settings: penalty, k and bootstrap settings.
        with_random: whether to add the ``random`` baseline.
        in_fit: per row, whether a constant of its cluster was fit on its source's rows
            (``ClusterSpec.fitted_on``); the row frame keeps it as ``in_fit``. None: no row.
        random_probes: the K of the ``random probes K=<k>`` baselines to add: the exact
            expected regret of the best of K layouts drawn at random (the probe protocol's).
    """
    fitted = np.zeros(len(table), bool) if in_fit is None else np.asarray(in_fit, bool)
    groups = table.groupby(["source", "scenario"], sort=False).indices
    columns = _Columns.of(table)
    scenario_rows: list[dict[str, Any]] = []
    row_frames: list[pd.DataFrame] = []
    drawn = {RANDOM: 1} if with_random else {}
    drawn |= {random_probes_name(k): k for k in random_probes}
    kinds = dict.fromkeys(drawn, "baseline")
    scenario_rows += _random_rows(groups, columns, settings, drawn)
    for ranking in rankings:
        kinds[ranking.name] = ranking.kind
        local = np.full(len(table), -1)
        local[ranking.rows] = np.arange(len(ranking.rows))
        for (source, scenario), positions in groups.items():
            covered = positions[(local[positions] >= 0) & columns.measured[positions]]
            if len(covered) == 0:
                continue
            record = _ranked_record(covered, local[covered], ranking, columns, labels, settings)
            if ranking.probes_used is not None:
                record["probes_used"] = float(ranking.probes_used[local[covered[0]]])
            scenario_rows.append(
                {"simulator": ranking.name, **columns.job(source, scenario, positions), **record}
            )
        row_frames.append(_row_frame(table, labels, ranking, fitted))
    scenarios = pd.DataFrame(scenario_rows).rename(
        columns={"regret_at_k": f"regret_at_{settings.top_k}"}
    )
    rows = pd.concat(row_frames, ignore_index=True) if row_frames else pd.DataFrame()
    order = sorted(kinds, key=lambda name: _KIND_ORDER.index(kinds[name]))
    summaries = {name: _summary(name, kinds[name], scenarios, rows, settings) for name in order}
    _how_they_saw(summaries, rankings, random_probes)
    gains, changes = probe_gains(
        scenarios, summaries, settings.bootstrap_samples, settings.seed, settings.stop_gain
    )
    return BenchmarkResult(
        scenarios=scenarios, rows=rows, summaries=summaries, gains=gains, changes=changes
    )


def _how_they_saw(
    summaries: dict[str, dict[str, Any]], rankings: Sequence[Ranking], random_probes: Sequence[int]
) -> None:
    """Each ranker's protocol, probes, unscored rows and time per layout, in its summary."""
    for ranking in rankings:
        summaries[ranking.name]["seconds_per_layout"] = ranking.seconds_per_layout
        summaries[ranking.name]["protocol"] = ranking.protocol
        summaries[ranking.name]["probes"] = ranking.probes
        summaries[ranking.name]["unscored"] = dict(ranking.unscored)
    for k in random_probes:
        summaries[random_probes_name(k)].update(protocol=RANDOM_PROBES, probes=k, unscored={})


def _random_rows(
    groups: dict[Any, np.ndarray],
    columns: _Columns,
    settings: ScoreSettings,
    drawn: dict[str, int],
) -> list[dict[str, Any]]:
    """The scenario records of the random baselines (name -> layouts drawn), exactly."""
    records = []
    for name, k in drawn.items():
        for (source, scenario), positions in groups.items():
            measured = positions[columns.measured[positions]]
            record = _random_record(measured, columns, settings, k, name == RANDOM)
            records.append(
                {"simulator": name, **columns.job(source, scenario, positions), **record}
            )
    return records


def random_probes_name(k: int) -> str:
    """The name of the ``random probes`` baseline of ``k`` probes."""
    return f"{RANDOM_PROBES} K={k}"


def nothing_to_score(table: pd.DataFrame, rankings: Sequence[Ranking], skipped: int) -> str:
    """Why no figure can be computed on ``table``, or "" when one can (``skipped``: the rows
    set apart before, their layout breaking a rule).

    Regret needs a scenario with at least two measured layouts, one of which ran; the errors
    need a row that ran with a time predicted by a simulator or peer.
    """
    columns = _Columns.of(table)
    groups = table.groupby(["source", "scenario"], sort=False).indices
    for positions in groups.values():
        if _eligible(int(columns.measured[positions].sum()), int(columns.ok[positions].sum())):
            return ""
    for ranking in rankings:
        if np.isfinite(ranking.predicted_s[columns.ok[ranking.rows]]).any():
            return ""
    return (
        "no scenario has two measured layouts (status ok or oom) of which one ran, and no row "
        f"that ran has a predicted step time ({len(table)} rows in {len(groups)} scenarios, "
        f"{int(columns.ok.sum())} ran; {skipped} more skipped: their layout breaks a rule)"
    )


def _eligible(n_layouts: int, n_ok: int) -> bool:
    """Whether a scenario's regret is defined: two measured layouts, one of which ran."""
    return n_layouts >= 2 and n_ok >= 1


@dataclass(frozen=True, slots=True)
class _Columns:
    """The columns that scoring reads, as arrays taken once from the table (not per scenario,
    which would make scoring quadratic in the rows)."""

    step_time_s: np.ndarray
    memory_gib: np.ndarray
    measure: np.ndarray  # what each measured peak counts, on which rank (MEMORY_READINGS)
    ok: np.ndarray  # the layout ran (status ok)
    measured: np.ndarray  # ok or oom: the layout was tried (status error is not scored)
    model: np.ndarray
    cluster: np.ndarray
    num_devices: np.ndarray

    @classmethod
    def of(cls, table: pd.DataFrame) -> _Columns:
        status = table["status"].to_numpy(dtype=str)
        return cls(
            step_time_s=table["step_time_s"].to_numpy(dtype=float, na_value=np.nan),
            memory_gib=table["peak_memory_gib"].to_numpy(dtype=float, na_value=np.nan),
            measure=dataset.peak_readings(table),
            ok=status == "ok",
            measured=np.isin(status, ("ok", "oom")),
            model=table["model"].to_numpy(dtype=object),
            cluster=table["cluster"].to_numpy(dtype=object),
            num_devices=table["num_devices"].to_numpy(dtype=int),
        )

    def job(self, source: str, scenario: str, positions: np.ndarray) -> dict[str, Any]:
        """The job of a scenario, named by its first row."""
        first = positions[0]
        return {
            "source": source,
            "scenario": scenario,
            "model": self.model[first],
            "cluster": self.cluster[first],
            "num_devices": int(self.num_devices[first]),
        }


def _random_record(
    rows: np.ndarray, columns: _Columns, settings: ScoreSettings, k: int, plain: bool
) -> dict[str, Any]:
    """The exact expectation over uniform draws of ``k`` of the measured layouts, the best
    measured of them kept (``plain``: the ``random`` baseline, one draw, with regret@k)."""
    measured, ok = columns.step_time_s[rows], columns.ok[rows]
    record = _empty_record(len(rows), int(ok.sum()))
    if record["eligible"]:
        regrets = layout_regrets(measured, ok, settings.oom_penalty_regret)
        k = min(k, len(rows))
        record.update(
            best_step_time_s=float(np.min(measured[ok])),
            pick="uniform draw" if plain else f"best of {k} drawn",
            regret_at_1=expected_random_regret(regrets, k),
            regret_at_k=expected_random_regret(regrets, settings.top_k) if plain else _NAN,
            # every draw ran out of memory
            oom_pick=comb(int((~ok).sum()), k) / comb(len(rows), k),
        )
        if not plain:
            record["probes_used"] = float(k)
    return record


def _ranked_record(
    rows: np.ndarray,
    local: np.ndarray,
    ranking: Ranking,
    columns: _Columns,
    labels: Sequence[str],
    settings: ScoreSettings,
) -> dict[str, Any]:
    measured, memory = columns.step_time_s[rows], columns.memory_gib[rows]
    ok = columns.ok[rows]
    predicted, fits = ranking.predicted_s[local], ranking.fits[local]
    record = _empty_record(len(rows), int(ok.sum()))
    if record["eligible"]:
        regrets = layout_regrets(measured, ok, settings.oom_penalty_regret)
        order = pick_order(ranking.score[local], fits, ranking.memory_gib[local])
        record.update(
            best_step_time_s=float(np.min(measured[ok])),
            pick=labels[rows[order[0]]],
            pick_step_time_s=float(measured[order[0]]),
            regret_at_1=regret_at_k(regrets, order, 1),
            regret_at_k=regret_at_k(regrets, order, settings.top_k),
            oom_pick=float(not ok[order[0]]),
        )
    tau, rho = rank_correlations(predicted[ok], measured[ok])
    errors = ape(predicted[ok], measured[ok])
    errors = errors[np.isfinite(errors)]
    peaks = ranking.peaks_gib
    as_measured = peak_as_measured(
        columns.measure[rows],
        ranking.memory_gib[local],
        None if peaks is None else {measure: gib[local] for measure, gib in peaks.items()},
    )
    memory_errors = ape(as_measured, memory)
    memory_errors = memory_errors[np.isfinite(memory_errors)]
    record.update(
        kendall_tau=tau,
        spearman_rho=rho,
        mape=float(errors.mean()) if len(errors) else _NAN,
        max_ape=float(errors.max()) if len(errors) else _NAN,
        memory_mape=float(memory_errors.mean()) if len(memory_errors) else _NAN,
    )
    return record


def _empty_record(n_layouts: int, n_ok: int) -> dict[str, Any]:
    return {
        "n_layouts": n_layouts,
        "n_ok": n_ok,
        "n_oom": n_layouts - n_ok,
        "eligible": _eligible(n_layouts, n_ok),
        "best_step_time_s": _NAN,
        "pick": "",
        "pick_step_time_s": _NAN,
        "regret_at_1": _NAN,
        "regret_at_k": _NAN,
        "oom_pick": _NAN,
        "kendall_tau": _NAN,
        "spearman_rho": _NAN,
        "mape": _NAN,
        "max_ape": _NAN,
        "memory_mape": _NAN,
    }


def _row_frame(
    table: pd.DataFrame, labels: Sequence[str], ranking: Ranking, in_fit: np.ndarray
) -> pd.DataFrame:
    """One row per layout the ranking covers, each scenario's layouts in its pick order."""
    rows = ranking.rows
    frame = pd.DataFrame(
        {
            "simulator": ranking.name,
            "source": table["source"].to_numpy()[rows],
            "scenario": table["scenario"].to_numpy()[rows],
            "model": table["model"].to_numpy()[rows],
            "cluster": table["cluster"].to_numpy()[rows],
            "layout": np.asarray(labels, dtype=object)[rows],
            "status": table["status"].to_numpy(dtype=str)[rows],
            "step_time_s": table["step_time_s"].to_numpy(dtype=float, na_value=np.nan)[rows],
            "predicted_step_time_s": ranking.predicted_s,
            "peak_memory_gib": table["peak_memory_gib"].to_numpy(dtype=float, na_value=np.nan)[
                rows
            ],
            "peak_memory_measure": table["peak_memory_measure"].to_numpy(dtype=str)[rows],
            "peak_memory_rank": table["peak_memory_rank"].to_numpy(dtype=str)[rows],
            "predicted_memory_gib": ranking.memory_gib,
            # the prediction as the measured peak counts it (MEMORY_READINGS)
            "predicted_peak_gib": ranking.peak_gib(dataset.peak_readings(table)[rows]),
            "predicted_fits": ranking.fits,
            "in_fit": in_fit[rows],
            "score": ranking.score,
        }
    )
    picked = sort_frame(
        frame, "predicted_fits", "score", "predicted_memory_gib", within=("source", "scenario")
    )
    return picked.drop(columns="score")


def _summary(
    name: str,
    kind: str,
    scenarios: pd.DataFrame,
    rows: pd.DataFrame,
    settings: ScoreSettings,
) -> dict[str, Any]:
    mine = scenarios[scenarios["simulator"] == name]
    my_rows = rows[rows["simulator"] == name] if len(rows) else rows
    summary = _figures(kind, mine, my_rows, settings)
    summary["by_source"] = {
        str(source): _figures(kind, group, _of_source(my_rows, source), settings)
        for source, group in mine.groupby("source", sort=True)
    }
    summary["source_mean"] = _source_means(summary["by_source"])
    return {"kind": kind, **summary}


def _source_means(by_source: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Figures averaged over sources, each source weighing the same however many scenarios or
    rows it has: what a change must not make worse on data it was not shaped on.

    A figure's mean is over the sources that define it: regret and OOM picks over those with
    a scenario of two layouts, the false-feasible rate over those with a row that ran out of
    memory, memory MAPE over those with a measured peak.
    """
    means: dict[str, Any] = {}
    for figure, count in (
        ("regret_at_1_mean", "n_sources_regret"),
        ("false_feasible_pick_rate", None),
        ("false_feasible_rate", "n_sources_oom"),
        ("memory_mape", "n_sources_memory"),
        ("mape", "n_sources_time"),
    ):
        values = [f[figure] for f in by_source.values() if np.isfinite(f.get(figure, _NAN))]
        means[figure] = float(np.mean(values)) if values else _NAN
        if count:
            means[count] = len(values)
    means["oom_picks"] = float(sum(f["oom_picks"] for f in by_source.values()))
    return means


def _of_source(rows: pd.DataFrame, source: str) -> pd.DataFrame:
    return rows[rows["source"] == source] if len(rows) else rows


def _figures(
    kind: str, scenarios: pd.DataFrame, rows: pd.DataFrame, settings: ScoreSettings
) -> dict[str, Any]:
    eligible = scenarios[scenarios["eligible"]]
    rng = np.random.default_rng(settings.seed)
    regret = summarize(
        eligible["regret_at_1"].to_numpy(dtype=float), rng, settings.bootstrap_samples
    )
    regret_k = summarize(
        eligible[f"regret_at_{settings.top_k}"].to_numpy(dtype=float),
        rng,
        settings.bootstrap_samples,
    )
    figures: dict[str, Any] = {
        "n_scenarios": int(len(eligible)),
        "regret_at_1_mean": regret.mean,
        "regret_at_1_median": regret.median,
        "regret_at_1_worst": regret.worst,
        "regret_at_1_ci_low": regret.ci_low,
        "regret_at_1_ci_high": regret.ci_high,
        f"regret_at_{settings.top_k}_mean": regret_k.mean,
        f"regret_at_{settings.top_k}_median": regret_k.median,
        f"regret_at_{settings.top_k}_worst": regret_k.worst,
        "false_feasible_pick_rate": _nanmean(eligible["oom_pick"]),
        # picks that ran out of memory (for the random baseline, the expected number)
        "oom_picks": float(np.nansum(eligible["oom_pick"].to_numpy(dtype=float))),
        "kendall_tau_median": _nanmedian(eligible["kendall_tau"]),
        "kendall_tau_mean": _nanmean(eligible["kendall_tau"]),
        "spearman_rho_median": _nanmedian(eligible["spearman_rho"]),
    }
    if "probes_used" in eligible:  # a probe protocol's: measured layouts per scenario
        figures["probes_used_mean"] = _nanmean(eligible["probes_used"])
    figures.update(_row_figures(kind, rows))
    return figures


def _row_figures(kind: str, rows: pd.DataFrame) -> dict[str, Any]:
    """Errors over every row with a prediction (singleton scenarios included);
    ``mape_out_of_fit`` leaves out the rows that a constant was fit on (``in_fit``)."""
    empty = {
        "n_rows": 0,
        "mape": _NAN,
        "n_rows_in_fit": 0,
        "mape_out_of_fit": _NAN,
        "max_ape": _NAN,
        "memory_mape": _NAN,
        "memory_max_ape": _NAN,
        "false_feasible_rate": _NAN,
        "false_infeasible_rate": _NAN,
    }
    if not len(rows):
        return empty
    ok = (rows["status"] == "ok").to_numpy()
    errors = ape(
        rows["predicted_step_time_s"].to_numpy(float), rows["step_time_s"].to_numpy(float)
    )
    timed = ok & np.isfinite(errors)
    time_errors = errors[timed]
    in_fit = rows["in_fit"].to_numpy(bool)[timed]
    memory_errors = ape(
        rows["predicted_peak_gib"].to_numpy(float), rows["peak_memory_gib"].to_numpy(float)
    )
    memory_errors = memory_errors[np.isfinite(memory_errors)]
    measured = np.isin(rows["status"].to_numpy(dtype=str), ("ok", "oom"))
    false_feasible, false_infeasible = (
        feasibility_rates(rows["predicted_fits"].to_numpy(bool)[measured], ok[measured])
        if kind != "peer"
        else (_NAN, _NAN)
    )
    return {
        "n_rows": int(len(time_errors)),
        "mape": float(time_errors.mean()) if len(time_errors) else _NAN,
        "n_rows_in_fit": int(in_fit.sum()),
        "mape_out_of_fit": float(time_errors[~in_fit].mean()) if (~in_fit).any() else _NAN,
        "max_ape": float(time_errors.max()) if len(time_errors) else _NAN,
        "memory_mape": float(memory_errors.mean()) if len(memory_errors) else _NAN,
        "memory_max_ape": float(memory_errors.max()) if len(memory_errors) else _NAN,
        "false_feasible_rate": false_feasible,
        "false_infeasible_rate": false_infeasible,
    }


def _nanmean(values: pd.Series) -> float:
    finite = values.to_numpy(dtype=float)
    finite = finite[np.isfinite(finite)]
    return float(finite.mean()) if len(finite) else _NAN


def _nanmedian(values: pd.Series) -> float:
    finite = values.to_numpy(dtype=float)
    finite = finite[np.isfinite(finite)]
    return float(np.median(finite)) if len(finite) else _NAN
