"""The ``autotune`` console script: ``autotune [key=value ...]`` searches (as
``python -m autotune``); ``autotune <command> [key=value ...]`` runs one of :data:`COMMANDS`
(as ``python -m autotune.<command>``)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from autotune._signals import exit_on_signals

# command word -> the module whose ``main`` runs it
COMMANDS = {
    "simulate": "autotune.simulate",
    "benchmark": "autotune.benchmark.__main__",
    "calibrate": "autotune.calibrate.__main__",
    "profile": "autotune.profile",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the search, or the command named first; the exit status."""
    exit_on_signals()  # as ``python -m autotune`` does before its imports (autotune/__init__.py)
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in COMMANDS:
        module = importlib.import_module(COMMANDS[args[0]])
        return int(module.main(args[1:]))
    search = importlib.import_module("autotune.__main__")
    return int(search.main(args))


if __name__ == "__main__":
    sys.exit(main())
