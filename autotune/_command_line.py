"""A command's arguments: Hydra's flags (``-m``, ``--cfg``, ``--info``, ...) and overrides.

The flags are those of a Hydra application, as far as the compose API gives them a meaning:
``--help``; ``--cfg [job|all|hydra]`` (``--cfg`` alone: ``job``); ``--resolve`` (the config
shown is always resolved); ``--info [all|searchpath|groups|defaults]`` (alone: ``all``);
``-m``/``--multirun``. A flag may stand anywhere among the overrides and takes its value as
the next argument or after ``=`` (``--cfg=job``). Anything else that starts with ``-`` is
refused, as is a value a flag does not take.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.simulators import UserError

__all__ = ["CFG_PARTS", "FLAGS", "INFO_PARTS", "CommandLine", "parse_command_line"]

CFG_PARTS = ("job", "all", "hydra")  # what --cfg prints (Hydra's choices)
INFO_PARTS = ("all", "searchpath", "groups", "defaults")  # what --info prints
FLAGS = (
    "-m/--multirun",
    f"--cfg [{'|'.join(CFG_PARTS)}]",
    "--resolve",
    f"--info [{'|'.join(INFO_PARTS)}]",
    "-h/--help",
)
_SPELLINGS = {
    "-h": "help",
    "--help": "help",
    "-m": "multirun",
    "--multirun": "multirun",
    "-c": "cfg",
    "--cfg": "cfg",
    "-i": "info",
    "--info": "info",
    "--resolve": "resolve",
}
_VALUES = {"cfg": CFG_PARTS, "info": INFO_PARTS}  # the flags that take a value
_DEFAULTS = {"cfg": "job", "info": "all"}  # ... when none follows


@dataclass(frozen=True, slots=True)
class CommandLine:
    """What a command was asked: the overrides, and what to do with them."""

    overrides: tuple[str, ...]
    help: bool = False
    multirun: bool = False
    cfg: str | None = None  # a part of CFG_PARTS: print the config instead of running
    info: str | None = None  # a part of INFO_PARTS: print it instead of running


def parse_command_line(module: str, args: Sequence[str]) -> CommandLine:
    """Split ``args`` into flags and overrides.

    Raises:
        UserError: an unknown option, a value a flag does not take, or ``--cfg`` with
            ``--info``.
    """
    overrides: list[str] = []
    seen: dict[str, str] = {}
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        flag, equals, given = arg.partition("=")
        name = _SPELLINGS.get(flag if arg.startswith("-") else "")
        if name is None:
            if arg.startswith("-"):
                raise UserError(
                    f"unknown option {arg!r}; options are key=value overrides and "
                    f"{', '.join(FLAGS)} (python -m {module} --help)"
                )
            overrides.append(arg)
            continue
        if name not in _VALUES:
            if equals:
                raise UserError(f"{flag} takes no value (given {arg!r})")
            seen[name] = ""
            continue
        if not equals and rest and _is_value(rest[0]):
            given, equals = rest.pop(0), "="
        seen[name] = _checked(flag, name, given if equals else None)
    if "cfg" in seen and "info" in seen:
        raise UserError("--cfg and --info each print instead of running: give one of them")
    return CommandLine(
        overrides=tuple(overrides),
        help="help" in seen,
        multirun="multirun" in seen,
        cfg=seen.get("cfg"),
        info=seen.get("info"),
    )


def _is_value(arg: str) -> bool:
    """Whether ``arg``, after a flag that takes a value, is that value: not an override
    (``key=value``, ``~key``) and not another flag."""
    return "=" not in arg and not arg.startswith(("-", "~"))


def _checked(flag: str, name: str, given: str | None) -> str:
    """The flag's value (its default when none was given), if it is one it takes."""
    value = _DEFAULTS[name] if given is None else given
    if value not in _VALUES[name]:
        *most, last = _VALUES[name]
        allowed = f"{', '.join(most)} or {last}"
        raise UserError(f"{flag} takes {allowed} (or nothing: {_DEFAULTS[name]}), not {given!r}")
    return value
