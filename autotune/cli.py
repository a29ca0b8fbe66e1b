"""What every command shares: help, config composition, sweeps, logging, one-line user errors.

A command is a :class:`Command`: its name, the root config it composes, the schema it is typed
into, a summary, its main options and examples (for ``--help``), the function that runs it,
the outputs it writes and the files it reads (never written over). :func:`run_command` takes
Hydra's flags (``-m``, ``--cfg``, ``--info``: :mod:`autotune._command_line`) and
``key=value`` overrides the way Hydra does, composes and types each job's config once
(:mod:`autotune._sweep`), and turns every user error (a bad override, an unknown model, an
impossible layout) into one ``error: ...`` line on stderr with exit status 2;
``AUTOTUNE_DEBUG=1`` shows the traceback instead. SIGINT and SIGTERM are honoured throughout
(:mod:`autotune._signals`): the command stops within seconds, says what was recorded, and
exits 130 or 143; a sweep stops after the job in flight.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from autotune import _signals
from autotune import catalog
from autotune._command_line import FLAGS
from autotune._command_line import CommandLine
from autotune._command_line import parse_command_line
from autotune._info import info_text
from autotune._sweep import Input
from autotune._sweep import Output
from autotune._sweep import SweepJob
from autotune._sweep import calibration_input
from autotune._sweep import job_inputs
from autotune._sweep import no_inputs
from autotune._sweep import no_outputs
from autotune._sweep import plan_jobs
from autotune.config import register_schemas
from autotune.simulators import UserError
from autotune.simulators.registry import SIMULATOR_NAMES

__all__ = [
    "Command",
    "Input",
    "Output",
    "calibration_input",
    "emit_json",
    "job_inputs",
    "run_command",
]

log = logging.getLogger("autotune")
USER_ERROR = 2
BROKEN_PIPE = 128 + 13  # what a shell reports for a writer that SIGPIPE ended
NO_HYDRA_CONFIG = (
    "--cfg hydra: these commands compose their config with Hydra's compose API, which has no "
    "Hydra runtime config (run folder, launcher, logging) to show; --cfg job prints the "
    "composed config"
)


@dataclass(frozen=True, slots=True)
class Command:
    """One entry point: ``python -m <module> [key=value ...]``."""

    module: str
    config_name: str
    schema: type
    summary: str
    options: tuple[tuple[str, str], ...]  # (config key, what it means); defaults are read
    examples: tuple[str, ...]
    run: Callable[[Any], None]
    outputs: Callable[[Any], tuple[Output, ...]] = no_outputs  # what a job writes (-m)
    inputs: Callable[[Any], tuple[Input, ...]] = no_inputs  # files it reads: never written

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Run with ``argv`` (default: the process's arguments); the exit status."""
        return run_command(self, argv)


def run_command(command: Command, argv: Sequence[str] | None = None) -> int:
    """Run ``command`` with ``argv`` (default: ``sys.argv[1:]``); the process exit status.

    A signal ends it with one line, what was recorded, and 128 + the signal's number: at once
    (:class:`autotune._signals.Interrupted`, after the cleanup on the way out), or once the
    work it stopped has printed what it found (a search stopped after its trial in flight).
    """
    with _signals.honoured():
        try:
            status = _run(command, argv)
        except BrokenPipeError:  # the reader left (``--help | head``): nothing more to say
            _silence_stdout()
            return BROKEN_PIPE
        except OSError as exc:
            if _stdout_writes():
                raise
            _silence_stdout()  # what it still buffers would fail again at exit
            print(
                f"error: the standard output cannot be written: {exc.strerror or exc}",
                file=sys.stderr,
            )
            return USER_ERROR
        except _signals.Interrupted as exc:
            print(_signals.summary(exc.number), file=sys.stderr)
            return _signals.exit_status(exc.number)
        number = _signals.received()
        if number:
            print(_signals.summary(number), file=sys.stderr)
            return _signals.exit_status(number)
        return status


def _stdout_writes() -> bool:
    """Whether the standard output takes a line (after an ``OSError``: was it the output that
    failed, on a full disk or a device that takes nothing, or something else)."""
    try:
        print(file=sys.stdout, flush=True)
    except OSError:
        return False
    return True


def _silence_stdout() -> None:
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _run(command: Command, argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    _setup_logging()
    try:
        register_schemas()
        line = parse_command_line(command.module, args)
        if line.help:
            print(help_text(command))
            return 0
        if line.cfg == "hydra":
            raise UserError(NO_HYDRA_CONFIG)
        jobs = plan_jobs(
            command.config_name,
            command.schema,
            line.overrides,
            line.multirun,
            command.outputs,
            command.inputs,
        )
        if line.cfg is not None or line.info is not None:
            _show(command, line, jobs)
            return 0
    except UserError as exc:
        return _user_error(exc)
    return _run_jobs(command, jobs, line.multirun)


def _user_error(exc: UserError) -> int:
    """Print ``error: <message>`` (``AUTOTUNE_DEBUG=1``: raise it); the exit status."""
    if os.environ.get("AUTOTUNE_DEBUG") == "1":
        raise exc
    print(f"error: {exc}", file=sys.stderr)
    return USER_ERROR


def _show(command: Command, line: CommandLine, jobs: list[SweepJob]) -> None:
    """``--cfg`` or ``--info`` for each job, instead of running it."""
    for job in jobs:
        if line.multirun:
            log.info(job.header)
        if line.info is not None:
            print(info_text(command.config_name, job.overrides, line.info), end="")
        else:
            print(OmegaConf.to_yaml(job.cfg), end="")


def _run_jobs(command: Command, jobs: list[SweepJob], sweep: bool) -> int:
    """Run the jobs in order; the worst exit status. A signal stops the sweep after the job
    in flight (which stops as the signal asks)."""
    statuses = []
    for job in jobs:
        if sweep:
            log.info(job.header)
        try:
            statuses.append(_run_job(command, job))
        except _signals.Interrupted:
            _say_left(job)
            raise
        if _signals.received():
            _say_left(job)
            break
    return max(statuses)


def _run_job(command: Command, job: SweepJob) -> int:
    try:
        command.run(job.config)
    except UserError as exc:
        return _user_error(exc)
    return 0


def _say_left(job: SweepJob) -> None:
    """The jobs of the sweep that a signal leaves unrun."""
    if job.number < job.total:
        log.warning(
            f"the sweep stops after job {job.number}: jobs {job.number + 1} to {job.total} "
            f"of {job.total} not run"
        )


_FLAG_WIDTH = 24
_FLAG_HELP = (
    ("-m, --multirun", "run once per combination of the swept values, in Hydra's order:"),
    ("", "model=a,b key=range(1,4) key=choice(x,y) model=glob(llama3*); each job starts"),
    ("", "with a [k/N] line on stderr; an output two jobs share goes to a numbered"),
    ("", "subfolder (launch/2/); the exit status is the worst job's"),
    ("--cfg [job|all]", "print the composed config instead of running (resolved; --resolve"),
    ("", "is accepted); --cfg hydra: there is no Hydra runtime config (exit 2)"),
    ("--info [PART]", "the config search path, the config groups with their options and the"),
    ("", "defaults list of the root config (PART: searchpath, groups or defaults)"),
    ("hydra.searchpath=[...]", "folders of your own configs (model/, cluster/, ...):"),
    ("", "hydra.searchpath=[file:///PATH]; no other hydra.* key is taken"),
)


def help_text(command: Command) -> str:
    """``--help``: what the command does, its main options with their defaults, examples."""
    cfg = catalog.compose(command.config_name)
    choices = catalog.group_choices(command.config_name)
    width = max(len(key) for key, _ in command.options) + 2
    lines = [f"usage: python -m {command.module} [key=value ...] [{'] ['.join(FLAGS)}]", ""]
    lines += [command.summary, "", "Main options (default in brackets):"]
    for key, meaning in command.options:
        default = choices.get(key, OmegaConf.select(cfg, key, default=None))
        if OmegaConf.is_config(default):
            default = OmegaConf.to_container(default)
        shown = "" if default is None else f" [{_plain(default)}]"
        lines.append(f"  {key:<{width}}{meaning}{shown}")
    lines += [
        "",
        "Any other key of the composed config can be set the same way; --cfg prints it.",
        f"Models: {', '.join(catalog.options('model'))}",
        f"Clusters: {', '.join(catalog.options('cluster'))}",
        f"Simulators: {', '.join(SIMULATOR_NAMES)}",
        "",
        "Hydra's flags and keys:",
        *(f"  {flag:<{_FLAG_WIDTH}}{meaning}".rstrip() for flag, meaning in _FLAG_HELP),
        "",
        "Examples:",
        *(f"  {example}" for example in command.examples),
    ]
    return "\n".join(lines)


def _plain(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join(map(_plain, value)) + "]"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is when a record is emitted, not as it was when the
    handler was made (a caller that swaps stderr, e.g. a test harness, then closes it)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        pass


def _setup_logging() -> None:
    """Progress and notes on stderr, so stdout holds only the result (one JSON object)."""
    handler = _StderrHandler()
    logging.basicConfig(level=logging.INFO, format="%(message)s", handlers=[handler], force=True)
    for noisy in ("optuna", "alembic", "mlflow", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def emit_json(payload: dict[str, Any]) -> None:
    """The one JSON object of ``output=json``, on stdout (NaN and infinity are not JSON: a
    payload holding one is a bug, refused here rather than printed)."""
    sys.stdout.write(json.dumps(payload, indent=2, default=str, allow_nan=False) + "\n")
    sys.stdout.flush()
