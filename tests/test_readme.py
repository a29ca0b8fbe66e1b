"""The README's Python snippets run as written and its commands are accepted as written (the
front door cannot drift from the code)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_readme_has_python_snippets() -> None:
    assert SNIPPETS


@pytest.mark.parametrize("code", SNIPPETS, ids=lambda c: c.splitlines()[0][:40])
def test_snippet_runs(code: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(code, str(README), "exec"), {})  # noqa: S102 - the README's own code
    assert capsys.readouterr().out  # every snippet shows its result


def _readme_module() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "_readme.py"
    spec = importlib.util.spec_from_file_location("_readme", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_readme"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


COMMANDS = _readme_module().readme_commands()


def test_the_readme_has_commands_of_every_kind() -> None:
    modules = {c.module for c in COMMANDS}
    assert {"autotune", "autotune.simulate", "autotune.benchmark"} <= modules


@pytest.mark.parametrize("readme_command", COMMANDS, ids=lambda c: c.text[:70])
def test_readme_command_composes_and_passes_its_checks(
    readme_command: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each command's config, as the README writes it, is accepted (``--cfg`` stops there);
    ``benchmarks/bench_readme.py`` runs them all for real and times them."""
    status = readme_command.command().main([*readme_command.args, "--cfg"])
    assert status == 0, capsys.readouterr().err
