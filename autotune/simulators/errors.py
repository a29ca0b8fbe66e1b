"""The one family of exceptions a user can cause.

Every error that a user can provoke (an unknown name, a meaningless value, an impossible layout,
a malformed data file) is a :class:`UserError`. The command-line entry points catch it once and
print one line; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["DataFileError", "LayoutError", "SpecError", "UserError"]


class UserError(Exception):
    """Base class of the errors a user can cause; the message says what is allowed."""


class SpecError(UserError):
    """A spec field holds a value that is meaningless on its own (a degree below 1, ...)."""


class LayoutError(UserError):
    """A layout breaks one or more rules of Megatron-LM / MindSpeed for this job."""


class DataFileError(UserError):
    """A measurement file is malformed; the message lists every problem (file, row, column)."""
