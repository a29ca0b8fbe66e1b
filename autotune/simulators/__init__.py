"""Performance simulators for LLM training layouts and the types they speak.

The simulators know nothing of Optuna, MLflow or Hydra: they take plain specs (a :class:`Job`
and a :class:`Layout`) and return a :class:`Prediction`, so a notebook, the search and the
benchmark call them the same way.
"""

from __future__ import annotations

from autotune.simulators.base import Simulator
from autotune.simulators.errors import DataFileError
from autotune.simulators.errors import LayoutError
from autotune.simulators.errors import SpecError
from autotune.simulators.errors import UserError
from autotune.simulators.job import Job
from autotune.simulators.layout import DEGREES
from autotune.simulators.layout import LAYOUT_FIELDS
from autotune.simulators.layout import RECOMPUTE_MODES
from autotune.simulators.layout import Layout
from autotune.simulators.prediction import BREAKDOWN_KEYS
from autotune.simulators.prediction import Prediction
from autotune.simulators.specs import ClusterSpec
from autotune.simulators.specs import DeviceSpec
from autotune.simulators.specs import LinkSpec
from autotune.simulators.specs import ModelSpec
from autotune.simulators.specs import TrainSpec

__all__ = [
    "BREAKDOWN_KEYS",
    "DEGREES",
    "LAYOUT_FIELDS",
    "RECOMPUTE_MODES",
    "ClusterSpec",
    "DataFileError",
    "DeviceSpec",
    "Job",
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
