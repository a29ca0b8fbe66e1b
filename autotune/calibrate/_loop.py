"""The probe loop of the search: what it reads and writes (the round itself:
:mod:`autotune.calibrate._round`).

``python -m autotune ... probes=K`` ends with K layouts to measure, their launch flags, and a
CSV file in the measurement schema whose ``status``, ``step_time_s`` and ``peak_memory_gib``
are left to fill. ``measured=runs.csv`` feeds them back: the rows must be of this job (the
same model, cluster, devices, sequence and batch), checked before the search
(:func:`plan_probes`); the next probes never replace a file that holds measurements
(:func:`template_path`). MLflow records each round (:func:`record_round`)."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autotune import dataset
from autotune.calibrate._fit import Run
from autotune.calibrate._fit import check_plausible
from autotune.calibrate._memory import MemoryBelief
from autotune.calibrate._probe import Pick
from autotune.calibrate._residuals import ResidualModel
from autotune.calibrate._rows import row_names
from autotune.calibrate._rows import row_runs
from autotune.calibrate._rows import skipped_notes
from autotune.calibrate._rows import span_text
from autotune.catalog import PricedJob
from autotune.config import AutotuneConfig
from autotune.dataset import MODEL_FIELDS
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import ModelSpec
from autotune.simulators import Prediction
from autotune.simulators import UserError
from autotune.simulators.files import check_output_path
from autotune.simulators.specs import RUN_SETTINGS

__all__ = [
    "ProbePlan",
    "ProbeRound",
    "plan_probes",
    "probe_frame",
    "record_round",
    "template_path",
]

log = logging.getLogger("autotune")
_FILL = ("status", "step_time_s", "peak_memory_gib")  # the columns the user fills in


@dataclass
class ProbeRound:
    """What one round found: the memory fit and the pick (with ``measured=``), the step-time
    model, the next probes or why there are none."""

    measured: list[tuple[Layout, Run]] = field(default_factory=list)
    margin: float | None = None  # the memory margin before the measured rows
    memory: MemoryBelief | None = None  # what is believed of memory after them
    model: ResidualModel | None = None
    spread: float = 1.0  # the sd of every unmeasured layout after the probes / before them
    ranked: list[tuple[Layout, Prediction]] = field(default_factory=list)  # expected times
    final: tuple[Layout, Prediction] | None = None
    final_pick: Pick | None = None
    probes: list[tuple[Layout, Prediction]] = field(default_factory=list)  # expected times
    values: list[tuple[float, float]] = field(default_factory=list)  # (fit chance, worth s)
    stop: str | None = None  # why fewer probes than asked (None: as many)
    ruled_out: int = 0  # layouts left out: as much memory as a probe that ran out of it
    csv: Path | None = None
    notes: list[str] = field(default_factory=list)
    text: str = ""
    problem: str | None = None  # why the probes' CSV was not written

    def payload(self) -> dict[str, Any]:
        """The round as JSON-ready values."""
        out: dict[str, Any] = {"notes": self.notes, "stop": self.stop}
        if self.model is not None:
            out["step_time_model"] = {
                "mean": self.model.mean,
                "level": self.model.level,
                "own": self.model.own,
                "fields": dict(self.model.widths),
                "slopes": dict(self.model.slopes),
                "given": dict(self.model.given),
                "dof": self.model.dof,
                "spread_after_probes": self.spread,
            }
        if self.measured and self.memory is not None:
            out["memory_model"] = {
                "memory_factor": self.memory.factor,
                "memory_margin": self.memory.margin,
                "memory_margin_before": self.margin,
            }
            out["measured"] = [
                {
                    "layout": lay.as_dict(),
                    "status": run.status,
                    "step_time_s": run.step_time_s if run.ran else None,
                }
                for lay, run in self.measured
            ]
        if self.final is not None and self.final_pick is not None:
            out["pick"] = {
                "layout": self.final[0].as_dict(),
                "measured": self.final_pick.measured,
                "reason": self.final_pick.reason,
                "expected_step_time_s": self.final_pick.expected_s,
            }
        if self.probes or self.stop:
            out["probes"] = [
                {
                    "layout": lay.as_dict(),
                    "expected_step_time_s": p.step_time_s,
                    "fit_chance": chance,
                    "worth_s": worth,
                }
                for (lay, p), (chance, worth) in zip(self.probes, self.values, strict=True)
            ]
            out["probes_csv"] = None if self.csv is None else str(self.csv)
        return out


@dataclass(frozen=True, slots=True)
class ProbePlan:
    """What the probe loop reads and where it writes, settled before the search."""

    measured: tuple[tuple[Layout, Run], ...]  # the rows of ``measured=`` (empty: none)
    notes: tuple[str, ...]  # rows left out of them
    csv: Path | None  # where the next probes go (None: probes=0)
    moved: str | None  # why ``csv`` is not ``probes_out`` (None: it is)


def plan_probes(config: AutotuneConfig, priced: PricedJob) -> ProbePlan | None:
    """Read ``measured=`` and choose where the next probes go, before any work (None: no
    probe loop).

    Raises:
        UserError: a measured file that does not load or holds rows of another job, or no
            path where the probes could be written.
    """
    if not (config.probes or config.measured):
        return None
    measured, notes = _measured(priced, config.measured) if config.measured else ([], [])
    csv, moved = (None, None)
    if config.probes > 0:
        csv, moved = template_path(config.probes_out, config.measured)
    return ProbePlan(tuple(measured), tuple(notes), csv, moved)


def template_path(probes_out: str, measured: str | None) -> tuple[Path, str | None]:
    """Where the next probes are written, and why that is not ``probes_out`` (None: it is).

    A template never replaces a file that holds measurements: the file ``measured=`` reads
    (``probes=3 measured=probes.csv``, the loop as the README runs it), or one whose
    ``status``, ``step_time_s`` or ``peak_memory_gib`` has a value, or any file that is not
    an unfilled template. The probes then go beside it, to the first free ``NAME-2.csv``,
    ``NAME-3.csv``, ... (one that is absent or an unfilled template). Only an unfilled
    template of an earlier round is ever replaced.
    """
    wanted = Path(probes_out)
    reason = _holds_measurements(wanted, measured)
    if reason is None:
        check_output_path("probes_out", wanted)
        return wanted, None
    for number in itertools.count(2):
        candidate = wanted.with_name(f"{wanted.stem}-{number}{wanted.suffix}")
        if _holds_measurements(candidate, measured) is None:
            check_output_path("probes_out", candidate)
            return candidate, f"{probes_out} {reason}: the next probes go to {candidate}"
    raise AssertionError("unreachable")


def _same_file(path: Path, other: str | None) -> bool:
    if other is None:
        return False
    if path.exists() and os.path.exists(other):
        return os.path.samefile(path, other)
    return os.path.realpath(path) == os.path.realpath(other)


def _holds_measurements(path: Path, measured: str | None) -> str | None:
    """Why the file at ``path`` must be kept (None: it is absent or an unfilled template)."""
    if _same_file(path, measured):
        return "is the measured file"
    if not os.path.lexists(path):
        return None
    if not path.is_file():
        return "is not a regular file"
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (ValueError, OSError, UnicodeDecodeError):  # pandas' parser errors are ValueErrors
        return "is not a probe template"
    if not set(_FILL) <= set(table.columns):
        return "is not a probe template"
    if (table[list(_FILL)] != "").to_numpy().any():
        return "holds measurements"
    return None


def _job_problems(job: Job, row: Job) -> list[str]:
    """How the job of one measured row differs from ``job`` (empty: it is the job)."""
    model, cluster, train = row.model, row.cluster, row.train
    problems = []
    differences = _model_differences(model, job.model)
    if differences and model.name == job.model.name:
        problems.append(f"model {model.name!r} has {differences}")
    elif differences:
        problems.append(f"model {model.name!r} is not {job.model.name!r}: {differences}")
    if cluster.name != job.cluster.name or cluster.num_devices != job.cluster.num_devices:
        problems.append(
            f"cluster {cluster.name} x {cluster.num_devices} is not {job.cluster.name} x "
            f"{job.cluster.num_devices}"
        )
    for key in ("seq_len", "global_batch_size"):
        if getattr(train, key) != getattr(job.train, key):
            problems.append(f"{key} {getattr(train, key)} is not {getattr(job.train, key)}")
    return problems


def _model_differences(model: ModelSpec, wanted: ModelSpec) -> str:
    """The fields the simulators price in which ``model`` differs from ``wanted`` ("": none):
    not the name, nor the model card's facts, which a measurement file does not hold (a row
    takes their defaults) and no simulator prices."""
    return ", ".join(
        f"{name} {getattr(model, name)!r} (not {getattr(wanted, name)!r})"
        for name in MODEL_FIELDS
        if getattr(model, name) != getattr(wanted, name)
    )


Measured = tuple[list[tuple[Layout, Run]], list[str]]  # (layout, run) pairs, notes


def _measured(priced: PricedJob, path: str) -> Measured:
    """The rows of ``measured=`` as (layout, run), and notes on the rows left out; checked
    before the search: rows of another job, and step times too far from the job's predictions
    to be measurements of their layouts (a time in milliseconds), are refused, naming them.

    Raises:
        UserError: naming the rows and what is wrong with them.
    """
    job = priced.job
    table = dataset.load_measurements(Path(path))
    names = row_names(table.assign(source=Path(path).stem))
    wrong: dict[str, list[str]] = {}
    for name, (row, _) in zip(names, dataset.table_specs(table), strict=True):
        for problem in _job_problems(job, row):
            wrong.setdefault(problem, []).append(name)
    if wrong:
        parts = "; ".join(f"{problem}: {span_text(rows)}" for problem, rows in wrong.items())
        raise UserError(f"{path}: rows of another job than this search's: {parts}")
    priceable = dataset.priceable_rows(table, job)
    names = row_names(priceable.table.assign(source=Path(path).stem))
    notes = skipped_notes(priceable.skipped)
    measured = []
    for name, run in zip(names, row_runs(priceable.table, priceable.specs, names), strict=True):
        if run is None:
            notes.append(f"{name} left out (status error)")
            continue
        layout = run.specs[1]
        run = dataclasses.replace(run, specs=(job, layout), group="probes")
        measured.append((layout, run))
    if not measured:
        raise UserError(
            f"{path}: no row with status ok or oom and a valid layout to calibrate on"
            + (f" ({span_text(notes, '; ')})" if notes else "")
        )
    ran = [(layout, run) for layout, run in measured if run.ran]
    predicted = [priced.simulator.simulate(*run.specs).step_time_s for _, run in ran]
    try:
        check_plausible(
            priced.simulator.name,
            [run for _, run in ran],
            np.array([run.step_time_s for _, run in ran]),
            np.array(predicted),
        )
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    return measured, notes


def probe_frame(
    priced: PricedJob, probes: Sequence[tuple[Layout, Prediction]], name: str
) -> pd.DataFrame:
    """The probes as measurement rows (schema v1) with the columns to fill left empty."""
    job = priced.job
    settings = {  # the run's own settings; empty: the framework's default
        key: "" if getattr(job.train, key) is None else getattr(job.train, key)
        for key in RUN_SETTINGS
    }
    rows = []
    for rank, (layout, prediction) in enumerate(probes, start=1):
        fields = layout.as_cells()
        rows.append(
            {
                "scenario": name,
                "model": job.model.name,
                **{key: getattr(job.model, key) for key in MODEL_FIELDS},
                "cluster": job.cluster.name,
                "devices_per_node": job.cluster.devices_per_node,
                "device_memory_gib": job.cluster.device.memory_gib,
                "num_devices": job.cluster.num_devices,
                "seq_len": job.train.seq_len,
                "global_batch_size": job.train.global_batch_size,
                **fields,
                "framework": job.train.framework.name,
                "precision": job.train.precision,
                "flash_attention": job.train.flash_attention,
                **settings,
                **dict.fromkeys(_FILL, ""),
                # what the filled-in peak counts: the figure the framework's log prints
                "peak_memory_measure": job.train.framework.logged_peak_memory,
                # whose: the largest of the ranks' figures (first: rank 0's alone, 0069)
                "peak_memory_rank": "fullest",
                "predictor": f"{priced.simulator.name} probe {rank}",
                "predicted_step_time_s": round(prediction.step_time_s, 6),
            }
        )
    return pd.DataFrame(rows)


def record_round(config: AutotuneConfig, priced: PricedJob, round_: ProbeRound) -> None:
    """One MLflow run per round: the probes, the measurements, the calibration, the pick."""
    job = priced.job
    from autotune.tracking import TrackedRun
    from autotune.tracking import record

    def fill(run: TrackedRun) -> None:
        run.params(
            {
                "model": job.model.name,
                "cluster": job.cluster.name,
                "devices": job.cluster.num_devices,
                "simulator": priced.simulator.name,
                "probes": config.probes,
                "measured": config.measured or "none",
                "calibration": config.calibration or "none",
            }
        )
        if round_.model is not None:
            model = round_.model
            parts = {"mean": model.mean, "level": model.level, "own": model.own, "dof": model.dof}
            slopes = [(f"slope.{name}", sd) for name, sd in model.slopes]
            run.metrics({f"residual.{k}": v for k, v in [*parts.items(), *model.widths, *slopes]})
        if round_.measured and round_.memory is not None:
            run.metrics({"measured_rows": len(round_.measured)})
            run.metrics({"factor.memory_factor": round_.memory.factor})
            run.metrics({"memory_margin": round_.memory.margin})
        if round_.final is not None and round_.final_pick is not None:
            run.metrics(
                {
                    "pick_expected_step_time_s": round_.final_pick.expected_s,
                    "pick_measured": float(round_.final_pick.measured),
                }
            )
            run.tags({"pick": round_.final[0].describe()})
        run.metrics({"probes_chosen": len(round_.probes)})
        if round_.stop:
            run.tags({"stop": round_.stop})
        if round_.probes:
            run.table("probes.csv", probe_frame(priced, round_.probes, "probes"))
        run.text("round.txt", round_.text)

    recorded = record(
        config.tracking,
        f"probe round: {job.model.name} on {job.cluster.num_devices} x {job.cluster.name}",
        fill,
        tags={"autotune.command": "search", "autotune.protocol": "probe_round"},
    )
    if recorded.problem:
        log.warning(f"warning: the probe round was not recorded in MLflow: {recorded.problem}")
