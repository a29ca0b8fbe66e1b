"""Performance simulators for LLM training layouts and the types they speak.

The simulators know nothing of Optuna, MLflow or Hydra: they take plain specs and return a
:class:`Prediction`, so a notebook, the search and the benchmark call them the same way.
"""

from __future__ import annotations

from simulators.base import Simulator
from simulators.errors import DataFileError
from simulators.errors import LayoutError
from simulators.errors import SpecError
from simulators.errors import UserError
from simulators.layout import DEGREES
from simulators.layout import LAYOUT_FIELDS
from simulators.layout import RECOMPUTE_MODES
from simulators.layout import Layout
from simulators.prediction import BREAKDOWN_KEYS
from simulators.prediction import Prediction
from simulators.specs import ClusterSpec
from simulators.specs import DeviceSpec
from simulators.specs import LinkSpec
from simulators.specs import ModelSpec
from simulators.specs import TrainSpec

__all__ = [
    "BREAKDOWN_KEYS",
    "DEGREES",
    "LAYOUT_FIELDS",
    "RECOMPUTE_MODES",
    "ClusterSpec",
    "DataFileError",
    "DeviceSpec",
    "Layout",
    "LayoutError",
    "LinkSpec",
    "ModelSpec",
    "Prediction",
    "Simulator",
    "SpecError",
    "TrainSpec",
    "UserError",
]
