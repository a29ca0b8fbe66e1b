"""The probe loop of the search: K layouts to measure, then their measurements fed back.

``python -m autotune ... probes=K`` ends with K layouts to measure (chosen by
:func:`choose_probes`: likely good, spread over where their predicted breakdowns differ), their
launch flags, and a CSV file in the measurement schema whose ``status``, ``step_time_s`` and
``peak_memory_gib`` are left to fill. ``measured=runs.csv`` feeds them back: the rows must be
of this job (the same model, cluster, devices, sequence and batch); the simulator is calibrated
on them (from the calibration in use), every layout the search priced is re-predicted, and
the pick is made with :func:`pick` (never a layout known to be worse than the best measured
probe). With both, the next K probes come from the calibrated predictions; MLflow records it.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import os
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autotune import dataset
from autotune.calibrate._command import fit_settings
from autotune.calibrate._fit import FitResult
from autotune.calibrate._fit import Run
from autotune.calibrate._fit import check_plausible
from autotune.calibrate._fit import fit
from autotune.calibrate._probe import Pick
from autotune.calibrate._probe import choose_probes
from autotune.calibrate._probe import pick
from autotune.calibrate._rows import row_names
from autotune.calibrate._rows import row_runs
from autotune.calibrate._rows import skipped_notes
from autotune.calibrate._rows import span_text
from autotune.catalog import PricedJob
from autotune.config import AutotuneConfig
from autotune.csv_files import write_csv
from autotune.dataset import MODEL_FIELDS
from autotune.report import launch_text
from autotune.report import layout_table
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import Prediction
from autotune.simulators import UserError
from autotune.simulators.calibrated import CalibratedSimulator
from autotune.simulators.calibration import FACTORS
from autotune.simulators.files import check_output_path
from autotune.simulators.files import write_failure
from autotune.simulators.specs import RUN_SETTINGS

__all__ = ["ProbePlan", "ProbeRound", "plan_probes", "probe_round", "template_path"]

log = logging.getLogger("autotune")
_FILL = ("status", "step_time_s", "peak_memory_gib")  # the columns the user fills in
_WIDTH = 119  # the terminal output keeps within 120 columns


@dataclass
class ProbeRound:
    """What one round found: the fit and the pick (with ``measured=``), the next probes."""

    measured: list[tuple[Layout, Run]] = field(default_factory=list)
    result: FitResult | None = None
    ranked: list[tuple[Layout, Prediction]] = field(default_factory=list)
    final: tuple[Layout, Prediction] | None = None
    final_pick: Pick | None = None
    probes: list[tuple[Layout, Prediction]] = field(default_factory=list)
    csv: Path | None = None
    notes: list[str] = field(default_factory=list)
    text: str = ""
    problem: str | None = None  # why the probes' CSV was not written

    def payload(self) -> dict[str, Any]:
        """The round as JSON-ready values."""
        out: dict[str, Any] = {"notes": self.notes}
        if self.result is not None:
            out["calibration"] = dict(self.result.calibration.factors)
            out["measured"] = [
                {"layout": lay.as_dict(), "status": run.status, "step_time_s": run.step_time_s}
                for lay, run in self.measured
            ]
        if self.final is not None and self.final_pick is not None:
            out["pick"] = {
                "layout": self.final[0].as_dict(),
                "measured": self.final_pick.measured,
                "reason": self.final_pick.reason,
                "predicted_step_time_s": self.final[1].step_time_s * self.final_pick.level,
            }
        if self.probes:
            out["probes"] = [
                {"layout": lay.as_dict(), "predicted_step_time_s": p.step_time_s}
                for lay, p in self.probes
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
    same_model = dataclasses.replace(model, name=job.model.name) == job.model
    if not same_model:
        problems.append(f"model {model.name!r} is not {job.model.name!r}")
    if cluster.name != job.cluster.name or cluster.num_devices != job.cluster.num_devices:
        problems.append(
            f"cluster {cluster.name} x {cluster.num_devices} is not {job.cluster.name} x "
            f"{job.cluster.num_devices}"
        )
    for key in ("seq_len", "global_batch_size"):
        if getattr(train, key) != getattr(job.train, key):
            problems.append(f"{key} {getattr(train, key)} is not {getattr(job.train, key)}")
    return problems


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
    priceable = dataset.priceable_rows(table)
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


def _probe_frame(
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
                # what the filled-in peak counts: Megatron's "max allocated" unless changed
                "peak_memory_measure": "allocated",
                "predictor": f"{priced.simulator.name} probe {rank}",
                "predicted_step_time_s": round(prediction.step_time_s, 6),
            }
        )
    return pd.DataFrame(rows)


# size: one round in the order the user sees it: read, calibrate, re-rank, pick, choose, write
def probe_round(
    config: AutotuneConfig,
    priced: PricedJob,
    ranked: Sequence[tuple[Layout, Prediction]],
    plan: ProbePlan,
) -> ProbeRound:
    """Feed ``measured=`` back (calibrate, re-rank, pick) and choose ``probes=`` K layouts.

    A CSV of the probes that cannot be written (a full disk) costs only the file: the round
    says why in ``problem``, and the command reports it after the result.

    Args:
        config: the search's config (``probes``, ``measured``, ``calibrate``).
        priced: the job, its simulator a :class:`CalibratedSimulator` (calibration and margin).
        ranked: every layout the search priced, best first, with its prediction.
        plan: the measured rows and where the probes go (:func:`plan_probes`).
    """
    job = priced.job
    assert isinstance(priced.simulator, CalibratedSimulator)
    settings = fit_settings(config.calibrate, bootstrap=False)
    simulator: CalibratedSimulator = priced.simulator
    round_ = ProbeRound()
    candidates = [lay for lay, _ in ranked]
    predictions = [pred for _, pred in ranked]
    lines: list[str] = []
    if config.measured:
        round_.measured, round_.notes = list(plan.measured), list(plan.notes)
        result = fit(
            simulator.base, [run for _, run in round_.measured], settings, simulator.calibration
        )
        round_.result = result
        round_.notes += result.notes
        margin = result.calibration.memory_margin
        simulator = CalibratedSimulator(
            simulator.base,
            result.calibration,
            simulator.memory_margin if margin is None else margin,
        )
        known = {lay: i for i, lay in enumerate(candidates)}
        for lay, _ in round_.measured:
            if lay not in known:
                known[lay] = len(candidates)
                candidates.append(lay)
        predictions = [simulator.simulate(job, lay) for lay in candidates]
        probes = [known[lay] for lay, _ in round_.measured]
        measured_s = [run.step_time_s if run.ran else math.nan for _, run in round_.measured]
        chosen = pick(
            [p.step_time_s for p in predictions],
            [p.fits for p in predictions],
            probes,
            measured_s,
            settings.time_noise,
        )
        round_.final_pick = chosen
        round_.final = (candidates[chosen.index], predictions[chosen.index])
        round_.ranked = sorted(
            zip(candidates, predictions, strict=True),
            key=lambda item: (not item[1].fits, item[1].step_time_s),
        )
        lines += _fed_back_text(config, job, round_, chosen)
    if config.probes > 0:
        done = {lay for lay, _ in round_.measured}
        open_ = [i for i, lay in enumerate(candidates) if lay not in done]
        center = simulator.calibration
        chosen_probes = choose_probes(
            simulator.base,
            [(job, candidates[i]) for i in open_],
            [predictions[i].step_time_s for i in open_],
            [predictions[i].fits for i in open_],
            config.probes,
            settings,
            config.calibrate.probe_pool,
            center,
        )
        round_.probes = [(candidates[open_[j]], predictions[open_[j]]) for j in chosen_probes]
        assert plan.csv is not None
        name = f"{job.model.name} on {job.cluster.num_devices} x {job.cluster.name}"
        try:
            round_.csv = write_csv(_probe_frame(priced, round_.probes, name), plan.csv)
        except (OSError, UserError) as exc:
            round_.problem = write_failure(plan.csv, exc)
        lines += _probes_text(job, round_, plan.moved)
    round_.text = "\n".join(lines)
    return round_


def _factor_line(result: FitResult) -> str:
    factors = result.calibration.factors
    return ", ".join(f"{name} {factors[name]:.3g}" for name in FACTORS if name in factors)


def _fed_back_text(
    config: AutotuneConfig, job: Job, round_: ProbeRound, chosen: Pick
) -> list[str]:
    assert round_.result is not None and round_.final is not None
    ran = [run for _, run in round_.measured if run.ran]
    lines = [
        "",
        f"Measured probes ({config.measured}): {len(round_.measured)} row(s), {len(ran)} ran, "
        f"{len(round_.measured) - len(ran)} ran out of memory",
        *textwrap.wrap(
            f"calibrated: {_factor_line(round_.result)}",
            width=_WIDTH,
            initial_indent="  ",
            subsequent_indent="    ",
        ),
    ]
    if not ran:
        lines.append(
            "  every probe ran out of memory: the memory model was tightened (memory factor "
            f"{round_.result.calibration.factors['memory_factor']:.3g}) and the pick is the "
            "best layout it predicts to fit"
        )
    level = chosen.level
    probed = {lay for lay, _ in round_.measured}
    shown = [
        (lay, dataclasses.replace(p, step_time_s=p.step_time_s * level))
        for lay, p in round_.ranked
        if lay not in probed
    ]
    lines += [
        f"  measured {lay.describe()}: "
        + (f"{run.step_time_s:.3f} s" if run.ran else "out of memory")
        for lay, run in round_.measured
    ]
    lines += [
        f"Unmeasured layouts re-ranked with the calibration (x{level:.3f}: this job's measured"
        " / predicted level):",
        layout_table(shown[: config.search.top_k]),
        f"Pick: {round_.final[0].describe()} ({chosen.reason})",
        launch_text(job, round_.final[0]),
    ]
    for note in round_.notes:
        lines += textwrap.wrap(
            f"note: {note}", width=_WIDTH, initial_indent="  ", subsequent_indent="    "
        )
    return lines


def _probes_text(job: Job, round_: ProbeRound, moved: str | None) -> list[str]:
    level = round_.final_pick.level if round_.final_pick is not None else 1.0
    shown = [
        (lay, dataclasses.replace(p, step_time_s=p.step_time_s * level))
        for lay, p in round_.probes
    ]
    lines = [
        "",
        f"{len(round_.probes)} layout(s) to measure (likely good, spread over where their "
        "predicted breakdowns differ):",
        layout_table(shown),
    ]
    for rank, (layout, _) in enumerate(round_.probes, start=1):
        lines += [
            f"Probe {rank}: {layout.describe()}",
            launch_text(job, layout),
        ]
    if round_.csv is None:  # not written: the command says why after the result
        return lines
    if moved is not None:
        lines += textwrap.wrap(f"note: {moved}", width=_WIDTH)
    lines += textwrap.wrap(
        f"Fill in status (ok or oom), step_time_s and peak_memory_gib of {round_.csv}, then run "
        f"the same command with measured={round_.csv}",
        width=_WIDTH,
    )
    return lines


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
        if round_.result is not None:
            run.metrics({f"factor.{k}": v for k, v in round_.result.calibration.factors.items()})
            run.metrics({"measured_rows": len(round_.measured)})
        if round_.final is not None and round_.final_pick is not None:
            run.metrics(
                {
                    "pick_predicted_step_time_s": round_.final[1].step_time_s
                    * round_.final_pick.level,
                    "pick_measured": float(round_.final_pick.measured),
                }
            )
            run.tags({"pick": round_.final[0].describe()})
        if round_.probes:
            run.table("probes.csv", _probe_frame(priced, round_.probes, "probes"))
        run.text("round.txt", round_.text)

    recorded = record(
        config.tracking,
        f"probe round: {job.model.name} on {job.cluster.num_devices} x {job.cluster.name}",
        fill,
        tags={"autotune.command": "search", "autotune.protocol": "probe_round"},
    )
    if recorded.problem:
        log.warning(f"warning: the probe round was not recorded in MLflow: {recorded.problem}")
