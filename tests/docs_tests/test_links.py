"""The documentation's links and citations lead somewhere.

Every relative Markdown link of the project's Markdown files names a file or folder that exists
(and, for a ``#section`` of a Markdown file, a heading of it); every ``docs/<name>.md`` and
``docs/decisions/<name>.md`` path that code, config, scripts, tests or docs cite exists; and
nothing cites ``docs/accuracy.md`` by a section number, which its sections no longer have (a
decision is cited by its file in ``docs/decisions/``).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Folders whose text is not ours to link from: raw published data, and what runs write.
SKIPPED = (
    "autotune/dataset/raw/",
    "benchmark_results/",
    "benchmark_report/",
    "mlruns/",
    "launch/",
)
CITING = ("*.py", "*.yaml", "*.md", "*.toml")

LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
# This project's docs: docs/<name>.md or docs/decisions/<name>.md, not a path inside another
# repository (``Ascend/MindSpeed:docs/zh/...``, ``repo@commit:docs/...``).
CITED = re.compile(r"(?<![\w/:@.-])docs/(?:decisions/)?[\w.-]+\.md")
BY_NUMBER = re.compile(r"accuracy\.md,? (?:section )?\d|accuracy\.md section")


def _files(patterns: tuple[str, ...]) -> list[Path]:
    found: set[Path] = set()
    for pattern in patterns:
        found.update(ROOT.rglob(pattern))
    return sorted(
        path
        for path in found
        if not any(part.startswith(".") for part in path.relative_to(ROOT).parts)
        and not str(path.relative_to(ROOT)).startswith(SKIPPED)
    )


MARKDOWN = _files(("*.md",))
CITING_FILES = _files(CITING)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces as ``-``."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def _anchors(path: Path) -> frozenset[str]:
    anchors: dict[str, int] = {}
    found = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(r"#{1,6} ", line):
            slug = _slug(line.lstrip("#"))
            count = anchors.get(slug, 0)
            anchors[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(found)


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    return LINK.findall(text)


def test_the_docs_are_found() -> None:
    names = {str(p.relative_to(ROOT)) for p in MARKDOWN}
    assert {"README.md", "docs/simulators.md", "docs/decisions/README.md"} <= names


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    broken = []
    for target in _links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(f"{target} (no {resolved.relative_to(ROOT)})")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


def test_cited_docs_exist() -> None:
    missing = [
        f"{path.relative_to(ROOT)}:{number}: {cited}"
        for path in CITING_FILES
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for cited in CITED.findall(line)
        if not (ROOT / cited).is_file()
    ]
    assert not missing, "cited docs that do not exist:\n" + "\n".join(missing)


def test_nothing_cites_accuracy_md_by_section_number() -> None:
    cited = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in CITING_FILES
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if BY_NUMBER.search(line)
    ]
    assert not cited, "cite the decision in docs/decisions/ instead:\n" + "\n".join(cited)


def test_every_decision_is_in_the_index() -> None:
    decisions = ROOT / "docs" / "decisions"
    index = (decisions / "README.md").read_text()
    files = sorted(p.name for p in decisions.glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert files, "no decision files"
    numbers = [name[:4] for name in files]
    assert len(set(numbers)) == len(numbers), "two decisions share a number"
    assert [name for name in files if f"({name})" not in index] == []
