"""Hydra beyond one composition: the jobs of a sweep (``-m``) and what ``--info`` shows.

A sweep is expanded as Hydra's own multirun expands it: Hydra's override parser reads the
values (``a,b``, ``range(...)``, ``choice(...)``, ``glob(...)``, ``shuffle(...)``) and its
``BasicSweeper.split_arguments`` makes the jobs, the cartesian product in the order of the
overrides, the last one varying fastest. ``--info`` reads the config search path, the config
groups and the defaults list from Hydra's config loader, so a ``hydra.searchpath`` folder of a
user's own models and clusters shows up in them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import OverrideParseException
from hydra.types import RunMode

from autotune.catalog._compose import compose
from autotune.catalog._compose import conf_dir
from autotune.catalog._compose import parse_failure
from autotune.simulators import UserError

__all__ = ["MAX_JOBS", "ConfigInfo", "DefaultEntry", "config_info", "sweep_jobs"]

# Jobs in one sweep: each is a whole command run (seconds to minutes), so a sweep of more is a
# typo (range(0,100000)) rather than a plan; every job's config is composed before the first.
MAX_JOBS = 1_000


@dataclass(frozen=True, slots=True)
class DefaultEntry:
    """One entry of a defaults list, as Hydra's ``--info defaults`` shows it."""

    config_path: str  # model/llama70b; a schema of the ConfigStore: autotune_schema
    package: str  # where it lands in the config (model); '' for the root
    parent: str  # the config whose defaults list named it
    is_self: bool  # the parent's own values (_self_)


@dataclass(frozen=True, slots=True)
class ConfigInfo:
    """What ``--info`` shows of a root config composed with some overrides."""

    search_path: tuple[tuple[str, str], ...]  # (provider, path as a URL), in search order
    groups: tuple[tuple[str, tuple[str, ...]], ...]  # (group, its options), by name
    defaults: tuple[DefaultEntry, ...]  # the root config's defaults list, in order


def sweep_jobs(config_name: str, overrides: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """The overrides of each job of the sweep ``overrides`` describe, in Hydra's order (one
    job when nothing is swept). ``glob(...)`` matches the options of ``conf/<group>/``.

    Raises:
        UserError: an override that does not parse, a sweep Hydra cannot enumerate
            (``interval(...)``), one with no value, or more than :data:`MAX_JOBS` jobs.
    """
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        parsed = _parse(overrides)
        _check_count(parsed)
        (batch,) = BasicSweeper.split_arguments(parsed, None)
    return tuple(tuple(job) for job in batch)


def _parse(overrides: Sequence[str]) -> list[Override]:
    """The overrides parsed by Hydra, with its config loader (``glob(...)`` asks it)."""
    loader = GlobalHydra.instance().config_loader()
    try:
        return OverridesParser.create(config_loader=loader).parse_overrides(list(overrides))
    except OverrideParseException as exc:
        raise UserError(parse_failure(exc)) from None


def _refuse_intervals(parsed: list[Override]) -> None:
    """An interval (``interval(0.1,0.5)``) is a range of reals: it has no values to run."""
    for override in parsed:
        if override.is_sweep_override() and not override.is_discrete_sweep():
            raise UserError(
                f"cannot sweep {override.input_line!r}: -m runs one job per value of a list "
                "(a,b), range(...), choice(...) or glob(...); an interval has no values to list"
            )


def _check_count(parsed: list[Override]) -> None:
    """Refuse a sweep with a key that has no value, or with more than :data:`MAX_JOBS` jobs,
    before listing its jobs (``range(0,10**9)`` would take minutes to list)."""
    _refuse_intervals(parsed)
    # (the override, its values) by key: a later override of a key replaces an earlier one
    counts: dict[str, tuple[str | None, int]] = {}
    for override in parsed:
        if override.is_sweep_override():
            values = itertools.islice(override.sweep_string_iterator(), MAX_JOBS + 1)
            counts[override.get_key_element()] = (override.input_line, sum(1 for _ in values))
        else:
            counts.pop(override.get_key_element(), None)
    for line, count in counts.values():
        if count == 0:
            raise UserError(f"the sweep {line!r} has no value: it would run no job")
    jobs = math.prod(count for _, count in counts.values())
    if jobs > MAX_JOBS:
        listed = " ".join(line or "" for line, _ in counts.values())
        raise UserError(
            f"the sweep {listed!r} makes more than {MAX_JOBS:,} jobs; sweep fewer values"
        )


def config_info(config_name: str, overrides: Sequence[str]) -> ConfigInfo:
    """The search path, the config groups and the defaults list of ``config_name`` with
    ``overrides`` (which must compose: each refusal is :func:`catalog.compose`'s).

    Raises:
        UserError: as :func:`catalog.compose`.
    """
    compose(config_name, overrides)  # every refusal in one line, before Hydra's loader
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        given = list(overrides)
        cfg = hydra_compose(config_name, given, return_hydra_config=True)
        loader = GlobalHydra.instance().config_loader()
        names = loader.get_group_options("", ObjectType.GROUP, config_name, given)
        groups = tuple(
            (name, tuple(loader.get_group_options(name, ObjectType.CONFIG, config_name, given)))
            for name in sorted(names)
            if name != "hydra"
        )
        listed = loader.compute_defaults_list(config_name, given, RunMode.RUN)
    sources = tuple(
        (str(s.provider), f"{s.schema}://{s.path}") for s in cfg.hydra.runtime.config_sources
    )
    defaults = tuple(
        DefaultEntry(
            config_path=entry.config_path or "",
            package=entry.package or "",
            parent=entry.parent or "",
            is_self=entry.is_self,
        )
        for entry in listed.defaults
        if not (entry.package or "").startswith("hydra")
    )
    return ConfigInfo(search_path=sources, groups=groups, defaults=defaults)
