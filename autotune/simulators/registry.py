"""Simulators by name, for the command line and the benchmark."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from autotune.simulators.base import Simulator
from autotune.simulators.errors import UserError

__all__ = ["SIMULATOR_NAMES", "make_simulator"]

# name -> "module:Class"; imported on first use, so torch loads only for `hierarchical`.
_CLASSES = {
    "analytical": "autotune.simulators.analytical:AnalyticalSimulator",
    "hierarchical": "autotune.simulators.hierarchical:HierarchicalSimulator",
}
SIMULATOR_NAMES = tuple(_CLASSES)


def make_simulator(name: str, constants: Mapping[str, Any] | None = None) -> Simulator:
    """Build the simulator ``name`` from its constants (``conf/simulator/<name>.yaml``).

    Every simulator class offers ``from_config(constants: Mapping[str, Any])``.
    """
    if name not in _CLASSES:
        raise UserError(f"unknown simulator {name!r}; available: {', '.join(SIMULATOR_NAMES)}")
    module_name, class_name = _CLASSES[name].split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls.from_config(dict(constants or {}))
