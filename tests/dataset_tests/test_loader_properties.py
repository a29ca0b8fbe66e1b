"""Whatever a CSV file holds, the loader returns rows that build specs or says what is wrong.

Rows start from a valid one (``_tables.BASE``); Hypothesis replaces some of its cells with
random text, huge, negative or non-finite numbers and empty cells, drops columns and adds extra
ones. ``load_measurements`` must then either return a table whose every row passes
``row_to_specs``, or raise ``DataFileError``: never another exception.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import event
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from autotune import dataset
from autotune.simulators import DataFileError
from tests.dataset_tests._tables import BASE

_SCHEMA = [column.name for column in dataset.COLUMNS]
_NUMBERS = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.inf, -math.inf, math.nan, 1e30, 8e9, 0, -1, 0.5, 2**63]),
)
_TEXTS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "Infinity", "-inf", "NaN", "1e400", "8.0", "true", "none"]),
)
_PLAUSIBLE = st.one_of(  # values that some column accepts, so that many files load
    st.integers(min_value=0, max_value=8),
    st.floats(min_value=0.1, max_value=100.0),
    st.sampled_from(["ok", "oom", "error", "a100", "h100", "gelu", "full", "none", "false"]),
)
_CELLS = st.one_of(_PLAUSIBLE, _NUMBERS, _TEXTS)
_CHANGES = st.dictionaries(st.sampled_from(_SCHEMA), _CELLS, max_size=3)
_EXTRAS = st.dictionaries(st.text(min_size=1, max_size=8), _CELLS, max_size=2)


def _rows(changes: list[dict[str, Any]], extras: dict[str, Any]) -> list[dict[str, Any]]:
    """BASE changed by each of ``changes``, each in its own scenario unless changed."""
    return [{**BASE, "scenario": f"s{i}", **c, **extras} for i, c in enumerate(changes)]


@pytest.mark.slow  # fuzzing
@settings(max_examples=120, deadline=None)
@given(
    changes=st.lists(_CHANGES, min_size=1, max_size=4),
    extras=_EXTRAS,
    dropped=st.lists(st.sampled_from(list(BASE)), max_size=1),
)
def test_loader_returns_rows_that_build_specs_or_refuses_the_file(
    changes: list[dict[str, Any]], extras: dict[str, Any], dropped: list[str]
) -> None:
    frame = pd.DataFrame(_rows(changes, extras)).drop(columns=dropped, errors="ignore")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "random.csv"
        frame.to_csv(path, index=False)
        try:
            table = dataset.load_measurements(path)
        except DataFileError as exc:
            assert str(exc).startswith(f"{path}: ")
            event("refused")
            return
    event("loaded")
    assert 1 <= len(table) <= len(frame)
    for row in table.to_dict("records"):
        dataset.row_to_specs(row)


@settings(max_examples=40, deadline=None)
@given(text=st.text(alphabet=st.sampled_from('ab,"\n\r\t=1'), max_size=40))
def test_any_text_loads_or_is_refused_cleanly(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "text.csv"
        path.write_text(text, encoding="utf-8")
        try:
            dataset.load_measurements(path)
        except DataFileError as exc:
            assert str(exc).startswith(f"{path}: ")


# The measured and configured figures of a row, and numbers a hostile file puts there: any
# float (infinite, NaN, subnormal), finite ones from tiny to huge, and the edges of the bounds.
_FIGURES = (
    "step_time_s",
    "tokens_per_s_per_device",
    "peak_memory_gib",
    "predicted_step_time_s",
    "device_memory_gib",
    "intra_node_gbps",
    "inter_node_gbps",
)
_FIGURE_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=1e-12, max_value=1e12),
    st.sampled_from([0.0, -0.0, 5e-324, 1e-300, 1e-3, 0.999e-3, 86_400.0, 86_401.0, 1e300]),
    st.sampled_from([16_384.0, 16_384.0 * 8, 79.0, 85.0, 0.08, 0.1]),  # near BASE's figures
    st.floats(min_value=0.5, max_value=2.0),  # plausible for all of them: many rows load
)


@pytest.mark.slow  # fuzzing
@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(
        st.dictionaries(st.sampled_from(_FIGURES), _FIGURE_VALUES, max_size=3),
        min_size=1,
        max_size=4,
    ),
    same_scenario=st.booleans(),  # then equal layouts are repeats, which must agree
)
def test_figures_load_within_their_bounds_or_each_bad_row_is_named(
    rows: list[dict[str, float]], same_scenario: bool
) -> None:
    frame = pd.DataFrame(
        [{**BASE, "scenario": "s" if same_scenario else f"s{i}", **r} for i, r in enumerate(rows)]
    )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "figures.csv"
        frame.to_csv(path, index=False)
        try:
            table = dataset.load_measurements(path)
        except DataFileError as exc:
            head, *problems = str(exc).split("\n  - ")
            assert head.startswith(f"{path}: ") and problems
            assert all(p.startswith("figures.csv, line") for p in problems)  # each names rows
            event("refused")
            return
    event("loaded")
    for row in table.to_dict("records"):
        job, _ = dataset.row_to_specs(row)
        step, tokens, peak = (_value(row, k) for k in _FIGURES[:3])
        assert math.isnan(step) or 1e-3 <= step <= 86_400
        if not (math.isnan(step) or math.isnan(tokens)):
            implied = row["global_batch_size"] * row["seq_len"] / (step * row["num_devices"])
            assert 1 / 1.1 <= tokens / implied <= 1.1
        if row["status"] == "ok" and not math.isnan(peak):
            assert peak <= job.cluster.device.memory_gib * 1.05
    # Repeats agree: rows of one scenario and layout on the same hardware (a row that
    # overrides the device's memory or a link's speed is another run)
    hardware = [
        c for c in ("device_memory_gib", "intra_node_gbps", "inter_node_gbps") if c in table
    ]
    times = table.groupby(["scenario", "tp", "dp", *hardware], dropna=False)["step_time_s"]
    assert ((times.max() / times.min()).dropna() <= 1.1).all()


def _value(row: dict[str, Any], key: str) -> float:
    value = row[key]
    return math.nan if value is None or value is pd.NA else float(value)
