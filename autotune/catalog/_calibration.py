"""Calibrations: ``calibrations/<name>.yaml`` of the working directory (or any path), read as
:class:`Calibration`.

``python -m autotune.calibrate name=NAME`` writes them; ``calibration=`` applies one in the
search, ``autotune.simulate`` and the benchmark. What it is given is a path when it holds a
``/`` or ends in ``.yaml`` / ``.yml`` (``./mine.yaml``, ``/abs/mine.yaml``), and otherwise a
name, which follows the rule of names (``autotune.simulators.names``) and is only ever looked
up in ``calibrations/``: a name cannot point outside that folder. Like ``./mlruns`` and
``launch/``, the folder is the user's, in the working directory, never inside the installed
package.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from autotune.catalog._user_yaml import check_yaml_file
from autotune.simulators import UserError
from autotune.simulators.calibration import Calibration
from autotune.simulators.files import not_a_file
from autotune.simulators.names import check_name
from autotune.simulators.names import one_line
from autotune.simulators.registry import SIMULATOR_NAMES

__all__ = [
    "CALIBRATIONS",
    "calibration_file",
    "calibration_names",
    "calibration_path",
    "check_calibration",
    "check_calibration_name",
    "is_calibration_path",
    "load_calibration",
]

_SUFFIXES = (".yaml", ".yml")
CALIBRATIONS = Path("calibrations")  # relative: the working directory's, where a user runs


def calibration_file(name: str) -> Path:
    """Where the calibration ``name`` is written and read: ``calibrations/<name>.yaml``."""
    return CALIBRATIONS / f"{name}.yaml"


def calibration_names() -> tuple[str, ...]:
    """The calibrations of ``calibrations/``, sorted."""
    folder = CALIBRATIONS
    return tuple(sorted(p.stem for p in folder.glob("*.yaml"))) if folder.is_dir() else ()


def is_calibration_path(given: str) -> bool:
    """Whether ``calibration=given`` is a path (it holds a ``/`` or ends in .yaml or .yml)
    rather than a name of ``calibrations/``."""
    return "/" in given or given.endswith(_SUFFIXES)


def check_calibration(key: str, given: str) -> None:
    """Refuse ``calibration=given`` that is neither a path (:func:`is_calibration_path`) nor a
    name; whether the file exists is asked when it is read.

    Raises:
        UserError: naming ``key``, the value and what a name may hold.
    """
    if not is_calibration_path(given):
        check_name(key, given)


def check_calibration_name(key: str, name: str) -> None:
    """Refuse a name that ``calibrate name=`` could not write as ``calibrations/<name>.yaml``
    and ``calibration=<name>`` read back: not a name, or one that reads as a path.

    Raises:
        UserError: naming ``key``, the value and what is allowed.
    """
    check_name(key, name)
    if is_calibration_path(name):
        raise UserError(
            f"{key}={name!r} ends in {Path(name).suffix}, so calibration={name} would read "
            f"the file ./{name}; give the name without it"
        )


def calibration_path(name_or_path: str, key: str = "calibration") -> Path:
    """Where ``name_or_path`` is: a path (:func:`is_calibration_path`) as given, or a name of
    ``calibrations/``.

    Raises:
        UserError: not a name, or no such file; the message lists the calibrations there are.
    """
    check_calibration(key, name_or_path)
    if is_calibration_path(name_or_path):
        given = Path(name_or_path)
        why = not_a_file(given)
        if why is not None:
            raise UserError(f"{key}={name_or_path!r}: {why}; give a calibration's .yaml file")
        return given
    path = calibration_file(name_or_path)
    if not path.is_file():
        names = ", ".join(calibration_names()) or "none yet"
        raise UserError(
            f"unknown calibration {name_or_path!r}; available: {names} (in ./calibrations/), "
            "or a path to a .yaml file written by python -m autotune.calibrate (./NAME.yaml)"
        )
    return path


def load_calibration(name_or_path: str) -> Calibration:
    """The calibration named (``calibrations/<name>.yaml``) or at a path.

    Raises:
        UserError: no such calibration, or a file that is not one (what is wrong in it).
    """
    path = calibration_path(name_or_path)
    check_yaml_file(path)
    where = f"calibration file {one_line(str(path))}"
    try:
        values = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except (OmegaConfBaseException, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{where}: cannot be read: {first}") from None
    if not isinstance(values, Mapping):
        raise UserError(f"{where}: expected a mapping of keys, got {values!r}")
    return _calibration(where, path, values)


def _name(where: str, values: Mapping[Any, Any], key: str) -> str | None:
    """The name the file holds under ``key`` (autotune/simulators/names.py), None when it has
    none."""
    value = values.get(key)
    if value is None:
        return None
    check_name(f"{where}: {key}", value)
    return str(value)


# What a calibration file holds: the keys read, and those the calibrate command writes as a
# record of the fit (what the factors set on the cluster, the intervals, the rows), not read.
_READ_KEYS = ("simulator", "name", "cluster", "framework", "factors", "memory_margin", "layouts")
_RECORD_KEYS = ("intervals", "overrides", "fit", "rows")


def _calibration(where: str, path: Path, values: Mapping[Any, Any]) -> Calibration:
    """The calibration of a file's ``values``; its name is the file's own when it has none."""
    unknown = [str(key) for key in values if key not in (*_READ_KEYS, *_RECORD_KEYS)]
    if unknown:
        raise UserError(
            f"{where}: unknown key(s) {', '.join(map(repr, map(one_line, unknown)))}; a "
            f"calibration holds {', '.join(_READ_KEYS)}, and the record of its fit "
            f"({', '.join(_RECORD_KEYS)}: written by python -m autotune.calibrate, not read)"
        )
    simulator = _name(where, values, "simulator")
    if simulator is None:
        raise UserError(f"{where}: simulator is missing; give the simulator it calibrates")
    if simulator not in SIMULATOR_NAMES:
        raise UserError(
            f"{where}: simulator {simulator!r} is unknown; available: {', '.join(SIMULATOR_NAMES)}"
        )
    names = {key: _name(where, values, key) for key in ("cluster", "framework", "name")}
    if names["name"] is None:
        check_name(f"{where}: name (the file's)", path.stem)
    factors = values.get("factors") or {}
    if not isinstance(factors, Mapping):
        raise UserError(f"{where}: factors must be a mapping, got {factors!r}")
    layouts = values.get("layouts") or {}
    if not isinstance(layouts, Mapping):
        raise UserError(
            f"{where}: layouts must map job keys to mappings of layouts to log factors, got "
            f"{layouts!r}"
        )
    try:
        return Calibration(
            simulator=simulator,
            factors={str(k): v for k, v in factors.items()},
            cluster=names["cluster"],
            framework=names["framework"],
            memory_margin=values.get("memory_margin"),  # its range: Calibration's
            name=names["name"] or path.stem,
            layouts={str(k): v for k, v in layouts.items()},  # their form: Calibration's
        )
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None
