"""The contract every registered simulator keeps, run on each of them (Optuna's way); and a
new simulator needs only its class, its yaml and its registry line."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autotune import catalog
from autotune.cli import help_text
from autotune.config import BenchmarkConfig
from autotune.config import load_config
from autotune.simulate import COMMAND as SIMULATE
from autotune.simulators import BREAKDOWN_KEYS
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import Simulator
from autotune.simulators import UserError
from autotune.simulators.base import PredictionList
from autotune.simulators.calibrated import calibrated
from autotune.simulators.calibration import FACTORS
from autotune.simulators.calibration import Calibration
from autotune.simulators.registry import SIMULATOR_NAMES
from autotune.simulators.registry import TRACE_WRITERS
from autotune.simulators.registry import simulator_class
from tests.dataset_tests._tables import write
from tests.simulators_tests._specs import ascend
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model
from tests.simulators_tests._toy import TOY_YAML
from tests.simulators_tests._toy import ToySimulator

REPO = Path(__file__).resolve().parents[2]

MODEL = model("llama2_7b", num_layers=8)  # 8 layers keep the hierarchical compile short
CLUSTER = ascend(2)  # 16 NPUs
TRAIN = make_train(seq_len=2048, global_batch_size=32)
JOB = Job(model=MODEL, cluster=CLUSTER, train=TRAIN)
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


@pytest.mark.parametrize("name", SIMULATOR_NAMES)
def test_a_registered_simulator_implements_the_contract(name: str) -> None:
    cls = simulator_class(name)
    assert issubclass(cls, Simulator) and not inspect.isabstract(cls)
    assert cls.name == name
    assert cls.batch_size >= 1
    assert set(cls.calibrated_constants) <= set(FACTORS)


def test_the_registry_names_the_yaml_files_the_benchmark_and_the_help() -> None:
    assert set(SIMULATOR_NAMES) == set(catalog.options("simulator"))
    assert set(load_config(BenchmarkConfig).simulator) == set(SIMULATOR_NAMES)
    assert f"Simulators: {', '.join(SIMULATOR_NAMES)}" in help_text(SIMULATE)
    with pytest.raises(UserError, match="unknown simulator 'nope'; available: analytical, hier"):
        simulator_class("nope")


def test_a_calibration_of_an_unregistered_simulator_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("simulator: nope\n")
    with pytest.raises(UserError, match="simulator 'nope' is unknown; available: analytical, "):
        catalog.load_calibration(str(path))


def test_the_default_simulate_many_is_the_loop_over_simulate(simulator: Simulator) -> None:
    looped = Simulator.simulate_many(simulator, JOB, LAYOUTS)
    one_by_one = [simulator.simulate(JOB, layout) for layout in LAYOUTS]
    assert looped == PredictionList(tuple(one_by_one))
    assert len(looped) == len(LAYOUTS) and looped.prediction(-1) == one_by_one[-1]


def test_simulate_many_prices_as_simulate(simulator: Simulator) -> None:
    """A simulator's own batch (the analytical's numpy arrays) gives simulate's numbers."""
    batch = simulator.simulate_many(JOB, LAYOUTS)
    assert len(batch) == len(LAYOUTS)
    for index, layout in enumerate(LAYOUTS):
        one, many = (
            simulator.simulate(JOB, layout),
            batch.prediction(index),
        )
        assert many.step_time_s == pytest.approx(one.step_time_s, rel=1e-12)
        assert many.memory_gib == pytest.approx(one.memory_gib, rel=1e-12)
        assert many.breakdown == pytest.approx(dict(one.breakdown), rel=1e-12, abs=1e-15)


def test_write_trace_is_refused_where_there_is_no_timeline(tmp_path: Path) -> None:
    assert TRACE_WRITERS == ("hierarchical",)
    for name in set(SIMULATOR_NAMES) - set(TRACE_WRITERS):
        simulator = calibrated(catalog.load_simulator(name), None)  # the wrapper refuses alike
        with pytest.raises(UserError, match=f"the {name} simulator writes no trace: it keeps no"):
            simulator.write_trace(JOB, LAYOUTS[0], tmp_path / "t.json")
    assert not list(tmp_path.iterdir())


def test_calibrated_scales_the_constants_it_names_and_back(simulator: Simulator) -> None:
    name, layout = simulator.name, LAYOUTS[1]
    same = simulator.calibrated(Calibration(simulator=name))
    assert type(same) is type(simulator) and same.name == name
    assert same.calibrated_values() == simulator.calibrated_values()
    assert same.simulate(JOB, layout) == simulator.simulate(JOB, layout)
    scales = {"host_overhead": 2.0, "matmul_efficiency": 0.5}
    there = simulator.calibrated(
        Calibration(simulator=name, factors={**scales, "memory_constant_gib": 3.0})
    )
    back = there.calibrated(
        Calibration(simulator=name, factors={k: 1 / v for k, v in scales.items()})
    )
    values, moved = simulator.calibrated_values(), there.calibrated_values()
    for factor, scale in scales.items():
        for key in simulator.calibrated_constants[factor]:
            assert moved.get(key) == pytest.approx(values[key] * scale if key in values else None)
    (reserved,) = simulator.calibrated_constants["memory_constant_gib"]
    assert moved[reserved] == 3.0
    assert back.calibrated_values() == pytest.approx({**values, reserved: 3.0})


@pytest.mark.slow
def test_a_new_simulator_needs_its_class_yaml_and_registry_line(tmp_path: Path) -> None:
    """The toy simulator, registered in a fresh interpreter before the commands are imported,
    with its yaml in a config folder of the user's, runs through ``autotune.simulate`` and the
    benchmark."""
    (tmp_path / "simulator").mkdir()
    (tmp_path / "simulator" / "toy.yaml").write_text(TOY_YAML)
    data = write(tmp_path / "runs.csv", {"dp": 8, "tp": 1}, {"dp": 4, "tp": 2, "step_time_s": 2})
    folder = f"hydra.searchpath=[file://{tmp_path}]"
    code = textwrap.dedent(
        f"""
        import sys
        from autotune.simulators import registry
        from tests.simulators_tests._toy import ToySimulator
        registry._CLASSES["toy"] = ToySimulator  # its registry line
        registry.SIMULATOR_NAMES = tuple(registry._CLASSES)
        from autotune.benchmark.__main__ import main as benchmark
        from autotune.simulate import main as simulate
        status = simulate(["simulator=toy", "model=llama2_7b", "cluster=ascend",
                           "cluster.num_nodes=1", "search.memory_margin=0", "output=json",
                           "{folder}"])
        status += benchmark(["simulators=[toy]", "data={data}", "output=json",
                             "tracking.enabled=false", "report_dir={tmp_path / "report"}",
                             "bootstrap_samples=10", "memory_margin=0", "{folder}"])
        sys.exit(status)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    decoder, text = json.JSONDecoder(), done.stdout.lstrip()
    simulated, end = decoder.raw_decode(text)
    scored, _ = decoder.raw_decode(text[end:].lstrip())
    assert simulated["simulator"] == "toy"
    assert simulated["prediction"]["step_time_s"] == pytest.approx(0.5 * 32)
    assert "toy" in scored["simulators"]
    assert ToySimulator.from_config({"seconds_per_layer": 1.0}).calibrated_values() == {}


def test_layouts_are_valid() -> None:
    for layout in LAYOUTS:
        assert not layout.violations(JOB)


@pytest.mark.parametrize("layout", LAYOUTS, ids=Layout.describe)
def test_prediction_is_consistent(simulator: Simulator, layout: Layout) -> None:
    prediction = simulator.simulate(JOB, layout)
    assert prediction.step_time_s > 0
    assert set(prediction.breakdown) == set(BREAKDOWN_KEYS)
    assert all(value >= 0 for value in prediction.breakdown.values())
    assert sum(prediction.breakdown.values()) == pytest.approx(prediction.step_time_s)
    assert sum(prediction.memory_breakdown_gib.values()) == pytest.approx(prediction.memory_gib)
    assert prediction.fits == (prediction.memory_gib <= CLUSTER.device.memory_gib)
    assert prediction.cached_gib >= 0  # a device-level peak shows at least what must fit
    assert prediction.peak_gib("device") >= prediction.memory_gib
    tokens = TRAIN.tokens_per_step / prediction.step_time_s / 16
    assert prediction.tokens_per_s_per_device == pytest.approx(tokens)
    assert 0 < prediction.mfu < 1
    assert simulator.simulate(JOB, layout) == prediction  # deterministic
    slower = prediction.retimed(1.5 * prediction.step_time_s)  # as the probe loop expects it
    assert sum(slower.breakdown.values()) == pytest.approx(slower.step_time_s)
    assert slower.tokens_per_s_per_device == pytest.approx(tokens / 1.5)
    assert slower.mfu == pytest.approx(prediction.mfu / 1.5)
    assert slower.memory_breakdown_gib == prediction.memory_breakdown_gib


@pytest.mark.parametrize("degree", ["tp", "pp"])
def test_memory_never_rises_with_tp_or_pp(simulator: Simulator, degree: str) -> None:
    memory = [
        simulator.simulate(JOB, Layout.resolve(16, **{degree: n})).memory_gib for n in (1, 2, 4, 8)
    ]
    assert memory == sorted(memory, reverse=True)


def test_more_recompute_never_raises_memory(simulator: Simulator) -> None:
    memory = [
        simulator.simulate(
            JOB,
            Layout.resolve(16, tp=2, pp=2, recompute=mode),
        ).memory_gib
        for mode in ("none", "selective", "full")
    ]
    assert memory == sorted(memory, reverse=True)


UNEVEN = model("llama2_7b", num_layers=10)  # 10 layers over 4 stages: 2, 3, 3, 2


@pytest.mark.parametrize("framework", ["megatron_core", "megatron_deepspeed", "mindspeed"])
def test_uneven_split_is_priced_stage_by_stage(simulator: Simulator, framework: str) -> None:
    train = make_train(framework, seq_len=2048, global_batch_size=32)
    layout = Layout.resolve(16, tp=2, pp=4)
    job = Job(model=UNEVEN, cluster=CLUSTER, train=train)
    assert not layout.violations(job)
    split = layout.stage_layers(UNEVEN, train)
    assert sum(split) == 10 and len(split) == 4 and max(split) - min(split) == 1
    prediction = simulator.simulate(job, layout)
    assert prediction.detail["stage_layers"] == list(split)
    assert sum(prediction.breakdown.values()) == pytest.approx(prediction.step_time_s)
    # one more layer on the slowest stage costs time; the even 8-layer model is cheaper
    assert (
        prediction.step_time_s
        > simulator.simulate(Job(model=MODEL, cluster=CLUSTER, train=train), layout).step_time_s
    )


def test_a_heavier_stage_paces_the_pipeline(simulator: Simulator) -> None:
    balanced = Layout.resolve(16, tp=2, pp=4, layer_split=(2, 2, 2, 2))
    lopsided = Layout.resolve(16, tp=2, pp=4, layer_split=(1, 1, 1, 5))
    fast = simulator.simulate(JOB, balanced)
    slow = simulator.simulate(JOB, lopsided)
    assert slow.step_time_s > fast.step_time_s
    assert slow.detail["stage_layers"] == [1, 1, 1, 5]


def test_fp8_is_faster_and_keeps_its_weight_copies(simulator: Simulator) -> None:
    cluster = catalog.load_cluster("h100", ["cluster.num_nodes=2"])
    layout = Layout.resolve(16, tp=2, pp=2)
    bf16 = simulator.simulate(Job(model=MODEL, cluster=cluster, train=TRAIN), layout)
    fp8_train = make_train(seq_len=2048, global_batch_size=32, precision="fp8")
    fp8 = simulator.simulate(Job(model=MODEL, cluster=cluster, train=fp8_train), layout)
    assert fp8.step_time_s < bf16.step_time_s
    assert fp8.memory_breakdown_gib["fp8_weights"] > 0  # Hopper: two FP8 copies per weight
    # MFU of an FP8 run is of the FP8 peak (as NVIDIA's DGX Cloud benchmarks state it)
    peaks = cluster.device.peak_flops("fp8") / cluster.device.peak_flops("bf16")
    assert fp8.mfu == pytest.approx(bf16.mfu * bf16.step_time_s / fp8.step_time_s / peaks)
    assert fp8.memory_breakdown_gib["activations"] < bf16.memory_breakdown_gib["activations"]
    assert "fp8_weights" not in bf16.memory_breakdown_gib


@pytest.mark.parametrize("framework", ["megatron_core", "megatron_deepspeed", "megatron_lm"])
def test_gradient_dtype_sets_the_buffer_and_the_reduction(
    simulator: Simulator, framework: str
) -> None:
    """``train.grad_reduce_in_fp32`` flips the framework's default: the gradient buffer keeps
    2 bytes per parameter more or less, and the data-parallel reduction moves that many more
    or fewer bytes (Megatron-LM of 2021-22 all-reduces after the backward, so all of it is
    exposed; without the distributed optimizer no parameter all-gather shares the DP time).
    Megatron-LM of 2022 forces fp32 for bf16: its fp16 step is flipped."""
    layout = Layout.resolve(16, tp=2, pp=2, distributed_optimizer=False)  # dp 4
    step = dict(
        seq_len=2048,
        global_batch_size=32,
        precision="fp16" if framework == "megatron_lm" else "bf16",
    )
    default = make_train(framework, **step)
    in_fp32 = default.reduces_grads_in_fp32
    same = make_train(framework, **step, grad_reduce_in_fp32=in_fp32)
    flipped = make_train(framework, **step, grad_reduce_in_fp32=not in_fp32)
    base = simulator.simulate(Job(model=MODEL, cluster=CLUSTER, train=default), layout)
    assert simulator.simulate(Job(model=MODEL, cluster=CLUSTER, train=same), layout) == base
    other = simulator.simulate(Job(model=MODEL, cluster=CLUSTER, train=flipped), layout)
    params = base.memory_breakdown_gib["weights"] / 2  # 16-bit weights
    change = other.memory_breakdown_gib["gradients"] - base.memory_breakdown_gib["gradients"]
    # (the fullest rank may be the other stage, a few thousand parameters apart, once the
    # step's fp32 copy of a 16-bit buffer counts)
    assert change == pytest.approx((-2 if in_fp32 else 2) * params, rel=1e-4)
    if framework == "megatron_lm":
        ratio = other.breakdown["dp_comm"] / base.breakdown["dp_comm"]
        assert ratio == pytest.approx(0.5 if in_fp32 else 2.0, rel=0.05)


def test_tp_comm_overlap_hides_the_tp_collectives_with_sequence_parallelism(
    simulator: Simulator,
) -> None:
    """``train.tp_comm_overlap`` (Transformer Engine's userbuffers) hides the TP collectives
    behind the GEMMs; Megatron needs sequence parallelism for it, so without SP it changes
    nothing."""
    exposed = make_train(seq_len=2048, global_batch_size=32)
    hidden = make_train(seq_len=2048, global_batch_size=32, tp_comm_overlap=True)
    assert not exposed.overlaps_tp_comm and hidden.overlaps_tp_comm
    with_sp = Layout.resolve(16, tp=4, pp=2)
    without_sp = Layout.resolve(16, tp=4, pp=2, sequence_parallel=False)
    assert with_sp.hides_tp_comm(hidden) and not without_sp.hides_tp_comm(hidden)
    exposed_job = Job(model=MODEL, cluster=CLUSTER, train=exposed)
    slow = simulator.simulate(exposed_job, with_sp)
    hidden_job = Job(model=MODEL, cluster=CLUSTER, train=hidden)
    fast = simulator.simulate(hidden_job, with_sp)
    # the hierarchical hides a phase's TP collectives up to its GEMM time (the embedding's
    # reduction has little to hide behind); the analytical hides the layers' whole
    assert 0 <= fast.breakdown["tp_comm"] < 0.2 * slow.breakdown["tp_comm"]
    assert fast.step_time_s < slow.step_time_s
    assert fast.memory_gib == slow.memory_gib
    plain = simulator.simulate(exposed_job, without_sp)
    assert simulator.simulate(hidden_job, without_sp) == plain


def test_deepep_cuts_the_cross_node_expert_all_to_all(simulator: Simulator) -> None:
    """DeepEP sends a token once to each node it is routed to: across 2 nodes the expert
    all-to-all moves about a quarter of the all-to-all's bytes (top-8); inside one node it is
    the all-to-all."""
    moe = model("qwen3_30b_a3b", num_layers=2)
    h100 = catalog.load_cluster("h100", ["cluster.num_nodes=2"])
    plain = make_train(seq_len=2048, global_batch_size=32)
    deepep = make_train(seq_len=2048, global_batch_size=32, moe_dispatcher="deepep")
    across, within = Layout.resolve(16, ep=16), Layout.resolve(16, ep=8)
    plain_job = Job(model=moe, cluster=h100, train=plain)
    slow = simulator.simulate(plain_job, across)
    deepep_job = Job(model=moe, cluster=h100, train=deepep)
    fast = simulator.simulate(deepep_job, across)
    assert 0 < fast.breakdown["ep_comm"] < 0.6 * slow.breakdown["ep_comm"]
    assert fast.memory_gib == slow.memory_gib
    inside = simulator.simulate(plain_job, within)
    assert simulator.simulate(deepep_job, within) == inside


def test_allgather_dispatch_gathers_each_token_once_over_tp_x_ep(simulator: Simulator) -> None:
    """The allgather dispatcher gathers every token of the TP x EP group once, the all-to-all
    sends a copy per routed expert (docs/reference.md 7.7). Mixtral (top-2) on one node: at
    ep 1 and tp 8 the allgather's TP gather moves one token where the all-to-all dispatcher
    gathers both copies; at ep 8 it moves every token of the group to every rank, the
    all-to-all two copies of each, so it sends 3.5x the bytes over EP."""
    mixtral = model("mixtral_8x7b", num_layers=2)
    h100 = catalog.load_cluster("h100", ["cluster.num_nodes=1"])
    plain = make_train(seq_len=4096, global_batch_size=16)
    gathered = make_train(seq_len=4096, global_batch_size=16, moe_dispatcher="allgather")
    tp8 = Layout.resolve(8, tp=8)
    plain_job = Job(model=mixtral, cluster=h100, train=plain)
    gathered_job = Job(model=mixtral, cluster=h100, train=gathered)
    assert (
        simulator.simulate(gathered_job, tp8).breakdown["tp_comm"]
        < simulator.simulate(plain_job, tp8).breakdown["tp_comm"]
    )
    ep8 = Layout.resolve(8, ep=8)
    assert (
        simulator.simulate(gathered_job, ep8).breakdown["ep_comm"]
        > 2 * simulator.simulate(plain_job, ep8).breakdown["ep_comm"]
    )


def test_ep_overlap_hides_the_all_to_all_under_the_partner_pass(simulator: Simulator) -> None:
    """Megatron-Core's EP all-to-all overlap runs one micro-batch's forward beside another's
    backward: each pass's all-to-all hides up to the other's compute; it needs ep > 1,
    virtual stages when pp > 1 and no full recompute."""
    moe = model("qwen3_30b_a3b", num_layers=2)
    h100 = catalog.load_cluster("h100", ["cluster.num_nodes=2"])
    plain = make_train(seq_len=2048, global_batch_size=32)
    overlap = make_train(seq_len=2048, global_batch_size=32, moe_a2a_overlap=True)
    layout = Layout.resolve(16, ep=16)
    plain_job = Job(model=moe, cluster=h100, train=plain)
    exposed = simulator.simulate(plain_job, layout)
    overlap_job = Job(model=moe, cluster=h100, train=overlap)
    hidden = simulator.simulate(overlap_job, layout)
    # each layer's all-to-all of one pass against the other pass's compute of that layer
    assert 0 <= hidden.breakdown["ep_comm"] < 0.5 * exposed.breakdown["ep_comm"]
    assert hidden.breakdown["compute"] == pytest.approx(exposed.breakdown["compute"])
    assert hidden.memory_gib == exposed.memory_gib
    rules = Layout.resolve(16, pp=2, ep=8, recompute="full").violations(overlap_job)
    assert rules == [
        "moe_a2a_overlap with pp=2 needs vpp > 1",
        "moe_a2a_overlap does not run with recompute=full",
    ]
    assert Layout.resolve(16).violations(overlap_job) == ["moe_a2a_overlap needs ep > 1"]
    assert not Layout.resolve(16, pp=2, ep=8).violations(plain_job)


def test_fp8_primary_weights_replace_the_bf16_copy(simulator: Simulator) -> None:
    """Megatron-Core's ``--fp8-param-gather`` (with the distributed optimizer): the linear
    layers keep no bf16 weight, only Transformer Engine's FP8 copies (two bytes on Hopper)."""
    cluster = catalog.load_cluster("h100", ["cluster.num_nodes=2"])
    fp8_train = make_train(seq_len=2048, global_batch_size=32, precision="fp8")
    sharded = Layout.resolve(16, tp=2, pp=2)
    replicated = Layout.resolve(16, tp=2, pp=2, distributed_optimizer=False)
    bf16_job = Job(model=MODEL, cluster=cluster, train=TRAIN)
    bf16 = simulator.simulate(bf16_job, sharded).memory_breakdown_gib
    fp8_job = Job(model=MODEL, cluster=cluster, train=fp8_train)
    fp8 = simulator.simulate(fp8_job, sharded).memory_breakdown_gib
    h, ffn = MODEL.hidden_size, MODEL.ffn_hidden_size
    linear_per_rank = 4 * (4 * h * h + 3 * h * ffn) / 2  # 4 layers a stage, split over TP 2
    dropped = (bf16["weights"] - fp8["weights"]) * 2**30
    assert dropped == pytest.approx(2 * linear_per_rank, rel=1e-3)
    assert fp8["fp8_weights"] * 2**30 == pytest.approx(2 * linear_per_rank, rel=1e-3)
    kept = simulator.simulate(fp8_job, replicated).memory_breakdown_gib
    bf16_kept = simulator.simulate(bf16_job, replicated).memory_breakdown_gib
    assert kept["weights"] == bf16_kept["weights"]  # the flag needs the distributed optimizer


def test_fp8_gemms_run_at_the_device_s_fp8_efficiency(simulator: Simulator) -> None:
    """An FP8 step's linear GEMMs take the device's ``fp8_matmul_efficiency`` (unset: its
    ``matmul_efficiency``); a bf16 step never reads it."""
    cluster = catalog.load_cluster("h100", ["cluster.num_nodes=2"])
    layout = Layout.resolve(16, tp=2, pp=2)
    fp8_train = make_train(seq_len=2048, global_batch_size=32, precision="fp8")

    def step_s(train: object, fp8_efficiency: float | None) -> float:
        device = dataclasses.replace(
            cluster.device, matmul_efficiency=0.6, fp8_matmul_efficiency=fp8_efficiency
        )
        on = dataclasses.replace(cluster, device=device)
        return simulator.simulate(Job(model=MODEL, cluster=on, train=train), layout).step_time_s  # type: ignore[arg-type]

    assert step_s(fp8_train, None) == step_s(fp8_train, 0.6)
    assert step_s(fp8_train, 0.3) > step_s(fp8_train, 0.6) > step_s(fp8_train, 0.9)
    assert step_s(TRAIN, 0.3) == step_s(TRAIN, 0.9)
