"""Calibrations: ``conf/calibrations/<name>.yaml`` (or any path), read as :class:`Calibration`.

``python -m autotune.calibrate`` writes them; ``calibration=NAME`` (or a path) applies one in the
search, ``autotune.simulate`` and the benchmark.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from catalog._compose import conf_dir
from catalog._user_yaml import check_yaml_file
from simulators import UserError
from simulators.calibration import Calibration

__all__ = ["calibration_names", "calibration_path", "load_calibration"]

_SUFFIXES = (".yaml", ".yml")


def calibration_names() -> tuple[str, ...]:
    """The calibrations of ``conf/calibrations/``, sorted."""
    folder = conf_dir() / "calibrations"
    return tuple(sorted(p.stem for p in folder.glob("*.yaml"))) if folder.is_dir() else ()


def calibration_path(name_or_path: str) -> Path:
    """Where ``name_or_path`` is: a path (ends in .yaml, or holds a separator), or a name of
    ``conf/calibrations/``.

    Raises:
        UserError: no such file; the message lists the calibrations there are.
    """
    given = Path(name_or_path)
    if given.suffix in _SUFFIXES or "/" in name_or_path or given.is_file():
        if not given.is_file():
            raise UserError(f"calibration file {name_or_path!r}: no such file")
        return given
    path = conf_dir() / "calibrations" / f"{name_or_path}.yaml"
    if not path.is_file():
        names = ", ".join(calibration_names()) or "none yet"
        raise UserError(
            f"unknown calibration {name_or_path!r}; available: {names} (conf/calibrations/), or "
            "a path to a .yaml file written by python -m autotune.calibrate"
        )
    return path


def load_calibration(name_or_path: str) -> Calibration:
    """The calibration named (``conf/calibrations/<name>.yaml``) or at a path.

    Raises:
        UserError: no such calibration, or a file that is not one (what is wrong in it).
    """
    path = calibration_path(name_or_path)
    check_yaml_file(path)
    try:
        values = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except (OmegaConfBaseException, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"calibration file {path}: cannot be read: {first}") from None
    if not isinstance(values, Mapping):
        raise UserError(f"calibration file {path}: expected a mapping of keys, got {values!r}")
    return _calibration(path, values)


def _text(path: Path, values: Mapping[Any, Any], key: str, required: bool) -> str | None:
    value = values.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise UserError(f"calibration file {path}: {key} must be a name, got {value!r}")
    return value


def _calibration(path: Path, values: Mapping[Any, Any]) -> Calibration:
    simulator = _text(path, values, "simulator", required=True)
    factors = values.get("factors") or {}
    if not isinstance(factors, Mapping):
        raise UserError(f"calibration file {path}: factors must be a mapping, got {factors!r}")
    margin = values.get("memory_margin")
    if margin is not None and not (isinstance(margin, int | float) and margin >= 0):
        raise UserError(f"calibration file {path}: memory_margin must be >= 0, got {margin!r}")
    assert simulator is not None
    try:
        return Calibration(
            simulator=simulator,
            factors={str(k): v for k, v in factors.items()},
            cluster=_text(path, values, "cluster", required=False),
            framework=_text(path, values, "framework", required=False),
            memory_margin=None if margin is None else float(margin),
            name=_text(path, values, "name", required=False) or path.stem,
        )
    except UserError as exc:
        raise UserError(f"calibration file {path}: {exc}") from None
