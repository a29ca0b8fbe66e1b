"""What every command shares: help, config composition, logging, one-line user errors.

A command is a :class:`Command`: its name, the root config it composes, the schema it is typed
into, a summary, its main options and examples (for ``--help``), and the function that runs
it. :func:`run_command` parses ``key=value`` overrides the way Hydra does, composes and types
the config once, and turns every user error (a bad override, an unknown model, an impossible
layout) into one ``error: ...`` line on stderr with exit status 2; ``AUTOTUNE_DEBUG=1`` shows
the traceback instead. SIGINT and SIGTERM are honoured throughout (:mod:`autotune._signals`):
the command stops within seconds, says what was recorded, and exits 130 or 143.
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

import catalog
from autotune import _signals
from autotune.config import register_schemas
from autotune.config import typed
from simulators import UserError

__all__ = ["Command", "emit_json", "run_command"]

log = logging.getLogger("autotune")
USER_ERROR = 2


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
        except _signals.Interrupted as exc:
            print(_signals.summary(exc.number), file=sys.stderr)
            return _signals.exit_status(exc.number)
        number = _signals.received()
        if number:
            print(_signals.summary(number), file=sys.stderr)
            return _signals.exit_status(number)
        return status


def _run(command: Command, argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    _setup_logging()
    try:
        register_schemas()
        if any(a in ("-h", "--help") for a in args):
            print(help_text(command))
            return 0
        show_config = "--cfg" in args
        overrides = [a for a in args if a != "--cfg"]
        flags = [a for a in overrides if a.startswith("-")]
        if flags:
            raise UserError(
                f"unknown option {flags[0]!r}; options are key=value overrides, --cfg and "
                f"--help (python -m {command.module} --help)"
            )
        cfg = catalog.compose(command.config_name, overrides)
        config: Any = typed(cfg, command.schema)  # checked, also when only shown
        if show_config:
            print(OmegaConf.to_yaml(cfg), end="")
            return 0
        command.run(config)
    except UserError as exc:
        if os.environ.get("AUTOTUNE_DEBUG") == "1":
            raise
        print(f"error: {exc}", file=sys.stderr)
        return USER_ERROR
    return 0


def help_text(command: Command) -> str:
    """``--help``: what the command does, its main options with their defaults, examples."""
    cfg = catalog.compose(command.config_name)
    choices = catalog.group_choices(command.config_name)
    width = max(len(key) for key, _ in command.options) + 2
    lines = [f"usage: python -m {command.module} [key=value ...] [--cfg] [--help]", ""]
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
