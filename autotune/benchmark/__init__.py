"""The regret benchmark: score simulators by the measured time of the layouts they pick."""

from __future__ import annotations

from autotune.benchmark._rankers import HeuristicRule
from autotune.benchmark._rankers import Ranking
from autotune.benchmark._report import markdown_table
from autotune.benchmark._run import run
from autotune.benchmark._run import run_benchmark
from autotune.benchmark._run import simulators_of
from autotune.benchmark._score import BenchmarkResult
from autotune.benchmark._score import ScoreSettings

__all__ = [
    "BenchmarkResult",
    "HeuristicRule",
    "Ranking",
    "ScoreSettings",
    "markdown_table",
    "run",
    "run_benchmark",
    "simulators_of",
]
