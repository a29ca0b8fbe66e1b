"""The expert-agreement benchmark places each shipped config among the searched layouts."""

from __future__ import annotations

import pytest

from tests.benchmarks_tests._scripts import import_script


@pytest.mark.slow
def test_two_jobs_of_one_source_rank_and_speed_up_sanely() -> None:
    bench = import_script("bench_expert_agreement")
    results = bench.run(["megatron_bridge"], limit=2)
    assert len(results) == 2
    for a in results:
        assert a.source == "megatron_bridge"
        assert 1 <= a.rank <= a.priced
        assert a.priced >= 1 and a.valid >= 0
        assert a.speedup > 0 and (a.rank > 1 or a.speedup == 1.0)
        assert 0.0 <= a.percentile <= 100.0
        assert not (a.over_device and a.shipped_fits)  # over the device is a false OOM
    assert "| **all** | 2 |" in bench.report(results, bench.SAMPLE)
