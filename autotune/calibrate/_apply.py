"""A calibration and a memory margin applied to a job's simulator (search, simulate)."""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd

import catalog
import dataset
from autotune.calibrate._fit import memory_margin
from catalog import Job
from simulators import Simulator
from simulators import UserError
from simulators.calibration import CalibratedSimulator
from simulators.calibration import Calibration
from simulators.calibration import calibrated

__all__ = ["Margin", "calibrated_job", "check_calibration", "shipped_margin"]

log = logging.getLogger("autotune")


@dataclass(frozen=True, slots=True)
class Margin:
    """A memory margin (a fraction of the predicted peak) and where it comes from."""

    value: float
    source: str

    def text(self) -> str:
        return f"memory margin {100 * self.value:.1f}% ({self.source})"


@functools.cache
def _memory_sources() -> tuple[str, ...]:
    """The shipped sources with a measured peak memory in some row."""
    found = []
    for name in dataset.public_sources():
        column = pd.read_csv(dataset.DATA_DIR / f"{name}.csv", usecols=lambda c: True)
        if "peak_memory_gib" in column and column["peak_memory_gib"].notna().any():
            found.append(name)
    return tuple(found)


@functools.cache
def _memory_rows() -> tuple[tuple[object, ...], np.ndarray, tuple[str, ...]]:
    sources = _memory_sources()
    if not sources:
        return (), np.array([]), ()
    table = dataset.load_public(list(sources))
    table = table[table["peak_memory_gib"].notna() & (table["status"] == "ok")]
    return (
        tuple(dataset.table_specs(table.reset_index(drop=True))),
        table["peak_memory_gib"].to_numpy(dtype=float),
        sources,
    )


def shipped_margin(simulator: Simulator) -> Margin:
    """The margin of ``simulator`` on the shipped rows with measured peak memory: the 95th
    percentile of its under-prediction (0 without such rows)."""
    specs, measured, sources = _memory_rows()
    predicted = np.array(
        [simulator.simulate(*spec).memory_gib for spec in specs]  # type: ignore[misc]
    )
    value = memory_margin(predicted, measured) if len(specs) else None
    if value is None:
        return Margin(0.0, "no shipped row has a measured peak memory")
    # The count, not the names: the line stays the same length as sources are added.
    return Margin(
        value,
        f"95th percentile of under-prediction, {len(specs)} shipped rows with peak memory "
        f"from {len(sources)} source{'s' if len(sources) > 1 else ''}",
    )


def check_calibration(
    calibration: Calibration, simulator: str, cluster: str, framework: str | None = None
) -> None:
    """Refuse a calibration of another simulator or cluster (UserError); warn of another
    framework."""
    if calibration.simulator != simulator:
        raise UserError(
            f"calibration {calibration.name!r} is for the {calibration.simulator} simulator; "
            f"this job uses {simulator} (simulator={calibration.simulator}, or calibrate "
            f"{simulator})"
        )
    if calibration.cluster is not None and calibration.cluster != cluster:
        raise UserError(
            f"calibration {calibration.name!r} is for cluster {calibration.cluster}; this job "
            f"runs on {cluster}"
        )
    if framework and calibration.framework and calibration.framework != framework:
        log.warning(
            f"warning: calibration {calibration.name!r} was fitted on {calibration.framework} "
            f"runs; this job runs {framework}"
        )


def calibrated_job(
    job: Job, calibration: str | Calibration | None, margin: float | None
) -> tuple[Job, Margin]:
    """``job`` with its simulator calibrated and a memory margin applied.

    Args:
        job: the job as composed.
        calibration: a calibration name or path (``calibration=``), one already loaded, or
            None (uncalibrated).
        margin: ``search.memory_margin``; None derives it: the calibration's own, else the
            simulator's on the shipped rows with measured peak memory.

    Raises:
        UserError: a calibration of another simulator or cluster, or a negative margin.
    """
    loaded = catalog.load_calibration(calibration) if isinstance(calibration, str) else calibration
    if loaded is not None:
        check_calibration(loaded, job.simulator.name, job.cluster.name, job.train.framework.name)
    plain = calibrated(job.simulator, loaded)
    if margin is not None:
        if not margin >= 0:
            raise UserError(f"search.memory_margin={margin} must be >= 0 (a fraction, 0.05: 5%)")
        chosen = Margin(float(margin), "search.memory_margin")
    elif loaded is not None and loaded.memory_margin is not None:
        chosen = Margin(
            loaded.memory_margin,
            f"95th percentile of under-prediction on calibration {loaded.name!r}",
        )
    else:
        chosen = shipped_margin(plain)
    simulator = CalibratedSimulator(job.simulator, plain.calibration, chosen.value)
    return dataclasses.replace(job, simulator=simulator), chosen
