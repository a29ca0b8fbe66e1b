"""The contract every registered simulator keeps, run on each of them (Optuna's way)."""

from __future__ import annotations

import pytest

import catalog
from simulators import BREAKDOWN_KEYS
from simulators import Layout
from simulators import Simulator
from simulators import TrainSpec
from simulators.registry import SIMULATOR_NAMES
from tests.simulators_tests._specs import ascend
from tests.simulators_tests._specs import model

MODEL = model("llama2_7b", num_layers=8)  # 8 layers keep the hierarchical compile short
CLUSTER = ascend(2)  # 16 NPUs
TRAIN = TrainSpec(seq_len=2048, global_batch_size=32)
LAYOUTS = [
    Layout.resolve(16, tp=1),
    Layout.resolve(16, tp=2, pp=2),
    Layout.resolve(16, tp=4, pp=2, vpp=2, recompute="full"),
    Layout.resolve(16, tp=2, cp=2, micro_batch=2, recompute="selective"),
    Layout.resolve(16, pp=4, distributed_optimizer=False),
]


@pytest.fixture(scope="module", params=SIMULATOR_NAMES)
def simulator(request: pytest.FixtureRequest) -> Simulator:
    return catalog.load_simulator(request.param)


def test_layouts_are_valid() -> None:
    for layout in LAYOUTS:
        assert not layout.violations(MODEL, CLUSTER, TRAIN)


@pytest.mark.parametrize("layout", LAYOUTS, ids=Layout.describe)
def test_prediction_is_consistent(simulator: Simulator, layout: Layout) -> None:
    prediction = simulator.simulate(MODEL, CLUSTER, TRAIN, layout)
    assert prediction.step_time_s > 0
    assert set(prediction.breakdown) == set(BREAKDOWN_KEYS)
    assert all(value >= 0 for value in prediction.breakdown.values())
    assert sum(prediction.breakdown.values()) == pytest.approx(prediction.step_time_s)
    assert sum(prediction.memory_breakdown_gib.values()) == pytest.approx(prediction.memory_gib)
    assert prediction.fits == (prediction.memory_gib <= CLUSTER.device.memory_gib)
    tokens = TRAIN.tokens_per_step / prediction.step_time_s / 16
    assert prediction.tokens_per_s_per_device == pytest.approx(tokens)
    assert 0 < prediction.mfu < 1
    assert simulator.simulate(MODEL, CLUSTER, TRAIN, layout) == prediction  # deterministic


@pytest.mark.parametrize("degree", ["tp", "pp"])
def test_memory_never_rises_with_tp_or_pp(simulator: Simulator, degree: str) -> None:
    memory = [
        simulator.simulate(MODEL, CLUSTER, TRAIN, Layout.resolve(16, **{degree: n})).memory_gib
        for n in (1, 2, 4, 8)
    ]
    assert memory == sorted(memory, reverse=True)


def test_more_recompute_never_raises_memory(simulator: Simulator) -> None:
    memory = [
        simulator.simulate(
            MODEL, CLUSTER, TRAIN, Layout.resolve(16, tp=2, pp=2, recompute=mode)
        ).memory_gib
        for mode in ("none", "selective", "full")
    ]
    assert memory == sorted(memory, reverse=True)
