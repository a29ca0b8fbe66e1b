"""The jobs of one command line: one, or with ``-m`` one per combination of the swept values.

Every job's config is composed, typed and checked before the first job runs, so a bad value
in the last combination is refused before any work. Jobs of a sweep that would write the same
output (the search's ``launch_dir``, the benchmark's ``report_dir``, calibrate's ``out``: each
command names its outputs) each write theirs into a subfolder named by the job's number, as
Hydra's multirun gives each job a numbered folder of its sweep folder: ``launch/2/`` for
``launch_dir=launch``, ``2/ops.csv`` for ``out=ops.csv``; an output the jobs already set
apart (``out=a.yaml,b.yaml``, or calibrate's ``name=a,b``) is left as it is. Before any job
runs, none may write over a file it reads (:func:`check_inputs_kept`).
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import replace
from typing import Any

from omegaconf import DictConfig
from omegaconf import OmegaConf

from autotune import catalog
from autotune.config import AutotuneConfig
from autotune.config import typed
from autotune.simulators import UserError

__all__ = [
    "Input",
    "Output",
    "SweepJob",
    "calibration_input",
    "check_inputs_kept",
    "job_inputs",
    "no_inputs",
    "no_outputs",
    "plan_jobs",
]


@dataclass(frozen=True, slots=True)
class Output:
    """A file or folder a command writes, and the config key that names it."""

    key: str  # launch_dir, report_dir, out, ...
    path: str  # as the config gives it
    folder: bool = False
    files: tuple[str, ...] = ()  # of a folder: the files the command replaces in it

    def replaced(self) -> tuple[str, ...]:
        """The files the command replaces: the file, or those of :attr:`files` in the folder."""
        if self.folder:
            return tuple(os.path.join(self.path, name) for name in self.files)
        return (self.path,)

    def numbered(self, number: int) -> str:
        """The path in the subfolder of job ``number``: ``launch/2``, ``runs/2/cal.yaml``."""
        if self.folder:
            return os.path.join(self.path, str(number))
        head, name = os.path.split(self.path)
        return os.path.join(head, str(number), name)


@dataclass(frozen=True, slots=True)
class Input:
    """A file a command reads, and the config key that names it (None: not given)."""

    key: str  # data, calibration, measured, simulator.op_costs, ...
    path: str | None


def no_outputs(config: Any) -> tuple[Output, ...]:
    """A command that writes no file of its own."""
    return ()


def no_inputs(config: Any) -> tuple[Input, ...]:
    """A command that reads no file named on its command line."""
    return ()


def calibration_input(calibration: str | None) -> Input:
    """The file ``calibration=`` reads: the path given, or the name's in ``calibrations/``."""
    if calibration is not None and not catalog.is_calibration_path(calibration):
        calibration = str(catalog.calibration_file(calibration))
    return Input("calibration", calibration)


def job_inputs(config: AutotuneConfig) -> tuple[Input, ...]:
    """The files a search or ``autotune.simulate`` reads: the calibration and the simulator's
    cost table (the measured probes the search never writes over: it writes the next ones
    beside them, ``autotune.calibrate.plan_probes``)."""
    return (
        calibration_input(config.calibration),
        Input("simulator.op_costs", config.simulator.get("op_costs")),
    )


def check_inputs_kept(outputs: Sequence[Output], inputs: Sequence[Input]) -> None:
    """Refuse an output that would replace a file the same command reads (``out=`` naming
    the data file, a trace over the cost table, a report over the data), before any work.

    Raises:
        UserError: naming both settings.
    """
    for given in inputs:
        if given.path is None or not os.path.isfile(given.path):
            continue  # a source or calibration name, or a file still to be created
        for output in outputs:
            if any(
                os.path.exists(path) and os.path.samefile(path, given.path)
                for path in output.replaced()
            ):
                raise UserError(
                    f"{output.key}={output.path!r} would replace {given.key}={given.path!r}, "
                    "which this command reads; write it elsewhere"
                )


@dataclass(frozen=True, slots=True)
class SweepJob:
    """One run of a command: its overrides, its composed and its typed config."""

    number: int  # from 1
    total: int  # jobs in the sweep
    label: str  # the combination it runs (and where its outputs were moved)
    overrides: tuple[str, ...]
    cfg: DictConfig
    config: Any  # the command's schema

    @property
    def header(self) -> str:
        """``[2/4] model=llama3_8b search.n_trials=10``."""
        return _header(self.number, self.total, self.label)


def plan_jobs(
    config_name: str,
    schema: type,
    overrides: Sequence[str],
    multirun: bool,
    outputs: Callable[[Any], tuple[Output, ...]],
    inputs: Callable[[Any], tuple[Input, ...]] = no_inputs,
) -> list[SweepJob]:
    """The jobs to run, in order, each config composed and checked, none writing over a file
    it reads (:func:`check_inputs_kept`).

    Raises:
        UserError: a bad override or value; in a sweep, the message names the job.
    """
    if not multirun:
        jobs = [_job(config_name, schema, tuple(overrides), 1, 1, "", sweep=False)]
    else:
        runs = catalog.sweep_jobs(config_name, overrides)
        jobs = _apart(
            [
                _job(config_name, schema, run, number, len(runs), label, sweep=True)
                for number, (run, label) in enumerate(
                    zip(runs, _labels(runs), strict=True), start=1
                )
            ],
            schema,
            outputs,
        )
    for job in jobs:
        with _naming(job.header if multirun else None):
            check_inputs_kept(outputs(job.config), inputs(job.config))
    return jobs


def _header(number: int, total: int, label: str) -> str:
    return f"[{number}/{total}] {label}"


@contextlib.contextmanager
def _naming(header: str | None) -> Iterator[None]:
    """A refusal within says which job of the sweep it is (``header``; None: no sweep)."""
    try:
        yield
    except UserError as exc:
        if header is None:
            raise
        raise UserError(f"{header}: {exc}") from None


def _job(
    config_name: str,
    schema: type,
    overrides: tuple[str, ...],
    number: int,
    total: int,
    label: str,
    sweep: bool,
) -> SweepJob:
    with _naming(_header(number, total, label) if sweep else None):
        cfg = catalog.compose(config_name, overrides)
        config: Any = typed(cfg, schema)
    return SweepJob(number, total, label, overrides, cfg, config)


def _labels(runs: tuple[tuple[str, ...], ...]) -> list[str]:
    """What sets each job apart: the overrides that vary between the jobs (when none does,
    as with one job, all of them, or ``the defaults``)."""
    varying = [i for i in range(len(runs[0])) if len({run[i] for run in runs}) > 1]
    return [" ".join(run[i] for i in varying) or " ".join(run) or "the defaults" for run in runs]


def _apart(
    jobs: list[SweepJob], schema: type, outputs: Callable[[Any], tuple[Output, ...]]
) -> list[SweepJob]:
    """The jobs, each output that two of them share moved to a numbered subfolder."""
    written = [outputs(job.config) for job in jobs]
    counts = Counter((o.key, os.path.abspath(o.path)) for found in written for o in found)
    shared = {key for (key, _), count in counts.items() if count > 1}
    return [
        _moved(job, schema, [o for o in found if o.key in shared])
        for job, found in zip(jobs, written, strict=True)
    ]


def _moved(job: SweepJob, schema: type, shared: list[Output]) -> SweepJob:
    """``job`` with its ``shared`` outputs in its numbered subfolder (checked again there)."""
    if not shared:
        return job
    cfg = copy.deepcopy(job.cfg)
    moves = {o.key: o.numbered(job.number) for o in shared}
    for key, path in moves.items():
        OmegaConf.update(cfg, key, path)
    where = ", ".join(f"{key}={path}" for key, path in moves.items())
    label = f"{job.label} ({where})"
    with _naming(_header(job.number, job.total, label)):
        config: Any = typed(cfg, schema)
    return replace(job, label=label, cfg=cfg, config=config)
