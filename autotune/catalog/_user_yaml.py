"""YAML files are checked before they are loaded: bounded in size, without aliases, and
without a key given twice in one mapping (OmegaConf refuses that with a parser's traceback).

YAML's anchors and aliases (``&a``, ``*a``) let a file of a few hundred bytes stand for a
tree of billions of nodes ("billion laughs"): the YAML parser shares them, but OmegaConf
copies every one while it builds the config, so the load never ends. No config file of this
project needs them (none uses them), so a file that holds one is refused by its line, as is a
file beyond :data:`MAX_YAML_BYTES`; without aliases, loading a file takes time in proportion
to its size. Checked here: every file Hydra may compose (``conf/`` and each folder of
``hydra.searchpath``, where a user keeps their own models and clusters) and every
``calibration=`` file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from autotune.simulators import UserError
from autotune.simulators.names import one_line

__all__ = ["MAX_SCANNED_ENTRIES", "MAX_YAML_BYTES", "check_config_folders", "check_yaml_file"]

# Bytes in one YAML file: a calibration of 100,000 measured rows takes about 15 MB, and the
# largest file of conf/ has a few KB; a larger file is not a config (a data dump, a disk image).
MAX_YAML_BYTES = 16 * 2**20
# Files and folders looked at under one config folder: conf/ holds about 60, so a folder with
# more is not a config folder (a home or /), and walking it would take minutes.
MAX_SCANNED_ENTRIES = 10_000

_SUFFIXES = (".yaml", ".yml")
_Parser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it: 10x faster


def check_yaml_file(path: Path) -> None:
    """Refuse a YAML file that is too large or holds an anchor or an alias.

    Raises:
        UserError: one line naming the file (and the line) and what is allowed.
    """
    shown = one_line(str(path))
    try:
        if not path.is_file():  # a pipe or a device could be read forever
            raise UserError(f"{shown}: not a regular file")
        with path.open("rb") as file:
            text = file.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise UserError(f"{shown}: cannot be read: {exc.strerror or exc}") from None
    if len(text) > MAX_YAML_BYTES:
        raise UserError(f"{shown}: a YAML file read here holds at most {MAX_YAML_BYTES:,} bytes")
    digest = hashlib.blake2b(text).digest()
    if digest not in _CLEAN:
        _check_events(shown, text)
        _CLEAN.add(digest)


_CLEAN: set[bytes] = set()  # digests of the texts found clean: each text is scanned once


def _check_events(shown: str, text: bytes) -> None:
    """Scan the text's YAML events (no object is built) for an anchor or an alias, and for a
    key given twice in one mapping (which would otherwise end in a parser's traceback)."""
    mappings: list[_Mapping | None] = []  # per open collection: a mapping's keys, or None
    try:
        for event in yaml.parse(text, Loader=_Parser):
            line = event.start_mark.line + 1
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise UserError(
                    f"{shown}, line {line}: YAML anchors and aliases (&name, *name) are not "
                    "allowed; write the values out (an alias can stand for billions of nodes)"
                )
            if isinstance(event, yaml.ScalarEvent | yaml.CollectionStartEvent) and mappings:
                _next_node(shown, mappings[-1], event, line)
            if isinstance(event, yaml.CollectionStartEvent):
                mappings.append(_Mapping() if isinstance(event, yaml.MappingStartEvent) else None)
            elif isinstance(event, yaml.CollectionEndEvent):
                mappings.pop()
    except yaml.YAMLError as exc:
        reason = " ".join(str(getattr(exc, "problem", None) or exc).split())
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"{shown}{where}: not valid YAML: {one_line(reason)}") from None


@dataclass(slots=True)
class _Mapping:
    """An open mapping of the scan: the line of each key seen, and whether a key comes next."""

    keys: dict[str, int] = field(default_factory=dict)
    at_key: bool = True


def _next_node(shown: str, mapping: _Mapping | None, event: yaml.Event, line: int) -> None:
    """A node of the open collection: in a mapping, keys and values alternate."""
    if mapping is None:
        return
    if mapping.at_key and isinstance(event, yaml.ScalarEvent):
        first = mapping.keys.get(event.value)
        if first is not None:
            raise UserError(
                f"{shown}, line {line}: key {one_line(event.value)!r} is given twice in one "
                f"mapping (first on line {first}); keep one"
            )
        mapping.keys[event.value] = line
    mapping.at_key = not mapping.at_key


def check_config_folders(conf_dir: Path, overrides: Sequence[str]) -> None:
    """Check every YAML file Hydra may compose: those of ``conf_dir`` and of each folder that
    the overrides add to ``hydra.searchpath`` (``file://`` or a plain path; ``pkg://``).

    Raises:
        UserError: the first file refused, or a search folder too large to be config.
    """
    for folder in (conf_dir, *_search_folders(overrides)):
        for path in _yaml_files(folder):
            check_yaml_file(path)


def _search_folders(overrides: Sequence[str]) -> list[Path]:
    """The folders of ``hydra.searchpath`` that the overrides set (a malformed override is left
    to Hydra, which refuses it)."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return []
    folders: list[Path] = []
    for override in parsed:
        if override.key_or_group != "hydra.searchpath":
            continue
        value = override.value()
        entries = value if isinstance(value, list) else [value]
        folders += [_folder(str(entry)) for entry in entries]
    return folders


def _folder(entry: str) -> Path:
    """The folder of one search path entry.

    Raises:
        UserError: no such folder, or a package that is not installed (Hydra would only warn
            and compose without it).
    """
    scheme, _, rest = entry.rpartition("://")
    if scheme != "pkg":
        if not Path(rest).is_dir():
            raise UserError(
                f"hydra.searchpath: {one_line(entry)} is not a folder; give folders that hold "
                "config groups (model/, cluster/, ...), as file:///path or /path"
            )
        return Path(rest)
    try:
        spec = importlib.util.find_spec(rest)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise UserError(
            f"hydra.searchpath: {one_line(entry)} names no installed package; give an "
            "installed package (pkg://name) or a folder (file:///path)"
        )
    return Path(locations[0])


def _yaml_files(folder: Path) -> Iterator[Path]:
    """The YAML files under ``folder``, through links as Hydra follows them (each folder once;
    hidden folders, which no config group is, skipped).

    Raises:
        UserError: more than :data:`MAX_SCANNED_ENTRIES` entries under it.
    """
    seen, visited = 0, set()
    for root, folders, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        folders[:] = [] if real in visited else sorted(f for f in folders if f[0] != ".")
        if real in visited:
            continue
        visited.add(real)
        seen += len(folders) + len(files)
        if seen > MAX_SCANNED_ENTRIES:
            raise UserError(
                f"config folder {one_line(str(folder))}: more than {MAX_SCANNED_ENTRIES:,} "
                "files and folders; give the folder that holds the config groups (model/, ...)"
            )
        yield from (Path(root) / name for name in sorted(files) if name.endswith(_SUFFIXES))
