"""The terminal's table of top layouts."""

from __future__ import annotations

from autotune.report import layout_table
from simulators import Layout
from simulators import Prediction
from tests.simulators_tests._specs import analytical
from tests.simulators_tests._specs import ascend
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model

LLAMA = model("llama2_7b", num_layers=30)
CLUSTER = ascend(1)
TRAIN = make_train(seq_len=2048, global_batch_size=16)


def _ranked(*layouts: Layout) -> list[tuple[Layout, Prediction]]:
    simulator = analytical()
    return [(lay, simulator.simulate(LLAMA, CLUSTER, TRAIN, lay)) for lay in layouts]


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


def test_the_recompute_column_names_the_block_count() -> None:
    block = Layout.resolve(8, tp=2, pp=4, recompute="full", recompute_layers=2)
    row = layout_table(_ranked(block)).splitlines()[1].split()
    assert "full:2" in row
