"""The package's import graph has no cycle, and packages meet through their public faces
(the scripts of ``benchmarks/`` too).

Every ``import`` statement counts, at module level or inside a function, under
``TYPE_CHECKING`` or not: a cycle that only a function-level import holds up is still a
cycle (docs/conventions.md). ``from package import name`` depends on the package's
``__init__``; ``from package import submodule`` on the submodule.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "autotune"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imported(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """The project modules ``name`` imports, with the line of each import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in MODULES:
                    yield target, node.lineno
                elif base in MODULES:
                    yield base, node.lineno


GRAPH = {name: dict(_imported(name, path)) for name, path in MODULES.items()}
SCRIPTS = {
    f"benchmarks.{path.stem}": dict(_imported(f"benchmarks.{path.stem}", path))
    for path in sorted((ROOT / "benchmarks").glob("*.py"))
}


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in GRAPH:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle() -> None:
    lines = []
    for component in _cycles():
        members = set(component)
        edges = [
            f"{a} -> {b} (line {line})"
            for a in component
            for b, line in GRAPH[a].items()
            if b in members
        ]
        lines.append("; ".join(edges))
    assert not lines, "import cycles:\n" + "\n".join(lines)


def _owner(module: str) -> str | None:
    """The package whose private module this is (``autotune.calibrate._probe`` ->
    ``autotune.calibrate``), or None for a public module."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


@pytest.mark.parametrize("module", sorted({**GRAPH, **SCRIPTS}))
def test_packages_meet_through_public_modules(module: str) -> None:
    """A private module (``_name``, or one inside a private package) is imported only from
    inside the package that holds it; other packages and scripts use its public face."""
    reached = [
        f"{target} (line {line})"
        for target, line in {**GRAPH, **SCRIPTS}[module].items()
        if (owner := _owner(target)) is not None and not (module + ".").startswith(owner + ".")
    ]
    assert not reached, f"{module} reaches into private modules: {', '.join(reached)}"
