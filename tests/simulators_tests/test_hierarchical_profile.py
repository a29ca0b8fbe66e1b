"""Profiled operator costs: time a handful of ops on the CPU, then simulate with the table."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from autotune import catalog
from autotune import profile as profile_cli
from autotune.simulators import DataFileError
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import ModelSpec
from autotune.simulators.hierarchical import HierarchicalSimulator
from autotune.simulators.hierarchical import profile as core
from autotune.simulators.hierarchical.cost import COST_TABLE_COLUMNS
from autotune.simulators.hierarchical.cost import load_cost_table
from autotune.simulators.hierarchical.graph import LayerShape
from autotune.simulators.hierarchical.graph import Op
from autotune.simulators.hierarchical.graph import layer_shapes
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
JOB = Job(model=MODEL, cluster=CLUSTER, train=TRAIN)


def _simulator(**changes: object) -> HierarchicalSimulator:
    values = catalog.simulator_constants("hierarchical")
    return HierarchicalSimulator.from_config({**values, **changes})


def test_profiling_on_cpu_writes_a_table_the_simulator_uses(tmp_path: Path) -> None:
    layout = Layout.resolve(CLUSTER.num_devices, tp=2, pp=2)
    shapes = layer_shapes(JOB, layout).values()
    result = core.profile_shapes(shapes, core.resolve_device("cpu"), repeats=1, limit=6)
    assert 0 < len(result.rows) <= 6 and result.device == "cpu"
    assert result.left_out == result.operators - 6
    path = core.write_table(result.rows, tmp_path / "ops.csv")
    with path.open() as handle:
        read = list(csv.DictReader(handle))
    assert tuple(read[0]) == COST_TABLE_COLUMNS
    assert {row["device"] for row in read} == {"cpu"}
    assert all(float(row["time_us"]) >= 0 for row in read)

    # Without the host-dispatch floor, which can hide the op costs of a model this small.
    roofline = _simulator(host_op_overhead_us=0.0).simulate(JOB, layout)
    profiled = _simulator(host_op_overhead_us=0.0, op_costs=str(path)).simulate(JOB, layout)
    assert profiled.detail["profiled_op_fraction"] > 0
    assert profiled.step_time_s != roofline.step_time_s


def test_the_budget_times_the_cheapest_operators_and_reports_progress() -> None:
    layout = Layout.resolve(CLUSTER.num_devices, tp=2, pp=2)
    shapes = list(layer_shapes(JOB, layout).values())
    calls: list[tuple[int, int, float]] = []
    full = core.profile_shapes(shapes, "cpu", repeats=1, progress=lambda *a: calls.append(a))
    assert full.left_out == 0 and len(full.rows) + full.no_kernel == full.operators
    assert [done for done, _, _ in calls] == list(range(1, full.operators + 1))
    assert {total for _, total, _ in calls} == {full.operators} and calls[-1][2] == 0
    none = core.profile_shapes(shapes, "cpu", repeats=1, budget_s=1e-9)
    assert none.rows == [] and none.left_out == none.operators and none.left_out_s > 0
    # Cheapest first: what a short budget keeps is what the whole run timed fastest.
    some = core.profile_shapes(shapes, "cpu", repeats=1, limit=5)
    flops = {(op.name, op.signature): op.flops for op in _ops(shapes)}
    kept = [flops[(row["op"], row["shapes"])] for row in some.rows]
    assert max(kept) < max(flops.values())


def _ops(shapes: list[LayerShape]) -> list[Op]:
    from autotune.simulators.hierarchical.compile import compile_layer

    return [op for s in shapes for g in [compile_layer(s)] for op in g.forward + g.backward]


TINY = [
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


def test_profile_cli_writes_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli.csv"
    tiny = TINY
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
    captured = capsys.readouterr()
    assert "simulator.op_costs=" in captured.out
    assert (
        "timed 3 of the layout's " in captured.out and " left out by the limit" not in captured.out
    )
    assert "warning: timed on cpu, not on the cluster's Ascend 910B2" in captured.err


def test_profile_cli_json_help_and_bad_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["model=llama70b", "cluster=ascend", "parallel.tp=4", *TINY, "device=cpu"]
    out = tmp_path / "ops.csv"
    assert profile_cli.main([*args, f"out={out}", "repeats=1", "output=json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["timed"] + payload["no_kernel"] + payload["left_out"] == payload["operators"]
    assert payload["table"] == str(out) and payload["device"] == "cpu"
    assert profile_cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: python -m autotune.profile ") and "budget_s" in text
    assert profile_cli.main([*args, "budget_s=0"]) == 2
    assert "budget_s=0.0 must be > 0" in capsys.readouterr().err


def test_bad_device_and_bad_table_are_user_errors(tmp_path: Path) -> None:
    assert profile_cli.main(["model=llama70b", "cluster=ascend", "device=tpu"]) == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("op,shapes,dtype,device,time_us\naten.mm.default,x,bf16,cpu,fast\n")
    with pytest.raises(DataFileError, match="row 2, column time_us"):
        load_cost_table(str(bad))
    with pytest.raises(DataFileError, match="no such file"):
        load_cost_table(str(tmp_path / "none.csv"))
