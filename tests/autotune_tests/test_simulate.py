"""``python -m autotune.simulate`` with the hierarchical simulator: per-rank views, op costs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune import catalog
from autotune import simulate as simulate_cli
from autotune.report import op_class_table
from autotune.report import rank_table
from autotune.report import rank_views
from autotune.simulators import Layout
from autotune.simulators.hierarchical.graph import layer_shapes

compile_mod = pytest.importorskip("autotune.simulators.hierarchical.compile")

# Llama-2-7B, cut to 8 layers and 2k tokens: compiles in about a second.
SMALL = [
    "model=llama2_7b",
    "model.num_layers=8",
    "train.seq_len=2048",
    "train.global_batch_size=32",
    "cluster=ascend",
    "cluster.num_nodes=1",
    "simulator=hierarchical",
]
LAYOUT = ["parallel.tp=2", "parallel.pp=4"]


def _strict(text: str) -> Any:
    """JSON with finite numbers only (NaN and Infinity are refused)."""

    def refuse(constant: str) -> None:
        raise ValueError(f"non-finite number {constant} in the JSON")

    return json.loads(text, parse_constant=refuse)


def test_table_shows_every_rank_and_the_op_classes(capsys: pytest.CaptureFixture[str]) -> None:
    assert simulate_cli.main([*SMALL, *LAYOUT]) == 0
    out = capsys.readouterr().out
    assert "Per pipeline rank (1f1b schedule, the step is rank " in out
    table = out.split("Per pipeline rank")[1].split("\n\n")[0].splitlines()
    assert table[1].split()[:4] == ["rank", "layers", "step", "s"]
    assert [line.split()[:2] for line in table[2:]] == [[str(r), "2"] for r in range(4)]
    classes = out.split("Compute time by operator class")[1].split("\n\n")[0]
    assert all(name in classes for name in ("matmul", "attention", "memory", "%"))
    assert max(len(line) for line in out.splitlines()) <= 120


def test_json_holds_the_views_with_finite_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert simulate_cli.main([*SMALL, *LAYOUT, "output=json"]) == 0
    payload = _strict(capsys.readouterr().out)
    views = payload["views"]
    assert len(views["ranks"]) == 4 and views["schedule"] == "1f1b"
    step = payload["prediction"]["step_time_s"]
    assert views["ranks"][views["slowest_rank"]]["step_time_s"] == pytest.approx(step, rel=1e-12)
    for rank in views["ranks"]:
        assert sum(rank["breakdown_s"].values()) == pytest.approx(rank["step_time_s"])
        assert sum(rank["memory_breakdown_gib"].values()) == pytest.approx(rank["memory_gib"])
        assert set(rank["op_category_time_s"]) == {"matmul", "attention", "memory"}
    assert max(r["memory_gib"] for r in views["ranks"]) == payload["prediction"]["memory_gib"]


def test_analytical_has_no_rank_views(capsys: pytest.CaptureFixture[str]) -> None:
    args = [a for a in SMALL if a != "simulator=hierarchical"]
    assert simulate_cli.main([*args, *LAYOUT, "output=json"]) == 0
    assert "views" not in _strict(capsys.readouterr().out)


def _views(**detail: Any) -> dict[str, Any]:
    """Views of a made-up prediction with ``pp`` ranks (defaults: 40 ranks, rank 7 slowest)."""
    from autotune.simulators import Prediction

    pp = detail.pop("pp", 40)
    times = dict.fromkeys(("compute", "bubble"), 1.0)
    memory = {"weights": 1.0, "activations": 2.0, "reserved": 1.0}
    base: dict[str, Any] = {
        "schedule": "1f1b",
        "stage_layers": [2] * pp,
        "slowest_rank": 7,
        "rank_time_s": [2.0] * pp,
        "rank_breakdown_s": [times] * pp,
        "rank_memory_gib": [4.0] * 20 + [9.0] + [4.0] * (pp - 21),
        "rank_memory_breakdown_gib": [memory] * pp,
        "rank_op_category_time_s": [{"matmul": 1.0, "attention": 0.0, "memory": 0.0}] * pp,
        "op_category_time_s": {"matmul": 1.0, "attention": float("nan"), "memory": 0.0},
    }
    prediction = Prediction(
        step_time_s=2.0,
        memory_gib=9.0,
        memory_capacity_gib=64.0,
        breakdown=times,
        memory_breakdown_gib=memory,
        tokens_per_s_per_device=1.0,
        mfu=0.5,
        detail={**base, **detail},
    )
    views = rank_views(prediction)
    assert views is not None
    return views


def test_many_ranks_list_the_first_last_slowest_and_fullest() -> None:
    views = _views()
    assert views["op_category_time_s"]["attention"] is None  # NaN becomes null
    json.dumps(views, allow_nan=False)
    rows = rank_table(views).splitlines()
    assert [row.split()[0] for row in rows[1:5]] == ["0", "7", "20", "39"]
    assert rows[-1] == "(36 more ranks in output=json)"
    assert "CP" not in rows[0]  # a time column that is zero on every rank is left out
    assert "-" in op_class_table(views)  # the NaN class prints as "-"


def test_op_costs_coverage_and_device_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = catalog.load_job("llama2_7b", "ascend", [a for a in SMALL if "." in a])
    layout = Layout.resolve(job.cluster.num_devices, tp=2, pp=4)
    ops = {
        (op.name, op.signature, op.dtype)
        for shape in layer_shapes(job, layout).values()
        for op in compile_mod.compile_layer(shape).forward
        if op.category == "matmul"
    }
    for device, warned in (("cpu", True), ("Ascend910B2", False)):
        table = tmp_path / f"{device}.csv"
        rows = ["op,shapes,dtype,device,time_us"]
        rows += [f'{name},"{signature}",{dtype},{device},100' for name, signature, dtype in ops]
        table.write_text("\n".join(rows) + "\n")
        args = [*SMALL, *LAYOUT, f"simulator.op_costs={table}"]
        assert simulate_cli.main(args) == 0
        captured = capsys.readouterr()
        assert f"Op costs: {len(ops)} of the layout's " in captured.out
        assert ("warning: " in captured.err) == warned
        if warned:
            expected = f"{table} was profiled on cpu, not on the cluster's Ascend 910B2"
            assert expected in captured.err
        assert simulate_cli.main([*args, "output=json"]) == 0
        costs = _strict(capsys.readouterr().out)["views"]["op_costs"]
        assert costs["profiled"] == len(ops) and costs["same_device"] is not warned
        assert costs["operators"] == costs["profiled"] + costs["roofline"] > len(ops)


@pytest.mark.parametrize(
    ("table_device", "cluster", "same"),
    [
        ("cpu", "ascend", False),
        ("Ascend910B2", "ascend", True),
        ("Ascend910B2", "ascend910", False),
        ("NVIDIA H100 80GB HBM3", "h100", True),
        ("NVIDIA A100-SXM4-80GB", "a100", True),
        ("NVIDIA A100-SXM4-80GB", "h100", False),
        ("NVIDIA B200", "gb200", True),
        ("Tesla V100-SXM2-16GB", "v100", True),
    ],
)
def test_a_table_knows_the_device_it_was_timed_on(
    table_device: str, cluster: str, same: bool
) -> None:
    from autotune.simulators.hierarchical.cost import CostTable

    table = CostTable(path="ops.csv", device=table_device, seconds={})
    assert table.profiled_on(catalog.load_cluster(cluster).device) is same


def test_recompute_modules_compose_through_hydra(capsys: pytest.CaptureFixture[str]) -> None:
    """``parallel.recompute_modules=[...]`` is a list override: the layout keeps it sorted,
    the launch flags name it, and selective recompute of the MLP costs recompute time."""
    layout = [*LAYOUT, "parallel.recompute=selective"]
    assert simulate_cli.main([*SMALL, *layout, "output=json"]) == 0
    default = _strict(capsys.readouterr().out)
    modules = "parallel.recompute_modules=[mlp,layernorm,core_attn]"
    assert simulate_cli.main([*SMALL, *layout, modules, "output=json"]) == 0
    named = _strict(capsys.readouterr().out)
    assert named["layout"]["recompute_modules"] == ["core_attn", "layernorm", "mlp"]
    assert default["layout"]["recompute_modules"] is None
    recompute = [p["prediction"]["breakdown"]["recompute"] for p in (default, named)]
    assert recompute[1] > recompute[0]
    assert simulate_cli.main([*SMALL, *layout, modules]) == 0
    assert "--recompute-modules core_attn layernorm mlp" in capsys.readouterr().out


def test_sharding_composes_through_hydra(capsys: pytest.CaptureFixture[str]) -> None:
    """``parallel.zero_stage=3 parallel.dp_replicate=2`` as a user types them: the layout
    holds them, the weights are sharded over a replica's ranks (memory drops), and the launch
    flags run Megatron-FSDP with two optimizer instances; ``parallel.zero_stage=0`` is
    ``distributed_optimizer=false``."""
    h100 = [*SMALL[:4], "cluster=h100", "cluster.num_nodes=1", "simulator=analytical"]
    sharded = ["parallel.tp=2", "parallel.zero_stage=3", "parallel.dp_replicate=2"]
    assert simulate_cli.main([*h100, "parallel.tp=2", "output=json"]) == 0
    plain = _strict(capsys.readouterr().out)
    assert simulate_cli.main([*h100, *sharded, "output=json"]) == 0
    zero3 = _strict(capsys.readouterr().out)
    assert (zero3["layout"]["zero_stage"], zero3["layout"]["dp_replicate"]) == (3, 2)
    weights = [p["prediction"]["memory_breakdown_gib"]["weights"] for p in (plain, zero3)]
    assert weights[1] == pytest.approx(weights[0] / 2)  # dp 4: two replicas of 2 shards
    peaks = zero3["prediction"]["peaks_gib"]  # each measure a framework's log may print
    assert peaks["allocated"] < peaks["reserved"] < peaks["device"]
    assert simulate_cli.main([*h100, *sharded]) == 0
    out = capsys.readouterr().out
    assert "--data-parallel-sharding-strategy optim_grads_params" in out
    assert "--num-distributed-optimizer-instances 2" in out
    assert f"{peaks['reserved']:.2f} reserved (allocator)" in out
    assert simulate_cli.main([*h100, "parallel.zero_stage=0", "output=json"]) == 0
    stage0 = _strict(capsys.readouterr().out)["layout"]
    assert (stage0["zero_stage"], stage0["distributed_optimizer"]) == (None, False)


def test_the_first_pipeline_ranks_peak_is_shown_where_it_is_not_the_fullest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Megatron-DeepSpeed's last stage keeps fp32 logits buffers the first does not: a
    reading taken on rank 0 alone shows the first stage's peak (docs/decisions/0069)."""
    job = ["model=llama3_8b", "cluster=a100", "cluster.num_nodes=1", "train.seq_len=4096"]
    job += ["train.global_batch_size=64", "train.framework=megatron_deepspeed"]
    layout = ["parallel.pp=4", "parallel.recompute=full", "parallel.micro_batch=4"]
    assert simulate_cli.main([*job, *layout]) == 0
    lines = capsys.readouterr().out.splitlines()
    fullest = next(line for line in lines if "as measured:" in line)
    first = next(line for line in lines if "the first pipeline rank's:" in line)
    device = [float(line.split(" device")[0].split()[-1]) for line in (fullest, first)]
    assert device[1] < device[0]
    assert simulate_cli.main([*job, *layout, "output=json"]) == 0
    prediction = _strict(capsys.readouterr().out)["prediction"]
    assert prediction["first_rank_peaks_gib"]["device"] == pytest.approx(device[1], abs=0.01)
    assert prediction["peaks_gib"]["device"] == pytest.approx(device[0], abs=0.01)
    assert simulate_cli.main([*job, "parallel.tp=8"]) == 0  # one stage: one peak
    assert "the first pipeline rank's" not in capsys.readouterr().out
    assert simulate_cli.main([*job, "parallel.tp=8", "output=json"]) == 0
    one = _strict(capsys.readouterr().out)["prediction"]
    assert one["first_rank_peaks_gib"] == one["peaks_gib"]
