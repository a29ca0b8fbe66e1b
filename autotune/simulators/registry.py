"""Simulators by name: the one list the commands, the configs and calibration take them from.

A simulator is registered by its line in :data:`_CLASSES`; its constants are
``conf/simulator/<name>.yaml`` (docs/architecture.md, "Adding a simulator"). Importing a
simulator's package does not import torch: the hierarchical one loads it on its first
``simulate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.simulators.analytical import AnalyticalSimulator
from autotune.simulators.base import Simulator
from autotune.simulators.errors import UserError
from autotune.simulators.hierarchical import HierarchicalSimulator

__all__ = ["SIMULATOR_NAMES", "TRACE_WRITERS", "make_simulator", "simulator_class"]

_CLASSES: dict[str, type[Simulator]] = {
    cls.name: cls
    for cls in (
        AnalyticalSimulator,
        HierarchicalSimulator,
    )
}
SIMULATOR_NAMES = tuple(_CLASSES)
# The simulators that write an event timeline as a trace (they override write_trace).
TRACE_WRITERS = tuple(
    name for name, cls in _CLASSES.items() if cls.write_trace is not Simulator.write_trace
)


def simulator_class(name: str) -> type[Simulator]:
    """The simulator class registered as ``name``.

    Raises:
        UserError: ``name`` is not registered (the message lists the names that are).
    """
    if name not in _CLASSES:
        raise UserError(f"unknown simulator {name!r}; available: {', '.join(SIMULATOR_NAMES)}")
    return _CLASSES[name]


def make_simulator(name: str, constants: Mapping[str, Any] | None = None) -> Simulator:
    """Build the simulator ``name`` from its constants (``conf/simulator/<name>.yaml``)."""
    return simulator_class(name).from_config(dict(constants or {}))
