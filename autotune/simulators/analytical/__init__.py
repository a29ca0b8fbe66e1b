"""The closed-form simulator (:class:`AnalyticalSimulator`): :mod:`.layer` prices one layer,
:mod:`.stages` a pipeline stage, :mod:`.prices` one layout, :mod:`.batch` many at once."""

from autotune.simulators.analytical.batch import BatchPrediction
from autotune.simulators.analytical.constants import AnalyticalConstants
from autotune.simulators.analytical.layer import gemm_time_s
from autotune.simulators.analytical.simulator import AnalyticalSimulator

__all__ = ["AnalyticalConstants", "AnalyticalSimulator", "BatchPrediction", "gemm_time_s"]
