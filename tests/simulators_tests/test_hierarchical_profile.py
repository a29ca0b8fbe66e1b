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
    for budget in ("0", "-1", "inf", "1e300", "nan"):  # no budget is null, not infinity
        assert profile_cli.main([*args, f"budget_s={budget}"]) == 2
        said = capsys.readouterr().err
        assert "must be above 0 and at most 86,400 (a day of timing), or null to time" in said


def test_bad_device_and_bad_table_are_user_errors(tmp_path: Path) -> None:
    assert profile_cli.main(["model=llama70b", "cluster=ascend", "device=tpu"]) == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("op,shapes,dtype,device,time_us\naten.mm.default,x,bf16,cpu,fast\n")
    with pytest.raises(DataFileError, match="bad.csv, line 2, column time_us: expected micro"):
        load_cost_table(str(bad))
    with pytest.raises(DataFileError, match="no such file"):
        load_cost_table(str(tmp_path / "none.csv"))


HEADER = "op,shapes,dtype,device,time_us"
MM = 'aten.mm.default,"[8,16]float32;[16,4]float32",float32'
ADD = 'aten.add.Tensor,"[8,4]float32;[8,4]float32",float32'


def _table(tmp_path: Path, *lines: str, name: str = "ops.csv") -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


# A table and the words of its one error: every impossible or absurd cell, and the tables
# that hold no operator or two times for one.
REFUSED_TABLES = [
    ("huge", [HEADER, f"{MM},cpu,1e300"], "line 2, column time_us: expected microseconds from "),
    ("max", [HEADER, f"{MM},cpu,1.7e308"], "(a day), got '1.7e308'"),
    ("day", [HEADER, f"{MM},cpu,8.65e10"], "got '8.65e10'"),
    ("zero", [HEADER, f"{MM},cpu,0"], "0.001 (a nanosecond) to 8.64e+10 (a day), got '0'"),
    ("negative", [HEADER, f"{MM},cpu,-5"], "got '-5'"),
    ("tiny", [HEADER, f"{MM},cpu,1e-9"], "got '1e-9'"),
    ("nan", [HEADER, f"{MM},cpu,nan"], "got 'nan'"),
    ("inf", [HEADER, f"{MM},cpu,-inf"], "got '-inf'"),
    ("text", [HEADER, f"{MM},cpu,fast"], "got 'fast'"),
    ("empty time", [HEADER, f"{MM},cpu,"], "column time_us: expected microseconds"),
    ("op", [HEADER, 'mm,"[8,16]float32",float32,cpu,5'], "column op: expected an operator as "),
    ("no op", [HEADER, ',"[8,16]float32",float32,cpu,5'], "namespace.name.overload"),
    ("dtype", [HEADER, 'aten.mm.default,"[8,16]float32",bf16,cpu,5'], "got 'bf16'"),
    ("no device", [HEADER, f"{MM},,5"], "line 2, column device: expected the name of the dev"),
    ("short row", [HEADER, f"{MM},cpu,5", "aten.mm.default"], "line 3: more or fewer cells"),
    ("long row", [HEADER, f"{MM},cpu,5,6"], "line 2: more or fewer cells than the header's 5"),
    ("spans lines", [HEADER, 'aten.mm.default,"[8,16]', 'float32",float32,cpu,5'], "spans lines"),
    ("header only", [HEADER], "no rows, only the header"),
    ("blank rows", [HEADER, "", ",,,,"], "no rows, only the header"),
    ("empty file", [""], "an empty file; autotune.profile writes a header (op, shapes, dtype"),
    ("no column", ["op,shapes,dtype,device", f"{MM},cpu"], "line 1: missing column(s) time_us"),
    ("twice", [f"{HEADER},op", f"{MM},cpu,5,x"], "line 1: column(s) op named twice"),
    (
        "two devices",
        [HEADER, f"{MM},cpu,5", f"{ADD},cpu,5", f"{ADD},cuda,5"],
        "column device: one device per table (where autotune.profile timed it), got 'cpu' on "
        "lines 2-3, 'cuda' on line 4",
    ),
    (
        "timed twice",
        [HEADER, f"{MM},cpu,4.897", f"{ADD},cpu,5", f"{MM},cpu,999"],
        "ops.csv, lines 2 and 4: the same operator (op, shapes, dtype, device) timed 4.897 us "
        "and 999 us; keep one row per operator",
    ),
]


@pytest.mark.parametrize(
    ("name", "lines", "words"), REFUSED_TABLES, ids=[case[0] for case in REFUSED_TABLES]
)
def test_an_impossible_cost_table_is_refused_whole(
    tmp_path: Path, name: str, lines: list[str], words: str
) -> None:
    with pytest.raises(DataFileError) as refused:
        load_cost_table(_table(tmp_path, *lines))
    message = str(refused.value)
    assert message.startswith(f"op cost table {tmp_path / 'ops.csv'}") and words in message


def test_many_bad_rows_are_one_line_per_column_and_problem(tmp_path: Path) -> None:
    """3,400 wrong times are one line, not 3,400; scattered lines and values are capped."""
    rows = [f'aten.mm.default,"[{n},16]float32",float32,cpu,nan' for n in range(3400)]
    with pytest.raises(DataFileError) as refused:
        load_cost_table(_table(tmp_path, HEADER, *rows))
    assert str(refused.value).splitlines()[1:] == [
        "  - ops.csv, lines 2-3401, column time_us: expected microseconds from 0.001 (a "
        "nanosecond) to 8.64e+10 (a day), got 'nan'"
    ]
    good = 'aten.mm.default,"[{n},16]float32",float32,cpu,5'
    rows = [
        (good if n % 2 else 'x,"[{n},16]float32",bf16,cpu,-{n}').format(n=n) for n in range(60)
    ]
    with pytest.raises(DataFileError) as refused:
        load_cost_table(_table(tmp_path, HEADER, *rows, name="scattered.csv"))
    lines = str(refused.value).splitlines()
    assert lines[0].endswith("3 problem(s); the table was not loaded:") and len(lines) == 4
    assert lines[1] == (
        "  - scattered.csv, lines 2, 4, 6, 8, 10, 12, 14, 16 and 22 more runs, column op: "
        "expected an operator as torch names it, namespace.name.overload (e.g. aten.mm.default)"
        ", got 'x'"
    )
    assert lines[3].endswith("got '-0', '-2', '-4' and 27 other values")
    twice = [f'aten.mm.default,"[{n % 10},16]float32",float32,cpu,{n + 1}' for n in range(40)]
    with pytest.raises(DataFileError) as refused:
        load_cost_table(_table(tmp_path, HEADER, *twice, name="twice.csv"))
    lines = str(refused.value).splitlines()
    assert len(lines) == 7 and lines[1].startswith("  - twice.csv, lines 2 and 12: the same ")
    assert (
        lines[6]
        == "  - twice.csv, lines 17-41: 25 more operators timed twice with different times"
    )


def test_a_cost_table_at_the_bounds_loads(tmp_path: Path) -> None:
    """The extreme times, an exact duplicate row, an op without tensor inputs (no dtype) and
    padded cells load; the device is free text (the name torch gives it)."""
    table = load_cost_table(
        _table(
            tmp_path,
            HEADER,
            f"{MM},TPU v5e,0.001",
            f"{MM},TPU v5e,0.001",
            f"{ADD},TPU v5e,8.64e10",
            " aten.arange.default , 8 ,, TPU v5e , 3 ",
        )
    )
    assert table.device == "TPU v5e" and len(table) == 3
    assert table.seconds[("aten.arange.default", "8", "")] == pytest.approx(3e-6)
    assert table.seconds[("aten.add.Tensor", "[8,4]float32;[8,4]float32", "float32")] == 86_400


def test_a_profile_that_times_nothing_writes_no_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "none.csv"
    args = ["model=llama70b", "cluster=ascend", "parallel.tp=4", *TINY, "device=cpu"]
    assert profile_cli.main([*args, f"out={out}", "budget_s=1e-9"]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"error: timed none of the layout's {captured.out.split()[5]} operators, so {out} was "
        "not written; give a larger budget_s (or null), or a device with kernels for them"
    ]
    assert "-> not written" in captured.out and not out.exists()
