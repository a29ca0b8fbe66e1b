"""The regret benchmark: which simulator picks layouts that are really fast?

Every chosen simulator predicts every measured layout; per scenario (the rows with the same
``scenario``: alternatives for one job) the layouts are ranked by predicted time, those
predicted not to fit last, and the pick is scored by its regret against the best measured
layout. Baselines (``random``, ``heuristic``) and any peer predictions in the data
(``predictor``) are scored the same way. Settings: ``conf/benchmark.yaml``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import ListConfig

from autotune import calibrate
from autotune import dataset
from autotune.benchmark._gains import ALL
from autotune.benchmark._protocol_tables import curve_label
from autotune.benchmark._protocol_tables import regret_curve
from autotune.benchmark._rankers import HeuristicRule
from autotune.benchmark._rankers import Ranking
from autotune.benchmark._rankers import heuristic_ranking
from autotune.benchmark._rankers import peer_rankings
from autotune.benchmark._rankers import simulate
from autotune.benchmark._report import console_tables
from autotune.benchmark._report import json_payload
from autotune.benchmark._report_files import check_report_files
from autotune.benchmark._report_files import write_report
from autotune.benchmark._score import RANDOM
from autotune.benchmark._score import BenchmarkResult
from autotune.benchmark._score import ScoreSettings
from autotune.benchmark._score import nothing_to_score
from autotune.benchmark._score import score
from autotune.catalog import load_calibration
from autotune.catalog import simulator_from_config
from autotune.config import BenchmarkConfig
from autotune.config import config_yaml
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import Simulator
from autotune.simulators import UserError
from autotune.simulators.calibrated import CalibratedSimulator
from autotune.simulators.calibrated import calibrated
from autotune.simulators.files import write_failure
from autotune.simulators.registry import SIMULATOR_NAMES
from autotune.tracking import check_tracking

__all__ = ["run", "run_benchmark", "simulators_of"]

log = logging.getLogger("autotune.benchmark")
BASELINES = (RANDOM, "heuristic")
_SHOWN = 3  # rows named in the error when every row breaks a rule


def _names(value: Any) -> list[str] | None:
    """A name or list of names from the command line (``x``, ``[x,y]``); None for no filter."""
    if value is None:
        return None
    if isinstance(value, ListConfig | list | tuple):
        return [str(v) for v in value]
    return [str(value)]


def _filter(table: pd.DataFrame, column: str, wanted: list[str] | None, what: str) -> pd.DataFrame:
    if wanted is None:
        return table
    available = sorted(table[column].dropna().unique())
    unknown = [w for w in wanted if w not in available]
    if unknown:
        raise UserError(
            f"{what} {', '.join(map(repr, unknown))} not in the data; available: "
            f"{', '.join(available)}"
        )
    return dataset.take_rows(table, np.flatnonzero(table[column].isin(wanted).to_numpy()))


def _priceable(table: pd.DataFrame, data: str) -> dataset.PriceableRows:
    """The rows to score, and those set apart because their layout breaks a rule.

    Raises:
        UserError: every row breaks a rule (naming the first few and their rules).
    """
    rows = dataset.priceable_rows(table)
    if rows.table.empty:
        shown = "; ".join(row.describe() for row in rows.skipped[:_SHOWN])
        more = len(rows.skipped) - _SHOWN
        raise UserError(
            f"{data}: nothing to score: every row's layout breaks a rule: {shown}"
            + (f"; and {more} more" if more > 0 else "")
        )
    if rows.skipped:
        log.warning(
            "warning: %d of %d rows break a layout rule and are not scored (the report lists "
            "them)",
            len(rows.skipped),
            len(table),
        )
    return rows


def simulators_of(config: BenchmarkConfig) -> list[Simulator]:
    """The simulators named by ``config.simulators``, with their (overridable) constants."""
    names = _names(config.simulators) or []
    for name in names:
        if name not in SIMULATOR_NAMES:
            raise UserError(f"unknown simulator {name!r}; available: {', '.join(SIMULATOR_NAMES)}")
    return [simulator_from_config(config.simulator[name]) for name in names]


def _protocols(config: BenchmarkConfig) -> list[str]:
    chosen = _names(config.protocols) or []
    unknown = [p for p in chosen if p not in calibrate.PROTOCOLS]
    if unknown or not chosen:
        raise UserError(
            f"unknown protocol(s) {', '.join(unknown) or '(none given)'}; allowed: "
            f"{', '.join(calibrate.PROTOCOLS)}"
        )
    return chosen


def _calibrated_rankings(
    config: BenchmarkConfig,
    protocols: Sequence[str],
    simulator: Simulator,
    table: pd.DataFrame,
    specs: Sequence[tuple[Job, Layout]],
    zero: Ranking,
) -> list[Ranking]:
    """The rankings of ``calibration=`` and of the protocols beyond zero-shot."""
    rankings: list[Ranking] = []
    if config.calibration is not None:
        rankings.extend(_given_calibration(config.calibration, simulator, table, specs))
    if not {"leave_one_source_out", "leave_one_model_out", "probe"} & set(protocols):
        return rankings
    settings = calibrate.ProtocolSettings(
        fit=calibrate.fit_settings(config.calibrate),
        probe=calibrate.ProbeSettings(
            stop_gain=config.calibrate.stop_gain,
            stop_probability=config.calibrate.stop_probability,
        ),
        probes=tuple(config.probes),
        workers=config.workers,
    )
    runs = calibrate.row_runs(table, specs)
    zero_shot = calibrate.ZeroShot(zero.predicted_s, zero.memory_gib, zero.peaks_gib)
    if "leave_one_source_out" in protocols:
        start = time.perf_counter()
        scores, _ = calibrate.leave_one_source_out(simulator, table, runs, zero_shot, settings)
        rankings.append(_ranking(scores))
        log.info("%s, leave one source out: %.1f s", simulator.name, time.perf_counter() - start)
    if "leave_one_model_out" in protocols:
        start = time.perf_counter()
        scores = calibrate.leave_one_model_out(simulator, table, runs, zero_shot, settings)
        rankings.append(_ranking(scores))
        log.info("%s, leave one model out: %.1f s", simulator.name, time.perf_counter() - start)
    if "probe" in protocols:
        start = time.perf_counter()
        probes = calibrate.probe_scores(simulator, table, runs, zero_shot, settings)
        rankings.extend(_ranking(scores) for scores in probes)
        log.info(
            "%s, probes K=%s: %.1f s",
            simulator.name,
            ",".join(map(str, settings.probes)),
            time.perf_counter() - start,
        )
    return rankings


def _ranking(scores: calibrate.ProtocolScores) -> Ranking:
    """A protocol's scores as a ranking (no time per layout: a fit is part of each)."""
    return Ranking(
        name=scores.name,
        kind=scores.kind,
        rows=scores.rows,
        score=scores.score,
        predicted_s=scores.predicted_s,
        memory_gib=scores.memory_gib,
        peaks_gib=scores.peaks_gib,
        fits=scores.fits,
        seconds_per_layout=math.nan,
        protocol=scores.protocol,
        probes=scores.probes,
        unscored=scores.unscored,
        probes_used=scores.probes_used,
    )


def _given_calibration(
    name: str, simulator: Simulator, table: pd.DataFrame, specs: Sequence[tuple[Job, Layout]]
) -> list[Ranking]:
    """``calibration=NAME``: the simulator it is for, calibrated, as one more ranker."""
    calibration = load_calibration(name)
    if calibration.simulator != simulator.name:
        return []
    clusters = sorted(set(table["cluster"].astype(str)))
    if calibration.cluster is not None and clusters != [calibration.cluster]:
        raise UserError(
            f"calibration {calibration.name!r} is for cluster {calibration.cluster}; the data "
            f"has rows on {', '.join(clusters)} (keep its rows: hardware={calibration.cluster})"
        )
    margins: float | dict[str, float] = calibration.memory_margin or 0.0
    if calibration.memory_margin is None:
        shipped = calibrate.shipped_margins(calibrated(simulator, calibration))
        margins = {name: m.value for name, m in shipped.items()}
    ranking = simulate(CalibratedSimulator(simulator, calibration, 0.0), specs, margins)
    return [
        dataclasses.replace(
            ranking,
            name=f"{simulator.name}, calibration {calibration.name}",
            protocol="calibrated",
        )
    ]


# size: the benchmark's stages in order (load, filter, rank, calibrate, score), each one call
def run_benchmark(
    config: BenchmarkConfig, simulators: Sequence[Simulator] | None = None
) -> BenchmarkResult:
    """Load the data, rank it with every simulator, baseline and peer, and score the rankings.

    Rows whose layout breaks a rule are set apart first (``BenchmarkResult.skipped``): no
    ranker sees them, and each scenario is scored on its other rows.

    Args:
        config: the typed ``conf/benchmark.yaml``.
        simulators: simulator objects to use instead of building ``config.simulators`` by name
            (a notebook or a test passes its own).
    """
    protocols = _protocols(config)
    baselines = _names(config.baselines) or []
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise UserError(
            f"unknown baseline(s) {', '.join(unknown)}; allowed: {', '.join(BASELINES)}"
        )
    if simulators is None:
        simulators = simulators_of(config)
    if config.calibration is not None:
        wanted = load_calibration(config.calibration).simulator
        if wanted not in [s.name for s in simulators]:
            raise UserError(
                f"calibration {config.calibration!r} is for the {wanted} simulator, which is not "
                f"among simulators={[s.name for s in simulators]} (simulators=[{wanted}])"
            )
    table = dataset.load_data(config.data)
    table = _filter(table, "cluster", _names(config.hardware), "hardware")
    table = _filter(table, "source", _names(config.source), "source")
    priceable = _priceable(table, config.data)
    table, specs = priceable.table, priceable.specs
    labels = [layout.describe() for _, layout in specs]
    log.info(
        "%d measured rows, %d scenarios", len(table), table.groupby(["source", "scenario"]).ngroups
    )
    rankings: list[Ranking] = []

    for simulator in simulators:
        start = time.perf_counter()
        # Zero-shot picks as the search picks: with the memory margin it derives for the
        # simulator and each row's stack from the shipped runs, unless one is given.
        margins: float | dict[str, float] = (
            {name: m.value for name, m in calibrate.shipped_margins(simulator).items()}
            if config.memory_margin is None
            else config.memory_margin
        )
        zero = simulate(simulator, specs, margins)
        if "zero_shot" in protocols:
            rankings.append(zero)
        log.info(
            "%s: %d layouts in %.2f s", simulator.name, len(specs), time.perf_counter() - start
        )
        rankings.extend(_calibrated_rankings(config, protocols, simulator, table, specs, zero))
    if "heuristic" in baselines:
        rule = HeuristicRule(state_memory_fraction=config.heuristic.state_memory_fraction)
        rankings.append(heuristic_ranking(rule, specs))
    if config.peers:
        rankings.extend(peer_rankings(table))
    reason = nothing_to_score(table, rankings, len(priceable.skipped))
    if reason:
        raise UserError(f"{config.data}: nothing to score: {reason}")
    settings = ScoreSettings(
        oom_penalty_regret=config.oom_penalty_regret,
        top_k=config.top_k,
        bootstrap_samples=config.bootstrap_samples,
        seed=config.seed,
        stop_gain=config.calibrate.stop_gain,
    )
    in_fit = [
        source in job.cluster.fitted_on
        for source, (job, _) in zip(table["source"], specs, strict=True)
    ]
    random_probes = sorted(set(config.probes)) if "probe" in protocols else []
    result = score(table, labels, rankings, settings, RANDOM in baselines, in_fit, random_probes)
    return dataclasses.replace(result, skipped=priceable.skipped)


def _settings(cfg: BenchmarkConfig) -> dict[str, Any]:
    return {
        "simulators": ",".join(_names(cfg.simulators) or []),
        "baselines": ",".join(_names(cfg.baselines) or []),
        "data": cfg.data,
        "hardware": ",".join(_names(cfg.hardware) or ["all"]),
        "source": ",".join(_names(cfg.source) or ["all"]),
        "top_k": cfg.top_k,
        "oom_penalty_regret": cfg.oom_penalty_regret,
        "bootstrap_samples": cfg.bootstrap_samples,
        "seed": cfg.seed,
        "protocols": ",".join(_names(cfg.protocols) or []),
        "probes": ",".join(map(str, cfg.probes)),
        "calibration": cfg.calibration or "none",
        "memory_margin": "shipped" if cfg.memory_margin is None else cfg.memory_margin,
    }


def _notes(cfg: BenchmarkConfig) -> dict[str, str]:
    h = cfg.heuristic
    return {
        "scenario": "rows with the same `scenario` (and source) are alternatives for one job; "
        "regret needs at least two measured layouts, at least one of which ran",
        "regret@1": "measured time of the pick / best measured time - 1; layouts predicted "
        "not to fit rank last; a pick that really ran out of memory (status oom) is a "
        f"false-feasible pick, charged a regret of {cfg.oom_penalty_regret} "
        "(as costly as running the best layout once more)",
        f"regret@{cfg.top_k}": f"the best (lowest-regret) of the first {cfg.top_k} picks",
        "95% CI": f"bootstrap over scenarios ({cfg.bootstrap_samples} resamples, seed {cfg.seed})",
        "tau, rho": "Kendall tau-b and Spearman rho between predicted and measured times of the "
        "layouts that ran, per scenario; the table shows the median over scenarios",
        "MAPE": "mean |predicted - measured| / measured step time over every row that ran "
        "(single-layout scenarios included); mem MAPE likewise for measured peak memory",
        "false feasible / infeasible": "share of oom layouts predicted to fit / of layouts "
        "that ran predicted not to fit; a layout fits, as the search decides it, when its "
        "predicted peak memory times 1 + the memory margin (the simulator's on the shipped "
        "rows with a measured peak, docs/calibration.md 3) is within device memory",
        "random": "the exact expected regret of a uniform draw among the measured layouts",
        "heuristic": "rule of thumb, no simulator: layouts whose weights, gradients and "
        "optimizer states (as the row's framework keeps them, docs/reference.md 7.2) exceed "
        f"{h.state_memory_fraction:.0%} of device memory rank last; then TP inside a node, the "
        "least model parallelism tp*pp*cp, TP before PP before CP, the most EP, the smallest "
        "micro-batch, selective before no before full recompute",
        "peers": "another simulator's predictions carried in the data (`predictor`), scored "
        "on exactly its rows; a peer predicts no memory, so its feasibility is not scored",
    }


def _report(cfg: BenchmarkConfig, result: BenchmarkResult) -> None:
    settings = _settings(cfg)
    report_dir = Path(cfg.report_dir)
    if cfg.output == "json":
        print(json.dumps(json_payload(result, settings), allow_nan=False), flush=True)
    else:
        print(console_tables(result, int(cfg.top_k)), flush=True)
    problem, written = None, []
    try:  # the result is printed first: a report that cannot be written does not lose it
        written = write_report(result, report_dir, settings, _notes(cfg))
    except (OSError, UserError) as exc:
        problem = write_failure(report_dir, exc)
    if cfg.output != "json" and problem is None:
        print(f"report: {report_dir}/benchmark.md")
    if cfg.tracking.enabled:
        from autotune.benchmark._tracking import log_benchmark_run

        curve = regret_curve(result)
        curves = {
            f"{curve_label(simulator, protocol)}.regret_at_1_mean": [
                (int(k), float(v))
                for k, v in zip(group["K"], group["regret_at_1_mean"], strict=True)
            ]
            for (simulator, protocol), group in curve.groupby(["simulator", "protocol"])
        }
        recorded = log_benchmark_run(
            cfg.tracking,
            {**settings, "rows_skipped": len(result.skipped)},
            result.summaries,
            config_yaml(cfg),
            written,
            curves={**curves, **_gain_curves(result)},
            metrics=_change_metrics(result),
        )
        if recorded.problem:
            log.warning("warning: the benchmark was not recorded in MLflow: %s", recorded.problem)
        else:
            log.info(
                "MLflow run %s (%s, experiment %s)",
                recorded.run_id,
                cfg.tracking.uri,
                cfg.tracking.experiment,
            )
    if problem is not None:
        raise UserError(problem)


_GAIN_FIGURES = tuple(
    f"gain_over_{base}{end}" for base in ("top_k", "random") for end in ("", "_ci_low", "_ci_high")
)


def _gain_curves(result: BenchmarkResult) -> dict[str, list[tuple[int, float]]]:
    """The probe protocol's gains as MLflow metric histories over K:
    ``<simulator>.probe[.<source>].gain_over_top_k`` (and its interval, and over random), the
    probes used, the early stops and the stopped scenarios whose pick is beaten."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for (simulator, source), group in result.gains.groupby(["simulator", "source"]):
        prefix = f"{simulator}.probe" + ("" if source == ALL else f".{source}")
        for figure in (*_GAIN_FIGURES, "probes_used", "stopped", "beaten_after_stop"):
            values = [
                (int(k), float(v))
                for k, v in zip(group["K"], group[figure], strict=True)
                if math.isfinite(v)
            ]
            if values:
                curves[f"{prefix}.{figure}"] = values
    return curves


def _change_metrics(result: BenchmarkResult) -> dict[str, float]:
    """What one probe changes, as MLflow metrics: ``<simulator>.probe[.<source>].k1_<figure>``."""
    metrics = {}
    for row in result.changes.to_dict(orient="records"):
        prefix = f"{row['simulator']}.probe" + (
            "" if row["source"] == ALL else f".{row['source']}"
        )
        for figure in ("changed", "better", "worse", "same_regret", "regret_change_mean"):
            if math.isfinite(row[figure]):
                metrics[f"{prefix}.k1_{figure}"] = float(row[figure])
    return metrics


def run(config: BenchmarkConfig) -> None:
    """Run the benchmark of ``config`` and report it (console or JSON, files, MLflow)."""
    start = time.perf_counter()
    check_tracking(config.tracking)  # before any work: an unusable store fails now
    check_report_files(config.report_dir)
    result = run_benchmark(config)
    _report(config, result)
    log.info("benchmark took %.1f s", time.perf_counter() - start)
