"""benchmarks/bench_memory_misses.py: the evidence of decision 0056, from the shipped runs."""

from __future__ import annotations

from autotune import catalog
from autotune.calibrate import memory_runs
from autotune.calibrate import shipped_margins
from tests.benchmarks_tests._scripts import import_script


def test_one_row_per_source_with_memory_evidence_and_the_margins_the_search_applies() -> None:
    table = import_script("bench_memory_misses")._table("analytical")
    named = memory_runs()[1]
    sources = sorted(set(named))
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ")]
    per_source = rows[1 : 1 + len(sources)]  # after the header row
    counts = {row[0].removeprefix("| ").split(" (")[0]: int(row[1]) for row in per_source}
    assert counts == {source: named.count(source) for source in sources}
    margins = shipped_margins(catalog.load_simulator("analytical"))
    for stack, margin in margins.items():
        assert f"| {stack} | {100 * margin.value:.1f}% | {margin.source} |" in table
