"""The search reports the sampler's gap as ``benchmarks/bench_autotune.py`` measures it."""

from __future__ import annotations

import pytest

from autotune.catalog import priced_job_from_config
from autotune.config import AutotuneConfig
from autotune.config import load_config
from autotune.search import StopFlag
from autotune.search import search_job
from tests.benchmarks_tests._scripts import import_script

SMALL = ("model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1", "tracking.enabled=false")


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_the_search_gap_is_the_benchmarks_gap(sampler: str) -> None:
    bench = import_script("bench_autotune")
    config = load_config(
        AutotuneConfig, [*SMALL, f"search.sampler={sampler}", "search.n_trials=20"]
    )
    gap = search_job(config, priced_job_from_config(config), StopFlag()).gap
    seed = config.search.seed
    gaps, _ = bench.search_gaps(sampler, range(seed, seed + 1), 20, SMALL)
    assert gap is not None and gap.pct == pytest.approx(100 * gaps[0])
