"""The size rule of docs/conventions.md (rule 2): a module past 500 lines or a function past
60 is split, or says in one line why not (a ``# size:`` comment: for a module among its
first lines after the docstring, for a function on the line above its ``def`` or its
decorators)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
REASON = "# size:"


def _module_reason(lines: list[str], tree: ast.Module) -> bool:
    start = tree.body[0].end_lineno if tree.body and isinstance(tree.body[0], ast.Expr) else 0
    return any(line.startswith(REASON) for line in lines[start : (start or 0) + 20])


def _function_reason(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return lines[first - 2].strip().startswith(REASON)


def _oversized() -> list[str]:
    found = []
    for path in sorted((ROOT / "autotune").rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        name = path.relative_to(ROOT)
        if len(lines) > MAX_MODULE_LINES and not _module_reason(lines, tree):
            found.append(f"{name}: {len(lines)} lines")
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES and not _function_reason(lines, node):
                    found.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return found


def test_modules_and_functions_keep_the_size_rule_or_say_why_not() -> None:
    oversized = _oversized()
    assert not oversized, "split these, or give a '# size:' reason:\n" + "\n".join(oversized)
