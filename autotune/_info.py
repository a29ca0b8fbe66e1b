"""``--info``: where a command's config comes from, as Hydra's ``--info`` shows it.

The config search path (``conf/``, each ``hydra.searchpath`` folder, the schemas of the
ConfigStore), the config groups with their options, and the defaults list of the command's
root config; ``--info <part>`` shows one of them (``--cfg`` prints the config itself).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from autotune import catalog
from autotune.catalog import ConfigInfo

__all__ = ["info_text"]

_WIDTH = 100


def info_text(config_name: str, overrides: Sequence[str], part: str) -> str:
    """The ``part`` of ``--info`` (``all``: every part) for ``config_name`` composed with
    ``overrides``.

    Raises:
        UserError: as :func:`catalog.compose`.
    """
    info = catalog.config_info(config_name, overrides)
    parts = {
        "searchpath": _search_path(info),
        "groups": _groups(info),
        "defaults": _defaults(info, config_name),
    }
    return "\n".join(parts.values()) if part == "all" else parts[part]


def _search_path(info: ConfigInfo) -> str:
    rows = [("provider", "search path"), *info.search_path]
    return _table(
        "Config search path (in order; hydra.searchpath=[file:///path] adds folders):", rows
    )


def _groups(info: ConfigInfo) -> str:
    lines = ["Config groups (group=option; a group's options are its files):"]
    for group, options in info.groups:
        text = f"{group}: {', '.join(options)}"
        lines += textwrap.wrap(text, _WIDTH, initial_indent="  ", subsequent_indent="    ")
    return "\n".join(lines) + "\n"


def _defaults(info: ConfigInfo, config_name: str) -> str:
    rows = [("config path", "package", "parent")]
    rows += [
        (
            f"{entry.config_path} (_self_)" if entry.is_self else entry.config_path,
            entry.package,
            entry.parent,
        )
        for entry in info.defaults
    ]
    return _table(
        f"Defaults list of {config_name}.yaml (composed in this order; _self_: its own values):",
        rows,
    )


def _table(title: str, rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [title]
    lines += [
        "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return "\n".join(lines) + "\n"
