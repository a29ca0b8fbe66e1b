"""torchtitan's launch files (docs/torchtitan.md 7): the TOML parses, holds only keys of the
v0.2.2 job config with values of their annotated types, its degrees multiply to the world as
``ParallelDims`` checks, and the script's torchrun line uses a c10d rendezvous."""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from autotune import catalog
from autotune.launch import write_launch_files
from autotune.launch._torchtitan_keys import V0_2_2_KEYS
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import LayoutError

CASES = {
    "fsdp_tp": dict(tp=8, zero_stage=3),
    "hsdp_pp_cp": dict(tp=4, pp=4, cp=2, zero_stage=3, dp_replicate=2, recompute="full"),
    "interleaved": dict(tp=8, pp=4, vpp=2, zero_stage=3),
    "ddp": dict(zero_stage=0, micro_batch=1),
    "every_second_block": dict(tp=8, pp=2, zero_stage=3, recompute="full", recompute_layers=20),
}


def _job(nodes: int = 8, *overrides: str) -> Job:
    return catalog.load_job(
        "llama3_70b",
        "h100",
        [f"cluster.num_nodes={nodes}", "train.framework=torchtitan", *overrides],
    )


def _written(tmp_path: Path, values: dict, *overrides: str) -> tuple[dict, str, Layout]:
    job = _job(8, *overrides)
    layout = Layout.resolve(job.cluster.num_devices, **values)
    write_launch_files(job, layout, tmp_path)
    config = tomllib.loads((tmp_path / "torchtitan_job.toml").read_text())
    return config, (tmp_path / "launch_torchtitan.sh").read_text(), layout


def _leaves(table: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """The TOML's tables by dotted name, nested tables split out."""
    found: dict[str, dict[str, Any]] = {}
    for key, value in table.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            found.update(_leaves(value, name))
        else:
            found.setdefault(prefix, {})[key] = value
    return found


def _fits(value: Any, annotation: str) -> bool:
    """Whether ``value`` (from the TOML) is of ``annotation`` (job_config.py's spelling)."""
    if annotation.startswith("Literal["):
        return repr(value) in re.findall(r"'[^']*'|\"[^\"]*\"", annotation) or str(
            value
        ) in re.findall(r"[\w.-]+", annotation)
    kinds = {part.strip() for part in annotation.split("|")}
    checks = {
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "bool": lambda v: isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "list[str]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "list[list[str]]": lambda v: (
            isinstance(v, list)
            and all(isinstance(x, list) and all(isinstance(y, str) for y in x) for x in v)
        ),
    }
    return any(checks[k](value) for k in kinds if k in checks)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_toml_holds_only_v0_2_2_keys_of_their_types(tmp_path: Path, case: str) -> None:
    config, _, _ = _written(tmp_path, CASES[case])
    for table, values in _leaves(config).items():
        assert table in V0_2_2_KEYS, table
        for key, value in values.items():
            assert key in V0_2_2_KEYS[table], f"{table}.{key}"
            assert _fits(value, V0_2_2_KEYS[table][key]), (table, key, value)


@pytest.mark.parametrize("case", sorted(CASES))
def test_degrees_multiply_to_the_world_and_stages_hold_every_layer(
    tmp_path: Path, case: str
) -> None:
    config, _, layout = _written(tmp_path, CASES[case])
    par = config["parallelism"]
    degrees = [
        par["data_parallel_replicate_degree"],
        par["data_parallel_shard_degree"],
        par["context_parallel_degree"],
        par["tensor_parallel_degree"],
        par["pipeline_parallel_degree"],
    ]
    assert math.prod(degrees) == 64
    dp = degrees[0] * degrees[1]
    batch = config["training"]
    assert batch["global_batch_size"] % (batch["local_batch_size"] * dp) == 0  # train.py
    if layout.pp > 1:
        parts = par["module_fqns_per_model_part"]
        assert len(parts) == layout.pp * layout.vpp
        names = [name for part in parts for name in part]
        layers = [f"layers.{i}" for i in range(80)]
        assert names == ["tok_embeddings", *layers, "norm", "output"]
        assert batch["local_batch_size"] % par["pipeline_parallel_microbatch_size"] == 0
        schedule = "Interleaved1F1B" if layout.vpp > 1 else "1F1B"
        assert par["pipeline_parallel_schedule"] == schedule
    if layout.sharding == 0:
        assert degrees[0] == 64 and degrees[1] == 1  # DDP


def test_recompute_and_fp8_map_to_their_keys(tmp_path: Path) -> None:
    config, _, _ = _written(tmp_path, CASES["every_second_block"])
    assert config["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}
    config, _, _ = _written(tmp_path, dict(tp=8, zero_stage=3), "train.precision=fp8")
    assert config["model"]["converters"] == ["quantize.linear.float8"]
    assert config["quantize"]["linear"]["float8"]["recipe_name"] == "rowwise"


def test_the_script_runs_torchrun_with_a_rendezvous_and_the_config(tmp_path: Path) -> None:
    _, script, _ = _written(tmp_path, CASES["fsdp_tp"])
    assert script.startswith("#!/usr/bin/env bash\n# torchtitan launch written by autotune")
    for words in (
        "--nnodes 8",
        "--nproc_per_node 8",
        "--rdzv_backend c10d",
        "-m torchtitan.train",
    ):
        assert words in script
    flags = re.findall(r"'?(--[a-z_]+\.[a-z_]+)", script)
    assert "--job.config_file" in flags
    for option in flags:  # every override is a key of the release
        table, key = option[2:].rsplit(".", 1)
        assert key in V0_2_2_KEYS[table], option


def test_a_model_torchtitan_has_no_flavor_of_is_refused(tmp_path: Path) -> None:
    job = catalog.load_job(
        "qwen2_5_72b", "h100", ["cluster.num_nodes=8", "train.framework=torchtitan"]
    )
    layout = Layout.resolve(64, tp=8, zero_stage=3)
    with pytest.raises(LayoutError, match="no flavor it has matches"):
        write_launch_files(job, layout, tmp_path)
    assert not list(tmp_path.iterdir())
