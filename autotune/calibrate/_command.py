"""``python -m autotune.calibrate``: load the rows, check them, fit, report, write the file."""

from __future__ import annotations

import logging
import math
import shlex
import sys
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import ListConfig

from autotune import catalog
from autotune import dataset
from autotune.calibrate._file import calibration_record
from autotune.calibrate._file import write_calibration
from autotune.calibrate._fit import FitResult
from autotune.calibrate._fit import FitSettings
from autotune.calibrate._fit import device_share
from autotune.calibrate._fit import fit
from autotune.calibrate._rows import row_names
from autotune.calibrate._rows import runs_of
from autotune.calibrate._rows import single_value
from autotune.calibrate._rows import span_text
from autotune.cli import emit_json
from autotune.config import CalibrateConfig
from autotune.config import CalibrateSettings
from autotune.simulators import UserError
from autotune.simulators.calibration import FACTORS
from autotune.simulators.calibration import SCALE_FACTORS
from autotune.simulators.calibration import Calibration
from autotune.simulators.files import write_failure

__all__ = ["fit_settings", "run_calibrate"]

log = logging.getLogger("autotune.calibrate")


def fit_settings(settings: CalibrateSettings, bootstrap: bool = True) -> FitSettings:
    """The fit's settings from the ``calibrate`` config group."""
    prior = {name: float(getattr(settings.prior, name)) for name in FACTORS}
    return FitSettings(
        prior=prior,
        time_noise=settings.time_noise,
        memory_noise=settings.memory_noise,
        max_rows=settings.max_rows,
        max_evaluations=settings.max_evaluations,
        bootstrap_samples=settings.bootstrap_samples if bootstrap else 0,
        relinearize=settings.relinearize,
        interval=settings.interval,
        seed=settings.seed,
    )


def _names(value: Any) -> list[str] | None:
    """A name or list of names from the command line (``x``, ``[x,y]``); None for no filter."""
    if value is None:
        return None
    if isinstance(value, ListConfig | list | tuple):
        return [str(v) for v in value]
    return [str(value)]


def _model_names(model: str) -> set[str]:
    """How rows may name ``model`` (a display name or a catalog name), in lower case."""
    wanted = {model.lower()}
    if model in catalog.options("model"):
        wanted.add(catalog.load_model(model).name.lower())
    return wanted


def _keep(
    table: pd.DataFrame, column: str, wanted: list[str] | None, what: str, data: str
) -> pd.DataFrame:
    """The rows whose ``column`` is one of ``wanted`` (all when None).

    Raises:
        UserError: a value of ``wanted`` that no row has (naming those there are).
    """
    if wanted is None:
        return table
    present = set(table[column].dropna().astype(str))
    unknown = sorted(set(wanted) - present)
    if unknown:
        raise UserError(
            f"{what} {', '.join(unknown)} not in {data}; there: {', '.join(sorted(present))}"
        )
    return dataset.take_rows(table, np.flatnonzero(table[column].isin(wanted)))


def _leave_out_models(table: pd.DataFrame, models: list[str] | None, data: str) -> pd.DataFrame:
    """The rows of any other model than ``models`` (display or catalog names).

    Raises:
        UserError: a model no row is of, or no row left (naming the models there are).
    """
    if models is None:
        return table
    names = table["model"].astype(str).str.lower()
    there = ", ".join(sorted(set(table["model"].astype(str))))
    left_out = np.zeros(len(table), dtype=bool)
    for model in models:
        mine = names.isin(_model_names(model)).to_numpy()
        if not mine.any():
            raise UserError(f"rows.exclude_model: no row of {data} is of {model}; there: {there}")
        left_out |= mine
    if left_out.all():
        raise UserError(
            f"rows.exclude_model: {data} has no row of another model ({there}): nothing to fit on"
        )
    return dataset.take_rows(table, np.flatnonzero(~left_out))


def _selected_rows(config: CalibrateConfig, table: pd.DataFrame) -> pd.DataFrame:
    """The rows ``rows.source``, ``rows.hardware`` and ``rows.exclude_model`` keep, in turn."""
    table = _keep(table, "source", _names(config.rows.source), "source", config.data)
    table = _keep(
        table, "cluster", _names(config.rows.hardware), "rows.hardware: cluster", config.data
    )
    return _leave_out_models(table, _names(config.rows.exclude_model), config.data)


def _select_model(table: pd.DataFrame, model: str | None, data: str) -> None:
    """Refuse rows of another model than ``model`` (a display name or a catalog name)."""
    if model is None:
        return
    wanted = _model_names(model)
    names = row_names(table)
    other = [
        n
        for n, m in zip(names, table["model"].astype(str), strict=True)
        if m.lower() not in wanted
    ]
    if other:
        found = sorted(
            set(table["model"].astype(str)) - {m for m in table["model"] if m.lower() in wanted}
        )
        raise UserError(
            f"{data}: {len(other)} row(s) of another model than {model} "
            f"({', '.join(found)}): {span_text(other)}"
        )


def _center(config: CalibrateConfig, simulator_name: str) -> Calibration | None:
    if config.calibration is None:
        return None
    start = catalog.load_calibration(config.calibration)
    if start.simulator != simulator_name:
        raise UserError(
            f"calibration {start.name!r} is for the {start.simulator} simulator, not "
            f"{simulator_name} (simulator={start.simulator})"
        )
    return start


def run_calibrate(config: CalibrateConfig) -> None:
    """Fit, print the factors (or the JSON object) and write the calibration file."""
    simulator = catalog.simulator_from_config(config.simulator)
    table = _selected_rows(config, dataset.load_data(config.data))
    priceable = dataset.priceable_rows(table)  # the rows' job and stack: those it is fit on
    table = priceable.table
    cluster = single_value(table, "cluster", config.rows.cluster, "cluster", config.data)
    framework = single_value(table, "framework", config.rows.framework, "framework", config.data)
    _select_model(table, config.rows.model, config.data)
    center = _center(config, simulator.name)
    if center is not None and center.cluster not in (None, cluster):
        raise UserError(
            f"calibration {center.name!r} is for cluster {center.cluster}, these rows are on "
            f"{cluster}"
        )
    runs, notes = runs_of(priceable, config.data)
    start = Calibration(
        simulator=simulator.name,
        factors=dict(center.factors) if center else {},
        cluster=cluster,
        framework=framework,
        name=config.name,
    )
    log.info(f"fitting the {simulator.name} simulator to {len(runs)} row(s) of {config.data}")
    result = fit(
        simulator, runs, fit_settings(config.calibrate), start, plausible=True, layouts=True
    )
    result.notes[:0] = notes
    cluster_spec = catalog.load_cluster(cluster) if cluster else None
    command = "python -m autotune.calibrate " + " ".join(map(shlex.quote, sys.argv[1:]))
    record = calibration_record(result, simulator, cluster_spec, runs, config.data, command)
    interval = config.calibrate.interval if config.calibrate.bootstrap_samples else None
    if interval is None:  # nothing resampled: no interval to tell
        record["intervals"] = {}
    path = config.output_path()
    for note in result.notes:
        log.info(f"note: {note}")
    problem = None
    try:
        write_calibration(record, path, config.calibrate.interval)
    except (OSError, UserError) as exc:  # the fit is printed all the same, then the failure
        problem = write_failure(path, exc)
    if config.output == "json":
        emit_json({**record, "path": None if problem else str(path)})
    else:
        print(_table(result, simulator.name, cluster, framework, interval))
        if problem is None:
            use = config.name if config.out is None else path
            print(f"\nwritten: {path} (use it with calibration={use})")
    if problem is not None:
        raise UserError(problem)


def _table(
    result: FitResult,
    simulator: str,
    cluster: str | None,
    framework: str | None,
    interval: float | None,
) -> str:
    """The fit as a table; ``interval``: the probability of the bootstrap intervals (None:
    none was resampled, ``calibrate.bootstrap_samples=0``)."""
    c = result.calibration
    head = (
        f"Calibration of the {simulator} simulator on {cluster or 'several clusters'} "
        f"({framework or 'several frameworks'}): {result.n_ran} row(s) ran "
        f"({len(result.used)} fitted), {result.n_oom} ran out of memory, "
        f"{result.memory_rows} with measured peak memory; {result.seconds:.1f} s"
    )
    told = "no interval (bootstrap_samples=0)" if interval is None else f"{interval:.0%} interval"
    rows = [f"  {'factor':<24}{'value':>8}   {told}"]
    for name in FACTORS:
        if name not in c.factors:  # the reserved memory left derived per layout
            rows.append(f"  {name:<24}{'derived per layout':>27}")
            continue
        low, high = result.intervals[name]
        unit = "x" if name in SCALE_FACTORS else ("GiB" if name.endswith("_gib") else "")
        bounds = "" if interval is None else f"[{low:.3f}, {high:.3f}]"
        rows.append(f"  {name:<24}{c.factors[name]:>8.3f}{unit:<3}{bounds}")
    fit_line = (
        f"log step-time error (RMS) on the fitted rows: {result.rms_before:.3f} -> "
        f"{result.rms_after:.3f}"
        if math.isfinite(result.rms_before)
        else "no step time fitted"
    )
    margin = (
        f"memory margin: {100 * c.memory_margin:.1f}% (95th percentile of the memory missed: "
        f"{100 * device_share(c.memory_margin):.1f}% of the device)"
        if c.memory_margin is not None
        else "memory margin: none of its own (the search applies its stack's shipped one)"
    )
    return "\n".join([head, *rows, fit_line, margin])
