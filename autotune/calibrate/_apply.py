"""A calibration and a memory margin applied to a job's simulator (search, simulate)."""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd

from autotune import catalog
from autotune import dataset
from autotune.calibrate._fit import Run
from autotune.calibrate._fit import device_share
from autotune.calibrate._margins import margin_for
from autotune.calibrate._margins import stack_margins
from autotune.calibrate._rows import row_runs
from autotune.catalog import PricedJob
from autotune.simulators import Simulator
from autotune.simulators import UserError
from autotune.simulators.calibrated import CalibratedSimulator
from autotune.simulators.calibrated import calibrated
from autotune.simulators.calibration import Calibration

__all__ = [
    "Margin",
    "calibrated_job",
    "check_calibration",
    "memory_runs",
    "shipped_margin",
    "shipped_margins",
]

log = logging.getLogger("autotune")


@dataclass(frozen=True, slots=True)
class Margin:
    """A memory margin (a fraction of the predicted peak) and where it comes from."""

    value: float
    source: str

    def text(self) -> str:
        return f"memory margin {100 * self.value:.1f}% ({self.source})"


@functools.cache
def memory_runs() -> tuple[tuple[Run, ...], tuple[str, ...]]:
    """The shipped runs that say how much memory a run takes: a measured peak, or out of
    memory; with the source of each."""
    names = []
    wanted = ("status", "peak_memory_gib")
    for name in dataset.public_sources():
        path = dataset.DATA_DIR / f"{name}.csv"
        frame = pd.read_csv(path, usecols=lambda column: column in wanted)
        peaks = "peak_memory_gib" in frame and frame["peak_memory_gib"].notna().any()
        if peaks or (frame["status"] == "oom").any():
            names.append(name)
    if not names:
        return (), ()
    table = dataset.load_public(names)
    memory = table["peak_memory_gib"].notna() | (table["status"] == "oom")
    priceable = dataset.priceable_rows(dataset.take_rows(table, np.flatnonzero(memory)))
    rows = row_runs(priceable.table, priceable.specs)
    sources = priceable.table["source"].astype(str).tolist()
    kept = [(run, source) for run, source in zip(rows, sources, strict=True) if run is not None]
    return tuple(run for run, _ in kept), tuple(source for _, source in kept)


def shipped_margins(simulator: Simulator) -> dict[str, Margin]:
    """The margin of ``simulator`` for jobs of each framework of ``conf/framework/``, from the
    shipped runs of that stack with a measured peak or an out-of-memory outcome
    (docs/calibration.md 3): from the 95th percentile of the memory it missed, or, with too
    few runs or runs of one source, every stack's runs pooled."""
    runs, sources = memory_runs()
    margins = stack_margins(simulator, runs, sources)
    chosen = {
        name: margin_for(name, margins, elsewhere=True) for name in catalog.options("framework")
    }
    return {name: Margin(m.value, m.text()) for name, m in chosen.items()}


def shipped_margin(simulator: Simulator, framework: str) -> Margin:
    """:func:`shipped_margins` of one framework."""
    return shipped_margins(simulator)[framework]


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
    priced: PricedJob, calibration: str | Calibration | None, margin: float | None
) -> tuple[PricedJob, Margin]:
    """``priced`` with its simulator calibrated and a memory margin applied.

    Args:
        priced: the job and its simulator as composed.
        calibration: a calibration name or path (``calibration=``), one already loaded, or
            None (uncalibrated).
        margin: ``search.memory_margin``; None derives it: the calibration's own, else the
            simulator's for the job's stack on the shipped runs (:func:`shipped_margin`).

    Raises:
        UserError: a calibration of another simulator or cluster, or a negative margin.
    """
    loaded = catalog.load_calibration(calibration) if isinstance(calibration, str) else calibration
    if loaded is not None:
        check_calibration(
            loaded, priced.simulator.name, priced.job.cluster.name, priced.job.train.framework.name
        )
    plain = calibrated(priced.simulator, loaded)
    if margin is not None:
        if not margin >= 0:
            raise UserError(f"search.memory_margin={margin} must be >= 0 (a fraction, 0.05: 5%)")
        chosen = Margin(float(margin), "search.memory_margin")
    elif loaded is not None and loaded.memory_margin is not None:
        free = 100 * device_share(loaded.memory_margin)
        chosen = Margin(
            loaded.memory_margin,
            f"{free:.1f}% of the device free: 95th percentile on calibration {loaded.name!r}",
        )
    else:
        chosen = shipped_margin(plain, priced.job.train.framework.name)
    simulator = CalibratedSimulator(priced.simulator, plain.calibration, chosen.value)
    return dataclasses.replace(priced, simulator=simulator), chosen
