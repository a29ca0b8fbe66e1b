"""The README's Python snippets run as written (the front door cannot drift from the code)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_readme_has_python_snippets() -> None:
    assert SNIPPETS


@pytest.mark.parametrize("code", SNIPPETS, ids=lambda c: c.splitlines()[0][:40])
def test_snippet_runs(code: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(code, str(README), "exec"), {})  # noqa: S102 - the README's own code
    assert capsys.readouterr().out  # every snippet shows its result
