"""Profiled operator costs: time a handful of ops on the CPU, then simulate with the table."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import catalog
from autotune import profile as profile_cli
from simulators import DataFileError
from simulators import Layout
from simulators import ModelSpec
from simulators.hierarchical import HierarchicalSimulator
from simulators.hierarchical import profile as core
from simulators.hierarchical.cost import COST_TABLE_COLUMNS
from simulators.hierarchical.cost import load_cost_table
from simulators.hierarchical.graph import layer_shapes
from tests.simulators_tests._specs import ascend
from tests.simulators_tests._specs import make_train

MODEL = ModelSpec(
    name="tiny",
    num_layers=2,
    hidden_size=128,
    ffn_hidden_size=256,
    num_attention_heads=4,
    num_kv_heads=2,
    head_dim=32,
    vocab_size=256,
)
TRAIN = make_train(seq_len=128, global_batch_size=16, precision="fp32")
CLUSTER = ascend(1)


def _simulator(**changes: object) -> HierarchicalSimulator:
    values = catalog.simulator_constants("hierarchical")
    return HierarchicalSimulator.from_config({**values, **changes})


def test_profiling_on_cpu_writes_a_table_the_simulator_uses(tmp_path: Path) -> None:
    layout = Layout.resolve(CLUSTER.num_devices, tp=2, pp=2)
    shapes = layer_shapes(MODEL, layout, TRAIN).values()
    rows = core.profile_shapes(shapes, core.resolve_device("cpu"), repeats=1, limit=6)
    assert 0 < len(rows) <= 6
    path = core.write_table(rows, tmp_path / "ops.csv")
    with path.open() as handle:
        read = list(csv.DictReader(handle))
    assert tuple(read[0]) == COST_TABLE_COLUMNS
    assert {row["device"] for row in read} == {"cpu"}
    assert all(float(row["time_us"]) >= 0 for row in read)

    # Without the host-dispatch floor, which can hide the op costs of a model this small.
    roofline = _simulator(host_op_overhead_us=0.0).simulate(MODEL, CLUSTER, TRAIN, layout)
    profiled = _simulator(host_op_overhead_us=0.0, op_costs=str(path)).simulate(
        MODEL, CLUSTER, TRAIN, layout
    )
    assert profiled.detail["profiled_op_fraction"] > 0
    assert profiled.step_time_s != roofline.step_time_s


def test_profile_cli_writes_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli.csv"
    tiny = [
        "model.num_layers=2",
        "model.hidden_size=128",
        "model.ffn_hidden_size=256",
        "model.num_attention_heads=4",
        "model.num_kv_heads=4",
        "model.head_dim=32",
        "model.vocab_size=256",
        "train.seq_len=64",
        "train.global_batch_size=64",
        "train.precision=fp32",
    ]
    code = profile_cli.main(
        [
            "model=llama70b",
            "cluster=ascend",
            "parallel.tp=4",
            *tiny,
            f"out={out}",
            "device=cpu",
            "repeats=1",
            "limit=3",
        ]
    )
    assert code == 0
    assert len(load_cost_table(str(out))) == 3
    assert "simulator.op_costs=" in capsys.readouterr().out


def test_bad_device_and_bad_table_are_user_errors(tmp_path: Path) -> None:
    assert profile_cli.main(["model=llama70b", "cluster=ascend", "device=tpu"]) == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("op,shapes,dtype,device,time_us\naten.mm.default,x,bf16,cpu,fast\n")
    with pytest.raises(DataFileError, match="row 2, column time_us"):
        load_cost_table(str(bad))
    with pytest.raises(DataFileError, match="no such file"):
        load_cost_table(str(tmp_path / "none.csv"))
