"""The calibrated simulator: what each factor changes, and what it must keep."""

from __future__ import annotations

import math
import pickle

import pytest

from autotune import catalog
from autotune.simulators import Layout
from autotune.simulators import UserError
from autotune.simulators.calibrated import CalibratedSimulator
from autotune.simulators.calibrated import calibrated
from autotune.simulators.calibrated import constant_overrides
from autotune.simulators.calibrated import job_key
from autotune.simulators.calibration import Calibration
from autotune.simulators.limits import MAX_CALIBRATION_SCALE

JOB = catalog.load_job("llama70b", "a100", ["cluster.num_nodes=8"])
SIMULATOR = catalog.load_simulator("analytical")
LAYOUT = Layout.resolve(JOB.cluster.num_devices, tp=8, pp=2)


def _predict(factors: dict[str, float], margin: float = 0.0):  # noqa: ANN202
    sim = calibrated(SIMULATOR, Calibration(simulator="analytical", factors=factors), margin)
    return sim.simulate(JOB, LAYOUT)


def test_an_empty_calibration_changes_nothing() -> None:
    base = SIMULATOR.simulate(JOB, LAYOUT)
    assert _predict({}).as_dict() == base.as_dict()


@pytest.mark.parametrize(
    ("factor", "part"),
    [
        ("matmul_efficiency", "compute"),
        ("intra_node_efficiency", "tp_comm"),
        ("inter_node_efficiency", "dp_comm"),
    ],
)
def test_a_lower_efficiency_slows_its_part(factor: str, part: str) -> None:
    base, slower = _predict({}), _predict({factor: 0.5})
    assert slower.breakdown[part] > base.breakdown[part]
    assert slower.step_time_s > base.step_time_s


def test_overlaps_hide_communication_and_the_breakdown_still_sums() -> None:
    base, hidden = _predict({}), _predict({"tp_overlap": 0.5, "dp_overlap": 0.5})
    assert hidden.breakdown["tp_comm"] == pytest.approx(0.5 * base.breakdown["tp_comm"])
    assert hidden.breakdown["dp_comm"] == pytest.approx(0.5 * base.breakdown["dp_comm"])
    assert hidden.breakdown["bubble"] < base.breakdown["bubble"]
    assert sum(hidden.breakdown.values()) == pytest.approx(hidden.step_time_s)
    assert hidden.mfu > base.mfu


def test_memory_factor_spares_the_reserved_memory_which_the_constant_sets() -> None:
    base = _predict({})
    scaled = _predict({"memory_factor": 2.0, "memory_constant_gib": 1.0})
    reserved = base.memory_breakdown_gib["reserved"]
    assert scaled.memory_breakdown_gib["reserved"] == 1.0
    assert scaled.memory_gib == pytest.approx(2 * (base.memory_gib - reserved) + 1.0)


def test_the_memory_margin_lowers_the_capacity_a_layout_must_fit() -> None:
    base, safe = _predict({}), _predict({}, margin=0.1)
    assert safe.memory_gib == base.memory_gib
    assert safe.memory_capacity_gib == pytest.approx(base.memory_capacity_gib / 1.1)
    assert safe.detail["memory_margin"] == 0.1


def test_host_overhead_scales_the_simulator_constant() -> None:
    calibration = Calibration(simulator="analytical", factors={"host_overhead": 2.0})
    overrides = constant_overrides(SIMULATOR, JOB.cluster, calibration)
    assert overrides["simulator.host_op_overhead_us"] == 2 * 20.0
    assert overrides["cluster.device.matmul_efficiency"] == JOB.cluster.device.matmul_efficiency


def test_efficiencies_are_capped_at_one() -> None:
    calibration = Calibration(simulator="analytical", factors={"matmul_efficiency": 5.0})
    overrides = constant_overrides(SIMULATOR, JOB.cluster, calibration)
    assert overrides["cluster.device.matmul_efficiency"] == 1.0


def test_the_matmul_factor_scales_the_fp8_gemms_too() -> None:
    h100 = catalog.load_cluster("h100")
    assert h100.device.fp8_matmul_efficiency is not None
    calibration = Calibration(simulator="analytical", factors={"matmul_efficiency": 1.5})
    overrides = constant_overrides(SIMULATOR, h100, calibration)
    assert overrides["cluster.device.matmul_efficiency"] == pytest.approx(
        1.5 * h100.device.matmul_efficiency
    )
    assert overrides["cluster.device.fp8_matmul_efficiency"] == pytest.approx(
        1.5 * h100.device.fp8_matmul_efficiency
    )
    # a device without its own FP8 efficiency gains none
    assert "cluster.device.fp8_matmul_efficiency" not in constant_overrides(
        SIMULATOR, JOB.cluster, calibration
    )


@pytest.mark.parametrize(
    "factors",
    [{"speed": 2.0}, {"matmul_efficiency": 0.0}, {"tp_overlap": 1.0}, {"memory_constant_gib": -1}],
)
def test_bad_factors_are_refused(factors: dict[str, float]) -> None:
    with pytest.raises(UserError):
        Calibration(simulator="analytical", factors=factors)


def test_a_calibration_replaces_another_never_stacks_on_it() -> None:
    """A calibrated simulator wrapped again stands for the simulator it wraps, as its
    ``calibrated`` method does: the second calibration alone applies, once."""
    first = Calibration(
        simulator="analytical", factors={"matmul_efficiency": 0.8, "memory_factor": 1.1}
    )
    second = Calibration(
        simulator="analytical", factors={"intra_node_efficiency": 0.7, "memory_factor": 0.9}
    )
    nested = CalibratedSimulator(CalibratedSimulator(SIMULATOR, first), second, 0.05)
    alone = CalibratedSimulator(SIMULATOR, second, 0.05)
    assert nested.simulate(JOB, LAYOUT).as_dict() == alone.simulate(JOB, LAYOUT).as_dict()
    assert nested.base is SIMULATOR


def test_a_calibration_of_another_simulator_is_refused() -> None:
    with pytest.raises(UserError, match="hierarchical simulator, not analytical"):
        CalibratedSimulator(SIMULATOR, Calibration(simulator="hierarchical"))


def test_a_calibrated_simulator_pickles_for_worker_processes() -> None:
    sim = calibrated(SIMULATOR, Calibration(simulator="analytical", factors={"tp_overlap": 0.2}))
    again = pickle.loads(pickle.dumps(sim))
    assert again.simulate(JOB, LAYOUT).step_time_s == sim.simulate(JOB, LAYOUT).step_time_s


@pytest.mark.slow
def test_the_hierarchical_simulator_takes_the_same_calibration() -> None:
    job = catalog.load_job("llama2_7b", "a100", ["cluster.num_nodes=1"])
    simulator = catalog.load_simulator("hierarchical")
    layout = Layout.resolve(job.cluster.num_devices, tp=2, pp=2)
    base = simulator.simulate(job, layout)
    assert calibrated(simulator, None).simulate(job, layout).step_time_s == pytest.approx(
        base.step_time_s
    )
    slower = calibrated(
        simulator, Calibration(simulator="hierarchical", factors={"matmul_efficiency": 0.5})
    ).simulate(job, layout)
    assert slower.breakdown["compute"] > base.breakdown["compute"]


def test_batch_pricing_passes_through_calibrated() -> None:
    """A calibrated simulator's batch is the wrapped simulator's, each prediction calibrated,
    and it takes as many layouts at once."""
    calibration = Calibration(simulator="analytical", factors={"tp_overlap": 0.3})
    sim = calibrated(SIMULATOR, calibration, 0.1)
    assert sim.batch_size == SIMULATOR.batch_size > 1
    batch = sim.simulate_many(JOB, [LAYOUT])
    one = sim.simulate(JOB, LAYOUT)
    assert len(batch) == 1 and batch.prediction(0).as_dict() == one.as_dict()


def _remembering(job_key_of: str, factor: float) -> CalibratedSimulator:
    """The uncalibrated simulator remembering that LAYOUT ran ``factor`` x its prediction in
    the job ``job_key_of``."""
    layouts = {job_key_of: {LAYOUT.describe(): math.log(factor)}}
    return calibrated(SIMULATOR, Calibration(simulator="analytical", layouts=layouts))


def test_a_remembered_layout_scales_its_step_alone() -> None:
    """Decision 0065: a layout the history measured takes what it ran beyond the prediction,
    every step-time term alike; memory, the job's other layouts and other jobs keep theirs."""
    base = SIMULATOR.simulate(JOB, LAYOUT)
    sim = _remembering(job_key(JOB), 1.25)
    slower = sim.simulate(JOB, LAYOUT)
    assert slower.step_time_s == pytest.approx(1.25 * base.step_time_s, rel=1e-12)
    assert sum(slower.breakdown.values()) == pytest.approx(slower.step_time_s, rel=1e-12)
    for part, seconds in base.breakdown.items():
        assert slower.breakdown[part] == pytest.approx(1.25 * seconds, rel=1e-12)
    assert slower.tokens_per_s_per_device == pytest.approx(base.tokens_per_s_per_device / 1.25)
    assert slower.memory_gib == base.memory_gib
    assert slower.detail["measured_in_history"] == pytest.approx(1.25)
    other = Layout.resolve(JOB.cluster.num_devices, tp=4, pp=4)
    assert sim.simulate(JOB, other).step_time_s == SIMULATOR.simulate(JOB, other).step_time_s
    batch = sim.simulate_many(JOB, [other, LAYOUT])
    assert batch.prediction(1).as_dict() == slower.as_dict()


@pytest.mark.parametrize(
    ("override", "shared"),
    [
        ("model.num_layers=40", True),  # depth alone: the same layer, the same job shape
        # a model-card fact: no simulator prices it, and a history file does not hold it
        ("model.rotary_base=10000", True),
        ("model.hidden_size=4096", False),
        ("train.global_batch_size=1024", False),
        ("train.seq_len=4096", False),
        ("cluster.num_nodes=16", False),
    ],
)
def test_a_job_shares_what_was_remembered_only_when_it_differs_in_depth(
    override: str, shared: bool
) -> None:
    sim = _remembering(job_key(JOB), 1.25)
    job = catalog.load_job("llama70b", "a100", ["cluster.num_nodes=8", override])
    layout = Layout.resolve(job.cluster.num_devices, tp=8, pp=2)
    ratio = sim.simulate(job, layout).step_time_s / SIMULATOR.simulate(job, layout).step_time_s
    assert ratio == pytest.approx(1.25 if shared else 1.0, rel=1e-12)


@pytest.mark.parametrize("value", [math.nan, math.log(2 * MAX_CALIBRATION_SCALE), "fast"])
def test_a_remembered_layout_out_of_range_is_refused(value: object) -> None:
    with pytest.raises(UserError, match="layouts"):
        Calibration(simulator="analytical", layouts={"job": {"layout": value}})  # type: ignore[dict-item]
    with pytest.raises(UserError, match="layouts"):
        Calibration(simulator="analytical", layouts={"job": value})  # type: ignore[dict-item]
