"""The shell commands of the README: every ``python -m autotune...`` line of its code blocks.

Shared by ``tests/test_readme.py`` (each command's config composes and passes its checks) and
``benchmarks/bench_readme.py`` (each command runs, timed, as a new user would run it).
"""

from __future__ import annotations

import importlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from autotune.cli import Command

README = Path(__file__).resolve().parents[1] / "README.md"


@dataclass(frozen=True, slots=True)
class ReadmeCommand:
    """One README command: the module it runs and its arguments (redirections dropped)."""

    module: str
    args: tuple[str, ...]

    @property
    def text(self) -> str:
        return shlex.join(["python", "-m", self.module, *self.args])

    def command(self) -> Command:
        """The module's :class:`autotune.cli.Command`."""
        name = self.module
        try:
            module = importlib.import_module(f"{name}.__main__")
        except ModuleNotFoundError:
            module = importlib.import_module(name)
        return module.COMMAND


def readme_commands(readme: Path = README) -> list[ReadmeCommand]:
    """Every ``python -m autotune...`` command in the README's code blocks, in order."""
    blocks = re.findall(r"```(?:bash|sh|console)?\n(.*?)```", readme.read_text(), re.DOTALL)
    commands = []
    for block in blocks:
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip()
            if not line.startswith("python -m autotune"):
                continue
            words = shlex.split(line, comments=True)
            if ">" in words:
                words = words[: words.index(">")]
            commands.append(ReadmeCommand(words[2], tuple(words[3:])))
    return commands
