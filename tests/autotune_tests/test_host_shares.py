"""The share of a layout's step the host's pace sets (:mod:`autotune.calibrate._host`), read
on shipped rows: vTrain's small GPT layers on one node run at the host's pace, a 70B model's
layers at the device's."""

from __future__ import annotations

import numpy as np
import pytest

from autotune import catalog
from autotune import dataset
from autotune.calibrate._host import host_shares
from autotune.simulators.calibrated import calibrated
from autotune.simulators.calibration import Calibration


def _specs(scenario: str) -> list:
    priceable = dataset.priceable_rows(dataset.load_public())
    rows = np.flatnonzero((priceable.table["scenario"] == scenario).to_numpy())
    return [priceable.specs[i] for i in rows if priceable.specs[i] is not None]


@pytest.mark.parametrize("name", ["analytical", "hierarchical"])
def test_small_layers_are_host_paced_and_large_ones_are_not(name: str) -> None:
    simulator = catalog.load_simulator(name)
    small = [s for s in _specs("vtrain_single|GPT h1024 L16 a16|gpus4|gbs32|seq1024")]
    tp2_mb1 = [s for s in small if s[1].tp == 2 and s[1].micro_batch == 1]
    large = _specs("vtrain_multi|GPT-175B (GPT h12288 L96 a96)|gpus512|gbs1536|seq2048")
    for specs, low, high in ((tp2_mb1, 0.8, 1.0), (large, 0.0, 0.05)):
        step_s = np.array([simulator.simulate(*s).step_time_s for s in specs])
        shares = host_shares(simulator, specs, step_s)
        assert len(specs) and np.all((low <= shares) & (shares <= high)), shares


def test_the_share_is_how_the_step_moves_with_the_hosts_cost() -> None:
    """By hand: with the host's cost per call 5% dearer, a step of share ``h`` lasts
    ``1.05 ** h`` times as long (the floor is linear in the cost while the same passes are
    host-paced); a calibration that makes the host dearer paces more of the step."""
    simulator = catalog.load_simulator("analytical")
    specs = _specs("vtrain_single|GPT h1024 L16 a16|gpus4|gbs32|seq1024")
    step_s = np.array([simulator.simulate(*s).step_time_s for s in specs])
    shares = host_shares(simulator, specs, step_s)
    assert shares.min() < 0.1 and shares.max() > 0.9  # both kinds in one job
    dearer = calibrated(
        simulator, Calibration(simulator="analytical", factors={"host_overhead": 1.05})
    )
    after = np.array([dearer.simulate(*s).step_time_s for s in specs])
    assert np.log(after / step_s) == pytest.approx(shares * np.log(1.05), abs=0.01)
    slow_host = calibrated(
        simulator, Calibration(simulator="analytical", factors={"host_overhead": 3.0})
    )
    slow_s = np.array([slow_host.simulate(*s).step_time_s for s in specs])
    assert np.all(host_shares(slow_host, specs, slow_s) >= shares - 1e-9)


def test_without_the_step_times_the_shares_are_read_on_the_simulators_own() -> None:
    """A search's re-ranked layouts carry another simulator's step times: the round gives none
    and the shares are read on the simulator's own, the same as when its own are given."""
    simulator = catalog.load_simulator("analytical")
    specs = _specs("vtrain_single|GPT h1024 L16 a16|gpus4|gbs32|seq1024")
    own = np.array([simulator.simulate(*s).step_time_s for s in specs])
    np.testing.assert_allclose(host_shares(simulator, specs), host_shares(simulator, specs, own))
