"""What a measured peak counts (``MEMORY_MEASURES``): the tensors (``allocated``), the caching
allocator's segments (``reserved``: the tensors, what fragmentation loses and the cached
blocks), or the whole device (``device``: the runtime's context and the communicators' buffers
too). Checked by hand on Llama-3-8B in fp16 without the distributed optimizer, whose step keeps
gradient copies cached (docs/decisions/0053, 0061)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from autotune import catalog
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators.device_memory import GIB
from autotune.simulators.device_memory import reserved_bytes
from autotune.simulators.prediction import MEMORY_MEASURES
from autotune.simulators.prediction import Prediction
from autotune.simulators.prediction import peak_as_measured
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model

LLAMA = model("llama3_8b")
H100 = catalog.load_cluster("h100", [])  # one node of 8
JOB = Job(
    model=LLAMA,
    cluster=H100,
    train=make_train("megatron_core", seq_len=4096, global_batch_size=64, precision="fp16"),
)
# no recompute at micro-batch 4: the step's copies stay cached above the peak (0053)
LAYOUT = Layout.resolve(8, tp=8, distributed_optimizer=False, recompute="none", micro_batch=4)


def _prediction(name: str) -> Prediction:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the hierarchical simulator's profile notes
        return catalog.load_simulator(name).simulate(JOB, LAYOUT)


@pytest.mark.parametrize("name", ["analytical", "hierarchical"])
def test_each_measure_counts_its_own_part_of_the_device(name: str) -> None:
    prediction = _prediction(name)
    memory = prediction.memory_breakdown_gib
    runtime = reserved_bytes(LLAMA, H100, LAYOUT) / GIB
    assert prediction.cached_gib > 0 and memory["fragmentation"] > 0
    assert memory["reserved"] == pytest.approx(runtime)
    tensors = prediction.memory_gib - memory["fragmentation"] - runtime
    assert prediction.peak_gib("allocated") == pytest.approx(tensors)
    allocator = tensors + memory["fragmentation"] + prediction.cached_gib
    assert prediction.peak_gib("reserved") == pytest.approx(allocator)
    assert prediction.peak_gib("device") == pytest.approx(allocator + runtime)
    assert prediction.peaks_gib() == {m: prediction.peak_gib(m) for m in MEMORY_MEASURES}


def test_an_unknown_measure_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="allocated.*reserved.*device"):
        _prediction("analytical").peak_gib("nvidia-smi")


def test_rows_take_the_peak_of_their_own_measure() -> None:
    memory = np.array([50.0, 50.0, 50.0, 50.0])
    peaks = {
        "allocated": np.array([40.0, 40.0, 40.0, 40.0]),
        "reserved": np.array([44.0, 44.0, np.nan, 44.0]),
        "device": np.array([53.0, 53.0, 53.0, 53.0]),
    }
    measures = np.array(["allocated", "reserved", "reserved", "device"])
    assert peak_as_measured(measures, memory, peaks).tolist() == [40.0, 44.0, 50.0, 53.0]
    assert peak_as_measured(measures, memory, None).tolist() == memory.tolist()


# BigScience tr3m-1B3 on 8 V100s, dp 4 x pp 2, micro-batch 8, full recompute: the first stage
# holds two micro-batches' checkpointed inputs, the last DeepSpeed's fp32 logits (14 B each).
TR3M = Job(
    model=model(
        "gpt3_175b",
        num_layers=24,
        hidden_size=2048,
        ffn_hidden_size=8192,
        num_attention_heads=16,
        num_kv_heads=16,
        vocab_size=50304,
    ),
    cluster=catalog.load_cluster("v100", ["cluster.num_nodes=2", "cluster.devices_per_node=4"]),
    train=make_train("megatron_deepspeed", seq_len=2048, global_batch_size=512, precision="fp16"),
)
PIPELINED = Layout.resolve(8, pp=2, micro_batch=8, recompute="full")


@pytest.mark.parametrize("name", ["analytical", "hierarchical"])
def test_the_first_rank_reads_the_first_stage_of_the_pipeline(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prediction = catalog.load_simulator(name).simulate(TR3M, PIPELINED)
    per_rank = prediction.detail.get("stage_memory_gib") or prediction.detail["rank_memory_gib"]
    first, last = per_rank  # type: ignore[misc]
    assert first < last == pytest.approx(prediction.memory_gib)  # the logits' stage is fullest
    held = prediction.rank_memory("first")
    assert held.memory_gib == pytest.approx(first)
    assert prediction.peak_gib("device", "first") == pytest.approx(first + held.cached_gib)
    outside = held.breakdown_gib["fragmentation"] + held.breakdown_gib["reserved"]
    assert prediction.peak_gib("allocated", "first") == pytest.approx(first - outside)
    readings = prediction.readings_gib()
    assert readings["device"] == prediction.peak_gib("device")
    assert readings["device@first"] == prediction.peak_gib("device", "first")


def test_one_stage_is_its_own_first_rank() -> None:
    prediction = _prediction("analytical")  # tp 8, no pipeline
    for measure in MEMORY_MEASURES:
        assert prediction.peak_gib(measure, "first") == pytest.approx(prediction.peak_gib(measure))
    with pytest.raises(ValueError, match="fullest.*first"):
        prediction.peak_gib("device", "rank 3")


def test_a_calibration_scales_the_first_rank_as_the_fullest() -> None:
    from autotune.simulators.calibrated import CalibratedSimulator
    from autotune.simulators.calibration import Calibration

    plain = catalog.load_simulator("analytical")
    calibration = Calibration(simulator="analytical", factors={"memory_factor": 1.2})
    scaled = CalibratedSimulator(plain, calibration, 0.0).simulate(TR3M, PIPELINED)
    first = plain.simulate(TR3M, PIPELINED).rank_memory("first")
    reserved = first.breakdown_gib["reserved"]
    expected = (first.memory_gib - reserved) * 1.2 + reserved
    assert scaled.rank_memory("first").memory_gib == pytest.approx(expected)
