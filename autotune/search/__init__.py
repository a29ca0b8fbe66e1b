"""The layout search: the valid space, the Optuna study, and the search job end to end."""

from __future__ import annotations

from autotune.search._job import run_search_job
from autotune.search._space import SearchSpace
from autotune.search._space import build_space
from autotune.search._study import SAMPLERS
from autotune.search._study import Evaluator
from autotune.search._study import SearchResult
from autotune.search._study import exhaustive_best
from autotune.search._study import run_search

__all__ = [
    "SAMPLERS",
    "Evaluator",
    "SearchResult",
    "SearchSpace",
    "build_space",
    "exhaustive_best",
    "run_search",
    "run_search_job",
]
