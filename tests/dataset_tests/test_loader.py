"""The loader returns a valid file whole, parsed and with defaults, or refuses it whole."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import dataset
from simulators import DataFileError
from tests.dataset_tests._tables import BASE
from tests.dataset_tests._tables import write


def test_valid_file_loads_with_defaults(tmp_path: Path) -> None:
    path = write(tmp_path / "ok.csv", {}, {"tp": 1, "dp": 8, "status": "oom", "step_time_s": None})
    table = dataset.load_measurements(path)
    assert len(table) == 2
    first, second = table.iloc[0], table.iloc[1]
    assert first["vpp"] == 1 and first["precision"] == "bf16"
    assert bool(first["distributed_optimizer"]) is True
    assert bool(first["sequence_parallel"]) is True  # default: tp > 1
    assert bool(second["sequence_parallel"]) is False
    assert pd.isna(second["step_time_s"]) and second["status"] == "oom"
    assert first["activation"] == "swiglu" and first["num_experts"] == 0


def test_extra_columns_are_kept(tmp_path: Path) -> None:
    table = dataset.load_measurements(write(tmp_path / "x.csv", {"my_note": "hello"}))
    assert table.loc[0, "my_note"] == "hello"


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path / "bad.csv",
        {"cluster": "nowhere"},  # line 2
        {"dp": 2},  # line 3: 2*8 != 8
        {"step_time_s": -1.5},  # line 4
        {"step_time_s": None},  # line 5: ok without a time
        {"tp": "eight", "recompute": "some"},  # line 6
    )
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    message = str(caught.value)
    assert "bad.csv, line 6, column tp: expected an integer >= 1, got 'eight'" in message
    assert "line 6, column recompute: expected one of none, selective, full" in message
    assert "line 4, column step_time_s: expected a number > 0, got '-1.5'" in message
    # the rules across columns run on every row whose own cells parse, in the same pass
    assert "6 problem(s)" in message
    assert "line 2, column cluster: expected one of" in message and "'nowhere'" in message
    assert "a100" in message  # the allowed names are listed
    assert "line 3, column dp,tp,pp,cp" in message and "= 16" in message
    assert "line 5, column step_time_s: required when status is ok" in message


def test_missing_columns_and_bad_cells_are_listed_together(tmp_path: Path) -> None:
    path = tmp_path / "both.csv"
    rows = [{k: v for k, v in BASE.items() if k != "vocab_size"} for _ in range(2)]
    rows[1]["step_time_s"] = -2
    pd.DataFrame(rows).to_csv(path, index=False)
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    message = str(caught.value)
    assert "missing required column(s): vocab_size" in message
    assert "line 3, column step_time_s: expected a number > 0, got '-2.0'" in message


def test_missing_architecture_columns(tmp_path: Path) -> None:
    path = tmp_path / "arch.csv"
    row = {k: v for k, v in BASE.items() if k not in ("num_kv_heads", "vocab_size")}
    pd.DataFrame([row]).to_csv(path, index=False)
    with pytest.raises(DataFileError, match="missing required column.*num_kv_heads, vocab_size"):
        dataset.load_measurements(path)


def test_spec_errors_name_the_row(tmp_path: Path) -> None:
    path = write(tmp_path / "kv.csv", {}, {"num_kv_heads": 3})
    with pytest.raises(DataFileError, match=r"line 3, column model/layout: .*num_kv_heads=3"):
        dataset.load_measurements(path)


def test_parquet_reads_like_csv(tmp_path: Path) -> None:
    csv = write(tmp_path / "t.csv", {}, {"tp": 4, "dp": 2})
    parquet = tmp_path / "t.parquet"
    pd.read_csv(csv).to_parquet(parquet)
    from_csv, from_parquet = dataset.load_measurements(csv), dataset.load_measurements(parquet)
    pd.testing.assert_frame_equal(from_csv, from_parquet)


def test_not_a_table(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("hello")
    with pytest.raises(DataFileError, match=r"expected a \.csv or \.parquet file"):
        dataset.load_measurements(path)
    with pytest.raises(DataFileError, match="no such file"):
        dataset.load_measurements(tmp_path / "missing.csv")


def test_row_to_specs_applies_overrides_and_small_jobs(tmp_path: Path) -> None:
    path = write(
        tmp_path / "o.csv",
        {"num_devices": 2, "tp": 2, "device_memory_gib": 16, "inter_node_gbps": 1.5},
        {"num_devices": 64, "dp": 8, "intra_node_gbps": 100},
    )
    small, big = dataset.load_measurements(path).to_dict("records")
    model, cluster, train, layout = dataset.row_to_specs(small)
    assert (cluster.devices_per_node, cluster.num_nodes) == (2, 1)
    assert cluster.device.memory_gib == 16 and cluster.inter_node.bandwidth_gbps == 1.5
    assert model.head_dim == 1024 // 16 and train.global_batch_size == 64
    assert (layout.tp, layout.sequence_parallel) == (2, True)
    _, cluster, _, layout = dataset.row_to_specs(big)
    assert (cluster.devices_per_node, cluster.num_nodes) == (8, 8)
    assert cluster.intra_node.bandwidth_gbps == 100
    assert layout.world_size == cluster.num_devices


# The NVIDIA performance tables publish runs whose pipeline stages hold uneven layer counts
# (Megatron's pipeline layouts and embedding/loss accounting); the layout rules do not model
# uneven splits yet (dataset/data/NOTICE.md), so that one rule may fail on those sources only.
_UNEVEN_SPLIT = re.compile(r"^pp=\d+ does not divide num_layers=\d+$")
_UNEVEN_SOURCES = ("megatron_bridge", "dgxc")


def test_shipped_data_loads_and_breaks_no_layout_rule() -> None:
    table = dataset.load_public()
    assert set(table["source"]) == set(dataset.public_sources())
    for row in table.to_dict("records"):
        model, cluster, train, layout = dataset.row_to_specs(row)
        broken = layout.violations(model, cluster, train)
        if row["source"] in _UNEVEN_SOURCES:
            broken = [v for v in broken if not _UNEVEN_SPLIT.match(v)]
        assert broken == [], row["source_ref"]
