"""Full recompute of some layers (``recompute_layers``) with virtual stages: how many layers of
each model chunk run recomputed is the framework's (``FrameworkSpec.recomputed_chunk_layers``),
and both simulators and the Megatron launch flag read that one count.

Llama-3-8B's 32 layers over pp 4 are 8 a stage, over vpp 2 two chunks of 4. With
``recompute_layers=3`` Megatron-Core is launched with ``--recompute-num-layers 2``, which its
block method applies to each chunk: 2 + 2 = 4 of the 8 run recomputed. MindSpeed-LLM counts
per rank (``--enable-recompute-layers-per-pp-rank``: layer l of chunk c when l * 2 + c < 3):
2 + 1 = 3.
"""

from __future__ import annotations

import pytest

from autotune import catalog
from autotune.launch import layout_flags
from autotune.simulators import Job
from autotune.simulators import Layout

pytest.importorskip("autotune.simulators.hierarchical.compile")

SIMULATORS = ("analytical", "hierarchical")
STAGE = 32 // 4  # Llama-3-8B's layers per stage over pp 4


def _job(framework: str, cluster: str, *overrides: str) -> Job:
    return catalog.load_job(
        "llama3_8b", cluster, ["cluster.num_nodes=2", f"train.framework={framework}", *overrides]
    )


def _layout(recompute_layers: int | None, recompute: str = "full") -> Layout:
    return Layout.resolve(16, pp=4, vpp=2, recompute=recompute, recompute_layers=recompute_layers)


@pytest.mark.parametrize(
    ("framework", "count", "chunks", "expected"),
    [
        ("megatron_core", 3, (4, 4), (2, 2)),  # ceil(3 / 2) in each chunk
        ("megatron_core", 5, (4, 4), (3, 3)),
        ("megatron_core", 3, (2, 1), (2, 1)),  # a short chunk recomputes all it has
        ("megatron_lm", 3, (4, 4), (2, 2)),
        ("megatron_core", 3, (8,), (3,)),  # one chunk: the count itself
        ("mindspeed", 3, (4, 4), (2, 1)),  # l * 2 + c < 3: (0, 0), (1, 0), (0, 1)
        ("mindspeed", 5, (2, 2, 2), (2, 2, 1)),
        ("mindspeed", 3, (8,), (3,)),
        ("torchtitan", 2, (4, 4), (1, 1)),  # every 4th block: blocks 4 and 8
        ("torchtitan", 1, (4, 4), (0, 1)),  # every 8th: block 8, in the second chunk
        ("torchtitan", 4, (4, 4), (2, 2)),
        ("megatron_deepspeed", 3, (8,), (3,)),  # no virtual stages
    ],
)
def test_each_framework_recomputes_its_own_layers_of_each_chunk(
    framework: str, count: int, chunks: tuple[int, ...], expected: tuple[int, ...]
) -> None:
    spec = catalog.load_framework(framework)
    assert spec.recomputed_chunk_layers(count, chunks) == expected


def test_a_layout_counts_the_recomputed_layers_of_each_chunk_by_its_framework() -> None:
    lay = _layout(3)
    core = _job("megatron_core", "h100").train
    mindspeed = _job("mindspeed", "ascend").train
    assert lay.recomputed_chunks(STAGE, core) == (2, 2)
    assert lay.recomputed_layers(STAGE, core) == 4
    assert lay.recomputed_chunks(STAGE, mindspeed) == (2, 1)
    assert lay.recomputed_layers(STAGE, mindspeed) == 3
    assert _layout(None).recomputed_chunks(STAGE, core) == (4, 4)
    assert _layout(None, recompute="selective").recomputed_chunks(STAGE, core) == (0, 0)


def _recompute_share(name: str, job: Job, count: int) -> tuple[float, float]:
    """(recompute seconds against full recompute's, device GiB) of ``count`` layers a stage."""
    simulator = catalog.load_simulator(name)
    some = simulator.simulate(job, _layout(count))
    every = simulator.simulate(job, _layout(None))
    return some.breakdown["recompute"] / every.breakdown["recompute"], some.memory_gib


@pytest.mark.parametrize("name", SIMULATORS)
def test_megatron_recomputes_ceil_of_the_count_over_vpp_in_each_chunk(name: str) -> None:
    """Of rank 0's 8 layers, 4 run recomputed for 3 (and for 4), 2 for 1 (and for 2): the
    recompute takes that share of full recompute's, each layer alike (TP 1: no collectives),
    and the memory of 3 is that of 4."""
    job = _job("megatron_core", "h100")
    for low, high, recomputed in ((1, 2, 2), (3, 4, 4)):
        share, memory = _recompute_share(name, job, low)
        assert share == pytest.approx(recomputed / STAGE, rel=1e-3)
        assert memory == pytest.approx(_recompute_share(name, job, high)[1], rel=1e-9)


@pytest.mark.parametrize("name", SIMULATORS)
def test_mindspeed_recomputes_the_count_itself_over_its_chunks(name: str) -> None:
    """--enable-recompute-layers-per-pp-rank: 3 of rank 0's 8 layers, as with one chunk."""
    share, _ = _recompute_share(name, _job("mindspeed", "ascend"), 3)
    assert share == pytest.approx(3 / STAGE, rel=1e-3)


def test_both_simulators_agree_on_the_interleaved_block_recompute() -> None:
    """The reported case (Llama-3-8B, 2 H100 nodes, pp 4, vpp 2, recompute_layers 3): the
    analytical simulator priced 3 of 8 layers (60.1 GiB), the hierarchical one 4 (53.7)."""
    job = _job("megatron_core", "h100")
    gib = [
        catalog.load_simulator(name).simulate(job, _layout(3)).memory_gib for name in SIMULATORS
    ]
    assert gib[0] == pytest.approx(gib[1], rel=0.01)
    assert gib[0] == pytest.approx(53.7, abs=0.1)


@pytest.mark.parametrize(
    ("framework", "cluster", "count", "flags"),
    [
        ("megatron_core", "h100", 3, ["--recompute-num-layers 2"]),
        ("megatron_core", "h100", 4, ["--recompute-num-layers 2"]),
        ("megatron_core", "h100", 5, ["--recompute-num-layers 3"]),
        ("megatron_lm", "a100", 3, ["--recompute-num-layers 2"]),
        (
            "mindspeed",
            "ascend",
            3,
            ["--recompute-num-layers 3", "--enable-recompute-layers-per-pp-rank"],
        ),
    ],
)
def test_the_launch_flag_recomputes_what_is_priced(
    framework: str, cluster: str, count: int, flags: list[str]
) -> None:
    """Megatron's block method recomputes the first N layers of every chunk (fewer where the
    chunk is shorter): N per chunk is the priced count of each chunk of every stage."""
    job = _job(framework, cluster)
    lay = _layout(count)
    written = layout_flags(job, lay).flags
    assert [f for f in written if f in flags or "recompute-num" in f] == flags
    if framework == "mindspeed":
        return
    per_chunk = int(flags[0].split()[-1])
    for stage in lay.stage_layers(job.model, job.train):
        chunks = lay.recomputed_chunks(stage, job.train)
        assert chunks == tuple(min(per_chunk, n) for n in (stage // 2,) * 2)
