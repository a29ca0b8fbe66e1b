"""The layout search: the valid space, pricing, the Optuna study, and the search job."""

from __future__ import annotations

from autotune.search._job import MODES
from autotune.search._job import run_search_job
from autotune.search._job import search_job
from autotune.search._job import search_outputs
from autotune.search._outcome import Outcome
from autotune.search._outcome import ranked
from autotune.search._price import Evaluator
from autotune.search._space import SearchSpace
from autotune.search._space import build_space
from autotune.search._study import SAMPLERS
from autotune.search._study import StopFlag
from autotune.search._study import open_study
from autotune.search._study import optimize

__all__ = [
    "MODES",
    "SAMPLERS",
    "Evaluator",
    "Outcome",
    "SearchSpace",
    "StopFlag",
    "build_space",
    "open_study",
    "optimize",
    "ranked",
    "run_search_job",
    "search_job",
    "search_outputs",
]
