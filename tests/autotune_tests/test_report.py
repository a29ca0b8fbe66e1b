"""The terminal's table of top layouts."""

from __future__ import annotations

import pytest

from autotune.report import layout_table
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import Prediction
from autotune.simulators.calibrated import calibrated
from autotune.simulators.calibration import Calibration
from tests.simulators_tests._specs import analytical
from tests.simulators_tests._specs import ascend
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model

LLAMA = model("llama2_7b", num_layers=30)
CLUSTER = ascend(1)
TRAIN = make_train(seq_len=2048, global_batch_size=16)
JOB = Job(model=LLAMA, cluster=CLUSTER, train=TRAIN)


def _ranked(*layouts: Layout) -> list[tuple[Layout, Prediction]]:
    simulator = analytical()
    return [(lay, simulator.simulate(JOB, lay)) for lay in layouts]


def test_the_split_column_tells_apart_layouts_that_differ_only_in_their_split() -> None:
    default = Layout.resolve(8, tp=2, pp=4)  # 30 layers: 7/8/8/7
    light = Layout.resolve(8, tp=2, pp=4, layer_split=(6, 8, 8, 8))
    lines = layout_table(_ranked(default, light)).splitlines()
    assert "split" in lines[0].split()
    assert lines[1].split()[7] == "default"
    assert lines[2].split()[7] == "6/8x3"  # runs of equal stages folded
    # Without an explicit split among the rows there is no column.
    plain = layout_table(_ranked(default, Layout.resolve(8, tp=4, pp=2)))
    assert "split" not in plain.splitlines()[0].split()


def test_the_etp_column_appears_when_a_layout_gives_its_experts_their_own_tp() -> None:
    mixtral = model("mixtral_8x7b")
    simulator = analytical()
    folded = Layout.resolve(8, tp=2, ep=4, etp=1, sequence_parallel=True)
    shared = Layout.resolve(8, tp=2, ep=4, sequence_parallel=True)
    ranked = [
        (lay, simulator.simulate(Job(model=mixtral, cluster=CLUSTER, train=TRAIN), lay))
        for lay in (folded, shared)
    ]
    lines = layout_table(ranked).splitlines()
    column = lines[0].split().index("etp")
    assert [line.split()[column] for line in lines[1:]] == ["1", "2"]  # None reads as TP
    assert "etp" not in layout_table(ranked[1:]).splitlines()[0].split()


def test_the_zero_column_appears_when_a_layout_shards_beyond_the_optimizer() -> None:
    llama = model("llama2_7b")
    simulator = analytical()
    train = make_train("megatron_core", seq_len=4096, global_batch_size=64)
    layouts = [
        Layout.resolve(8, tp=2, zero_stage=3),
        Layout.resolve(8, tp=2, dp_replicate=2),
        Layout.resolve(8, tp=2),
    ]
    job = Job(model=llama, cluster=CLUSTER, train=train)
    ranked = [(lay, simulator.simulate(job, lay)) for lay in layouts]
    lines = layout_table(ranked).splitlines()
    column = lines[0].split().index("zero")
    assert [line.split()[column] for line in lines[1:]] == ["3", "1x2", "1"]
    assert "zero" not in layout_table(ranked[2:]).splitlines()[0].split()


def test_the_recompute_column_names_the_block_count_and_the_modules() -> None:
    block = Layout.resolve(8, tp=2, pp=4, recompute="full", recompute_layers=2)
    row = layout_table(_ranked(block)).splitlines()[1].split()
    assert "full:2" in row
    named = Layout.resolve(8, tp=2, pp=4, recompute="selective", recompute_modules=("mlp",))
    plain = Layout.resolve(8, tp=2, pp=4, recompute="selective")
    rows = layout_table(_ranked(named, plain)).splitlines()
    assert "selective:mlp" in rows[1].split() and "selective" in rows[2].split()


def test_memory_is_shown_against_the_device_with_the_margin_beside_it() -> None:
    layout = Layout.resolve(8, tp=2, pp=4)
    base = analytical()
    plain = base.simulate(JOB, layout)
    margined = calibrated(base, Calibration(simulator="analytical"), memory_margin=0.25)
    pred = margined.simulate(JOB, layout)
    device = CLUSTER.device.memory_gib
    assert pred.device_memory_gib == pytest.approx(device)
    assert pred.memory_with_margin_gib == pytest.approx(1.25 * plain.memory_gib)
    header, row = layout_table([(layout, pred)]).splitlines()
    assert header.split()[-3:] == ["mem", "GiB", "+margin"]
    assert row.split()[-2:] == [
        f"{plain.memory_gib:.1f}/{device:.0f}",
        f"{1.25 * plain.memory_gib:.1f}",
    ]
    # Without a margin there is no margin column.
    header, row = layout_table([(layout, plain)]).splitlines()
    assert header.split()[-2:] == ["mem", "GiB"]
    assert row.split()[-1] == f"{plain.memory_gib:.1f}/{device:.0f}"
