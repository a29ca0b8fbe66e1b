"""The command line as a user runs it: JSON output, the MLflow record, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SMALL = ["model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1"]


def run(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def mlflow_runs(uri: str, experiment: str):  # noqa: ANN201
    import mlflow

    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(experiment_names=[experiment], output_format="list")


def test_search_json_and_mlflow_record(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    proc = run("autotune", *SMALL, "output=json", f"tracking.uri={uri}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)  # exactly one JSON object on stdout
    best = payload["best"]
    assert best["dp"] * best["tp"] * best["pp"] * best["cp"] == payload["world_size"] == 8
    prediction = payload["prediction"]
    assert prediction["fits"] and prediction["memory_gib"] <= 64
    assert sum(prediction["breakdown"].values()) == pytest.approx(prediction["step_time_s"])
    assert payload["mode"] == "grid" and payload["exhaustive"]  # every layout priced
    assert payload["top_k"][0]["layout"] == best
    assert payload["launch_flags"]["framework"] == "mindspeed"  # the cluster's framework only
    assert "--tensor-model-parallel-size" in " ".join(payload["launch_flags"]["flags"])

    import mlflow

    runs = mlflow_runs(uri, "autotune")
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id]
    assert len(parent) == 1 and parent[0].info.run_id == payload["mlflow_run_id"]
    run_ = parent[0]
    assert run_.info.status == "FINISHED"
    assert run_.data.params["model"] == "Llama-2-7B" and run_.data.params["mode"] == "grid"
    assert run_.data.params["framework_release"] == "26.0.0"  # what the launch files are for
    assert run_.data.tags["simulator"] == "analytical" and run_.data.tags["cluster"] == "ascend"
    assert "**Best layout:**" in run_.data.tags["mlflow.note.content"]  # the run's description
    assert run_.data.metrics["best_step_time_s"] == pytest.approx(
        prediction["step_time_s"], rel=1e-5
    )
    assert len(children) == 5  # the top layouts, not one run per trial
    # MLflow lists the newest run first; the children were created so that it lists the best first
    assert [c.info.run_name.split()[0] for c in children] == ["#1", "#2", "#3", "#4", "#5"]
    client = mlflow.MlflowClient()
    artifacts = {a.path for a in client.list_artifacts(run_.info.run_id)}
    assert {"config.yaml", "layouts.csv", "layouts.json", "top_k.csv", "plots.html"} <= artifacts
    history = client.get_metric_history(run_.info.run_id, "best_step_time_s_by_layout")
    assert history and history[-1].value == pytest.approx(prediction["step_time_s"], rel=1e-5)
    assert {"launch/rank-1", "launch/rank-5"} <= {
        a.path for a in client.list_artifacts(run_.info.run_id, "launch")
    }
    script = tmp_path / "launch" / "rank-1" / "launch_mindspeed.sh"  # the best layout's
    assert str(script.relative_to(tmp_path)) in payload["launch_files"]
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert f"--tensor-model-parallel-size {best['tp']}\n" in script.read_text()
    experiment = client.get_experiment_by_name("autotune")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert experiment.tags["mlflow.note.content"].startswith("Layout searches of autotune")


@pytest.mark.slow
def test_search_table_shows_layouts_breakdown_and_flags(tmp_path: Path) -> None:
    proc = run(
        "autotune",
        *SMALL,
        "search.sampler=tpe",
        "search.n_trials=15",
        "tracking.enabled=false",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for text in (
        "Top 5 of ",
        "tpe, 15 trials; every layout also priced",
        "tok/s/dev",
        "MFU",
        "Time breakdown",
        "bubble",
        "MindSpeed-LLM (mindspeed 26.0.0):",
        "--tensor-model-parallel-size",
    ):
        assert text in out
    lines = (out + proc.stderr).splitlines()
    assert max(len(line) for line in lines) <= 120, max(lines, key=len)


@pytest.mark.slow  # two searches; test_search.py binds a study in this process
def test_a_stored_study_is_bound_to_the_training_settings(tmp_path: Path) -> None:
    """A study resumed with another setting of the step (here the gradient dtype) would mix
    two objectives: it is refused."""
    study = [
        *SMALL,
        "search.sampler=tpe",
        "search.n_trials=4",
        f"search.storage=sqlite:///{tmp_path / 'study.db'}",
        "search.study_name=bound",
        "tracking.enabled=false",
    ]
    first = run("autotune", *study, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    other = run("autotune", *study, "train.grad_reduce_in_fp32=false", cwd=tmp_path)
    assert other.returncode == 2 and "made for another job or sampler" in other.stderr


@pytest.mark.parametrize(
    "command",
    [["autotune.simulate"], ["autotune.console", "simulate"]],  # the second: `autotune simulate`
    ids=["module", "console-script"],
)
def test_simulate_one_layout_as_json(tmp_path: Path, command: list[str]) -> None:
    proc = run(
        *command,
        *SMALL,
        "parallel.tp=2",
        "parallel.pp=2",
        "output=json",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["layout"]["dp"] == 2 and payload["layout"]["sequence_parallel"] is True
    assert payload["prediction"]["step_time_s"] > 0


def test_simulate_writes_the_hierarchical_timeline_as_a_chrome_trace(tmp_path: Path) -> None:
    """The README's ``trace=`` example: the search's calibrated wrapper keeps the trace."""
    proc = run(
        "autotune.simulate",
        *SMALL,
        "parallel.tp=2",
        "simulator=hierarchical",
        "trace=trace.json",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert {e["ph"] for e in events} >= {"X"} and len(events) > 100


BAD_INPUT = [
    (
        "autotune.simulate",
        ["parallel.tp=3", "parallel.pp=7", "train.framework=megatron_lm"],
        "pp=7 does not divide",
    ),
    (
        "autotune.simulate",
        ["parallel.pp=2", "parallel.layer_split=[10,20]"],
        "layer_split [10, 20] sums to 30, expected num_layers=32",
    ),
    (
        "autotune.simulate",
        ["parallel.pp=2", "parallel.layer_split=[32,0]"],
        "has a stage with no layers",
    ),
    ("autotune", ["train.framework=nope"], "unknown framework 'nope'; available: "),
    ("autotune", ["train.precision=fp4"], "precision='fp4' is not one of"),
    ("autotune", ["train.precision=fp8"], "mindspeed' has none (use bf16)"),
    (
        "autotune",
        ["train.precision=fp8", "cluster=a100"],
        "precision fp8 on A100 SXM 80GB, which has no FP8 tensor cores",
    ),
    ("autotune", ["cluster.num_nodes=0"], "num_nodes=0 must be > 0"),
    ("autotune", ["train.global_batch_size=-4"], "global_batch_size=-4 must be > 0"),
    (
        "autotune",
        ["parallel.pp=7", "train.framework=megatron_lm"],
        "pp=7 does not divide num_layers=32",
    ),
    (
        "autotune",
        ["search.sampler=cmaes"],
        "available: auto, grid, screen, tpe, gp, random, nsga2",
    ),
    ("autotune", ["search.rerank=nope"], "unknown search.rerank simulator 'nope'"),
    ("autotune", ["search.rerank_top=0"], "search.rerank_top=0 must be >= 1"),
    ("autotune", ["search.storage=notaurl"], "is not a storage URL"),
    ("autotune", ["tracking.uri=notauri"], "tracking.uri='notauri' is not usable"),
    ("autotune", ["+model.layerz=3"], "unknown key(s) model.layerz (allowed: "),
    ("autotune", ["model.layerz=3"], "unknown key 'model.layerz'"),
    ("autotune", ["parallel.tp=abc"], "parallel.tp"),
    ("autotune", ["model=schema"], "unknown model 'schema'; available: "),
    ("autotune", ["--verbose"], "unknown option '--verbose'"),
    ("autotune", ["output=xml"], "allowed: table, json"),
]


def _first_of_each_command(cases: list[tuple[str, list[str], str]]) -> list[Any]:
    """A process each: the first case of each command in the default run, the others slow
    (``test_bad_input.py`` tries such input, rule by rule, in this process)."""
    params, seen = [], set()
    for case in cases:
        params.append(pytest.param(*case, marks=[pytest.mark.slow] if case[0] in seen else []))
        seen.add(case[0])
    return params


@pytest.mark.parametrize(("module", "args", "message"), _first_of_each_command(BAD_INPUT))
def test_bad_input_is_one_clear_message(
    tmp_path: Path, module: str, args: list[str], message: str
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    own_uri = any(a.startswith("tracking.uri=") for a in args)
    proc = run(module, *SMALL, *args, *([] if own_uri else [f"tracking.uri={uri}"]), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ")
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "mlflow.db").exists()  # no run was started, none left RUNNING


def test_unknown_model_lists_the_catalog(tmp_path: Path) -> None:
    proc = run("autotune", "model=nope", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: unknown model 'nope'; available: ")
    assert "llama2_70b" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "module",
    # a process each; test_cli_hydra.py checks every command's help in this process
    ["autotune"]
    + [
        pytest.param(module, marks=pytest.mark.slow)
        for module in (
            "autotune.simulate",
            "autotune.benchmark",
            "autotune.profile",
            "autotune.calibrate",
        )
    ],
)
def test_help_says_what_the_command_does(tmp_path: Path, module: str) -> None:
    proc = run(module, "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: python -m {module} ")
    assert "Examples:" in proc.stdout and f"python -m {module}" in proc.stdout


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path: Path) -> None:
    """``--help | head``: the pipe's reader is gone before the help is written; the command
    ends with a shell's SIGPIPE status, no traceback."""
    read, write = os.pipe()
    os.close(read)  # no reader at all: the first write breaks the pipe
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "autotune.simulate", "--help"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
    finally:
        os.close(write)
    assert proc.returncode == 128 + 13
    assert proc.stderr == ""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full (a device always full)")
@pytest.mark.parametrize(
    "args", [("--help",), ("model=llama2_7b", "cluster=a100", "parallel.tp=2")]
)
def test_an_output_that_takes_nothing_is_one_error_line(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """Standard output on a full disk: the command says so in one line, no traceback."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "autotune.simulate", *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        "error: the standard output cannot be written: No space left on device"
    )
    assert "Traceback" not in proc.stderr
