"""benchmarks/bench_residual_model.py: the evidence of decision 0057, from the shipped rows."""

from __future__ import annotations

import numpy as np
import pytest

from autotune import catalog
from autotune.calibrate import shipped_residuals
from tests.benchmarks_tests._scripts import import_script


def _rows(text: str) -> list[list[str]]:
    return [
        [cell.strip(" *") for cell in line.split("|")[1:-1]]
        for line in text.splitlines()
        if line.startswith("| ")
    ]


def test_one_row_per_source_in_both_tables_and_the_mean_of_the_held_out_ones() -> None:
    text = import_script("bench_residual_model")._table("analytical")
    every = shipped_residuals(catalog.load_simulator("analytical"))
    whole, held_out = text.split("## On a source it was not estimated on")
    spread = _rows(whole)[1:]
    assert [row[0] for row in spread] == sorted(set(every.sources))
    assert all(float(row[2]) <= float(row[3]) for row in spread)  # median <= maximum
    rows = _rows(held_out)
    per_source = rows[1:-1]  # after the header row, before the mean
    assert [row[0] for row in per_source] == sorted(set(every.sources))
    for source, jobs, layouts, *_ in per_source:
        mine = every.sources == source
        assert (int(jobs), int(layouts)) == (
            len({j for j, m in zip(every.jobs, mine, strict=True) if m}),
            mine.sum(),
        )
    gaussian = [float(row[3]) for row in per_source]
    student = [float(row[4]) for row in per_source]
    host = [float(row[6]) for row in per_source]
    mean = rows[-1]
    assert float(mean[3]) == pytest.approx(np.mean(gaussian), abs=0.01)
    assert float(mean[4]) == pytest.approx(np.mean(student), abs=0.01)
    assert float(mean[6]) == pytest.approx(np.mean(host), abs=0.01)
