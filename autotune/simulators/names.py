"""The one rule for the names a user gives, and one-line text for what is shown of them.

A name (of a model, a cluster, a calibration, a study, an MLflow experiment) becomes a file
name, part of a study name, a line of a launch file's header and of a record, so it is an
identifier: 1 to :data:`MAX_NAME_LENGTH` ASCII letters, digits, ``.``, ``_`` and ``-``,
starting with a letter or digit. It can therefore hold no space, quote, ``$``, backtick,
``;``, ``/``, ``\\``, control character or line break, and is never ``.``, ``..``, a hidden
file or an option (``-x``). A device's name is a label for people, which may also hold
spaces and parentheses ("B200 (GB200 superchip)"); words of it are matched against the names
that profiles report (``autotune/simulators/hierarchical/cost.py``).

The doors call :func:`check_name` / :func:`check_label` where a name enters (docs/conventions.md
rule 16); whatever writes text for a shell or for Python still quotes every value, and
:func:`one_line` writes any text safely into a comment.
"""

from __future__ import annotations

import re

from autotune.simulators.errors import UserError
from autotune.simulators.limits import MAX_NAME_LENGTH

__all__ = ["LABEL_RULE", "NAME_RULE", "check_label", "check_name", "is_name", "one_line"]

NAME_RULE = (
    f"1 to {MAX_NAME_LENGTH} letters, digits, '.', '_' or '-', starting with a letter or digit"
)
LABEL_RULE = (
    f"1 to {MAX_NAME_LENGTH} letters, digits, spaces, '.', '_', '-', '(' or ')', starting with "
    "a letter or digit"
)
_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NAME_LENGTH - 1}}}")
_LABEL = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._() -]{{0,{MAX_NAME_LENGTH - 1}}}")


def is_name(value: object) -> bool:
    """Whether ``value`` is a name by the rule above."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def check_name(key: str, value: object) -> None:
    """Refuse ``value`` unless it is a name.

    Raises:
        UserError: one line naming ``key``, the value (its repr) and what a name may hold.
    """
    if not is_name(value):
        raise UserError(f"{key}={value!r} is not a name: use {NAME_RULE}")


def check_label(key: str, value: object) -> None:
    """Refuse ``value`` unless it is a label (a device's name): a name that may hold spaces
    and parentheses.

    Raises:
        UserError: one line naming ``key``, the value (its repr) and what a label may hold.
    """
    if not (isinstance(value, str) and _LABEL.fullmatch(value) and value == value.strip()):
        raise UserError(f"{key}={value!r} is not a device name: use {LABEL_RULE}")


def one_line(text: str) -> str:
    """``text`` with every character that is not printable written as its escape (``\\n``,
    ``\\r``, ``\\u2028``), so that it stays on one line wherever it is written.

    Example:
        >>> one_line("a\\nb")
        'a\\\\nb'
    """
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
