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
