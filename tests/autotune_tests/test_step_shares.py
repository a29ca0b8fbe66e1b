"""The share of a layout's step that a constant of the simulator sets
(:mod:`autotune.calibrate._shares`), read on shipped rows: vTrain's small GPT layers on one
node run at the host's pace and wait on no link between nodes; GPT-3 175B on 512 GPUs runs
at the device's pace and waits on the links between nodes."""

from __future__ import annotations

import numpy as np
import pytest

from autotune import catalog
from autotune import dataset
from autotune.calibrate._shares import SHARE_FACTORS
from autotune.calibrate._shares import step_shares
from autotune.simulators.calibrated import calibrated
from autotune.simulators.calibration import Calibration

HOST, INTER = (SHARE_FACTORS.index(name) for name in ("host_overhead", "inter_node_efficiency"))
SMALL = "vtrain_single|GPT h1024 L16 a16|gpus4|gbs32|seq1024"
LARGE = "vtrain_multi|GPT-175B (GPT h12288 L96 a96)|gpus512|gbs1536|seq2048"


def _specs(scenario: str) -> list:
    priceable = dataset.priceable_rows(dataset.load_public())
    rows = np.flatnonzero((priceable.table["scenario"] == scenario).to_numpy())
    return [priceable.specs[i] for i in rows if priceable.specs[i] is not None]


@pytest.mark.parametrize("name", ["analytical", "hierarchical"])
def test_small_layers_are_host_paced_and_a_large_model_waits_between_nodes(name: str) -> None:
    simulator = catalog.load_simulator(name)
    tp2_mb1 = [s for s in _specs(SMALL) if s[1].tp == 2 and s[1].micro_batch == 1]
    small = step_shares(simulator, tp2_mb1)
    assert len(small) and np.all(small[:, HOST] >= 0.8) and np.all(small[:, INTER] < 1e-9)
    large = step_shares(simulator, _specs(LARGE))
    assert np.all(large[:, HOST] <= 0.05)
    assert np.all((0 < large[:, INTER]) & (large[:, INTER] < 0.5))  # DP and PP between nodes


@pytest.mark.parametrize(
    ("factor", "scenario"), [("host_overhead", SMALL), ("inter_node_efficiency", LARGE)]
)
def test_a_share_is_how_the_step_moves_with_its_constant(factor: str, scenario: str) -> None:
    """By hand: with the constant's factor 5% lower, a step of share ``s`` lasts ``0.95 ** s``
    (the host's cost per call) or ``0.95 ** -s`` (an efficiency) times as long, while the same
    passes are paced by the same resource."""
    simulator = catalog.load_simulator("analytical")
    specs = _specs(scenario)
    step_s = np.array([simulator.simulate(*s).step_time_s for s in specs])
    shares = step_shares(simulator, specs, step_s)[:, SHARE_FACTORS.index(factor)]
    moved = calibrated(simulator, Calibration(simulator="analytical", factors={factor: 0.95}))
    after = np.array([moved.simulate(*s).step_time_s for s in specs])
    sign = 1 if factor == "host_overhead" else -1
    assert np.log(after / step_s) == pytest.approx(sign * shares * np.log(0.95), abs=0.01)
    assert shares.max() > 0.02  # a share to see (GPT-3 on 512 GPUs: 3-5% between nodes)


def test_a_dearer_host_paces_more_of_the_step() -> None:
    simulator = catalog.load_simulator("analytical")
    specs = _specs(SMALL)
    shares = step_shares(simulator, specs)[:, HOST]
    assert shares.min() < 0.1 and shares.max() > 0.9  # both kinds in one job
    slow = calibrated(
        simulator, Calibration(simulator="analytical", factors={"host_overhead": 3.0})
    )
    assert np.all(step_shares(slow, specs)[:, HOST] >= shares - 1e-9)


def test_without_the_step_times_the_shares_are_read_on_the_simulators_own() -> None:
    """A search's re-ranked layouts carry another simulator's step times: the round gives none
    and the shares are read on the simulator's own, the same as when its own are given."""
    simulator = catalog.load_simulator("analytical")
    specs = _specs(SMALL)
    own = np.array([simulator.simulate(*s).step_time_s for s in specs])
    np.testing.assert_allclose(step_shares(simulator, specs), step_shares(simulator, specs, own))
