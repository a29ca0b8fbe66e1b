"""Under interleaved pipelining torchtitan's ZeRO-3 frees each chunk's gathered weights and whole
gradients after its last backward (docs/decisions/0060): the analytical simulator splits the
rank's whole states over its chunks by their parameters (the embedding and the output layer in
their chunks), as the hierarchical simulator does, not by their layers."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from autotune import catalog
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators.analytical.chunk_states import chunk_params
from autotune.simulators.analytical.prices import JobPrices
from tests.simulators_tests._specs import analytical
from tests.simulators_tests._specs import make_train
from tests.simulators_tests._specs import model

LLAMA = model("llama3_8b")  # 32 layers, its own output layer (525M parameters)
H100_8 = catalog.load_cluster("h100", ["cluster.num_nodes=8"])  # 64 GPUs
TITAN = make_train("torchtitan", seq_len=8192, global_batch_size=64)
JOB = Job(model=LLAMA, cluster=H100_8, train=TITAN)
# pp 8, vpp 4: each rank holds 4 chunks of one layer; dp 8 gives 8 micro-batches (= pp)
LAYOUT = Layout.resolve(64, tp=1, pp=8, vpp=4, recompute="full", zero_stage=3)


def test_the_last_ranks_chunks_share_its_states_by_their_parameters_by_hand() -> None:
    """Rank 7 holds virtual stages 7, 15, 23 and 31 of one layer each; the last also holds the
    final norm and the output layer, 218M + 525M parameters: its share is 743 / 1,397 = 0.53,
    not the 1/4 that counting layers gives. Rank 0's first chunk holds the
    embedding."""
    layer = LLAMA.dense_layer_params
    head = LLAMA.vocab_size * LLAMA.hidden_size + LLAMA.hidden_size  # output layer, final norm
    stage_layers = LAYOUT.stage_layers(LLAMA, TITAN)
    last = chunk_params(LLAMA, LAYOUT, stage_layers, 7)
    assert last == pytest.approx([layer, layer, layer, layer + head], rel=1e-12)
    shares = [chunk / sum(last) for chunk in last]
    assert shares[-1] == pytest.approx((layer + head) / (4 * layer + head), rel=1e-12)
    assert shares[-1] == pytest.approx(0.53, abs=0.01)
    first = chunk_params(LLAMA, LAYOUT, stage_layers, 0)
    assert first == pytest.approx([layer + LLAMA.embedding_params, layer, layer, layer])


@pytest.mark.parametrize(
    ("key", "changes", "nodes", "values"),
    [
        ("llama3_8b", {}, 8, dict(tp=1, pp=8, vpp=4)),
        ("llama3_8b", {"tied_embeddings": True}, 2, dict(tp=2, pp=2, vpp=2)),  # a copied head
        ("deepseek_v2_lite", {}, 2, dict(tp=2, pp=4, vpp=3, ep=2)),  # its first layer dense
    ],
)
def test_a_ranks_chunks_hold_what_its_stage_counts(
    key: str, changes: dict, nodes: int, values: dict
) -> None:
    """The chunks' parameters sum to the rank's own count (the stage's dense and expert
    parameters), so their shares sum to 1."""
    spec = model(key, **changes)
    cluster = catalog.load_cluster("h100", [f"cluster.num_nodes={nodes}"])
    job = Job(model=spec, cluster=cluster, train=TITAN)
    layout = Layout.resolve(8 * nodes, zero_stage=3, **values)  # type: ignore[arg-type]
    prices = JobPrices(job, analytical().constants)
    shape, stages, _, _ = prices.pipeline(layout)
    for rank, kind in enumerate(shape.rank_kinds):
        held = stages[kind].dense_params + stages[kind].expert_params
        chunks = chunk_params(spec, layout, shape.stage_layers, rank)
        assert len(chunks) == layout.vpp
        assert sum(chunks) == pytest.approx(held, rel=1e-12)


@pytest.mark.parametrize("vpp", [1, 2, 4])
def test_both_simulators_agree_on_the_interleaved_ranks_memory(vpp: int) -> None:
    """Llama-3-8B on 64 H100, pp 8: the last rank holds the most. Counting its chunks by layers
    gave 26.41 GiB against the hierarchical simulator's 27.88 at vpp 4 (whole states 3.91
    against 5.37 GiB); vpp 1 (nothing freed early) gives 7.81 GiB of whole states in both."""
    layout = dataclasses.replace(LAYOUT, vpp=vpp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hierarchical = catalog.load_simulator("hierarchical", ())
    found = hierarchical.simulate(JOB, layout)
    simulator = analytical()
    predicted = simulator.simulate(JOB, layout)
    assert predicted.memory_gib == pytest.approx(found.memory_gib, rel=0.01)
    unsharded = predicted.memory_breakdown_gib["unsharded"]
    assert unsharded == pytest.approx(found.memory_breakdown_gib["unsharded"], rel=0.01)
    if vpp == 1:
        assert unsharded == pytest.approx(7.81, abs=0.01)
    batch = simulator.simulate_many(JOB, [layout]).prediction(0)
    assert batch.memory_breakdown_gib == pytest.approx(predicted.memory_breakdown_gib)
