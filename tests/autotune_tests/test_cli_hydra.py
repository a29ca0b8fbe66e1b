"""What a Hydra user types, through each command's entry point: ``--cfg job|all|hydra``,
``--resolve``, ``--info``, ``-m`` with Hydra's sweep syntax, ``hydra.*`` keys, and a search
that records its config without MLflow.

The commands run in this process (``main``) from an empty folder; the bad-input cases of these
flags (one ``error:`` line, exit 2, nothing written) are in ``test_bad_input.py``.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import benchmarks._readme as readme
from autotune import _signals
from autotune import catalog
from autotune.cli import Command
from autotune.cli import help_text
from autotune.cli import run_command
from autotune.config import AutotuneConfig

MAINS = {
    "autotune": "autotune.__main__",
    "autotune.simulate": "autotune.simulate",
    "autotune.benchmark": "autotune.benchmark.__main__",
    "autotune.profile": "autotune.profile",
    "autotune.calibrate": "autotune.calibrate.__main__",
}
SMALL = ("model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1")
# What each command needs to compose (calibrate has no default data and name).
BASE = {
    "autotune": SMALL,
    "autotune.simulate": SMALL,
    "autotune.benchmark": (),
    "autotune.profile": SMALL,
    "autotune.calibrate": ("data=korthikanti", "name=mine"),
}
OFF = "tracking.enabled=false"

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run_main(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Run:
    """Run a command's ``main`` from an empty folder; (status, stdout, stderr)."""
    monkeypatch.delenv("AUTOTUNE_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)

    def run(module: str, *args: str) -> tuple[int, str, str]:
        status = importlib.import_module(MAINS[module]).main(list(args))
        out, err = capsys.readouterr()
        return status, out, err

    return run


def _documents(text: str) -> list[dict[str, Any]]:
    """The JSON objects printed one after the other (one per job of a sweep)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        document, at = decoder.raw_decode(text, at)
        found.append(document)
    return found


def _configs(text: str) -> list[dict[str, Any]]:
    """The configs printed one after the other by ``--cfg`` (each starts with its first key)."""
    first = text.splitlines()[0]
    chunks = text.split(first + "\n")[1:]
    return [yaml.safe_load(first + "\n" + chunk) for chunk in chunks]


def _headers(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("[")]


# --cfg, --resolve ------------------------------------------------------------------------


@pytest.mark.parametrize("module", sorted(MAINS))
def test_cfg_job_and_all_print_the_composed_config_as_cfg_does(run_main: Run, module: str) -> None:
    base = BASE[module]
    status, plain, err = run_main(module, *base, "--cfg")
    assert status == 0, err
    assert yaml.safe_load(plain)  # the composed config, as YAML
    for flags in (["--cfg", "job"], ["--cfg", "all"], ["--cfg=job"], ["--resolve", "--cfg"]):
        status, out, err = run_main(module, *base, *flags)
        assert (status, out, err) == (0, plain, ""), flags
    assert list(Path.cwd().iterdir()) == []  # shown, not run


def test_cfg_stands_anywhere_and_takes_no_override_as_its_value(run_main: Run) -> None:
    status, out, err = run_main("autotune.simulate", "--cfg", *SMALL, "parallel.tp=2")
    assert status == 0, err
    assert yaml.safe_load(out)["parallel"]["tp"] == 2


# --info -------------------------------------------------------------------------------------


def test_info_shows_the_search_path_the_groups_and_the_defaults_list(run_main: Run) -> None:
    status, out, err = run_main("autotune.simulate", "--info", "model=llama2_7b")
    assert status == 0, err
    assert f"main      file://{catalog.conf_dir()}" in out
    groups = {
        line.split(":")[0].strip()
        for line in out.split("Config groups")[1].split("\n\n")[0].splitlines()[1:]
        if not line.startswith("    ")
    }
    assert groups == {"calibrate", "cluster", "framework", "model", "search", "simulator", "train"}
    assert "  simulator: analytical, hierarchical\n" in out
    defaults = out.split("Defaults list of config.yaml")[1]
    rows = [line.split()[0] for line in defaults.splitlines()[2:] if line.strip()]
    assert rows == [
        "autotune_schema",
        "model/llama2_7b",  # the override's choice
        "cluster/ascend",
        "train/default",
        "simulator/analytical",
        "search/default",
        "calibrate/default",
        "config",
    ]


def test_info_lists_a_searchpath_folder_and_its_own_models(run_main: Run, tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    (folder / "model").mkdir(parents=True)
    own = (catalog.conf_dir() / "model" / "llama2_7b.yaml").read_text()
    (folder / "model" / "my_llama.yaml").write_text(own.replace("Llama-2-7B", "my-llama"))
    path = f"hydra.searchpath=[file://{folder}]"
    status, out, err = run_main("autotune", "--info", "searchpath", path)
    assert status == 0, err
    assert f"file://{folder}" in out and "Config groups" not in out
    status, out, err = run_main("autotune", "--info", "groups", path, "model=my_llama")
    assert status == 0, err
    assert "my_llama" in out.split("  model: ")[1].split("\n  search")[0]


@pytest.mark.parametrize(
    "module", ["autotune.benchmark", "autotune.calibrate", "autotune.profile"]
)
def test_info_defaults_names_each_command_s_root_config(run_main: Run, module: str) -> None:
    status, out, err = run_main(module, *BASE[module], "--info=defaults")
    assert status == 0, err
    root = importlib.import_module(MAINS[module]).COMMAND.config_name
    assert out.startswith(f"Defaults list of {root}.yaml")
    assert f"{root} (_self_)" in out


# -m, --multirun ----------------------------------------------------------------------------


def test_a_sweep_runs_one_job_per_combination_in_hydra_s_order(run_main: Run) -> None:
    status, out, err = run_main(
        "autotune.simulate", "-m", *SMALL, "parallel.pp=1,2", "parallel.tp=1,2", "output=json"
    )
    assert status == 0, err
    runs = [(d["layout"]["pp"], d["layout"]["tp"]) for d in _documents(out)]
    assert runs == [(1, 1), (1, 2), (2, 1), (2, 2)]  # the last override varies fastest
    assert _headers(err) == [
        "[1/4] parallel.pp=1 parallel.tp=1",
        "[2/4] parallel.pp=1 parallel.tp=2",
        "[3/4] parallel.pp=2 parallel.tp=1",
        "[4/4] parallel.pp=2 parallel.tp=2",
    ]


@pytest.mark.parametrize(
    ("sweep", "values"),
    [
        ("search.n_trials=range(10,40,10)", [10, 20, 30]),
        ("search.n_trials=choice(50,5)", [50, 5]),
        ("model=glob(llama3_*)", ["llama3_405b", "llama3_70b", "llama3_8b"]),
        ("search.n_trials=7", [7]),  # nothing to sweep: one job
    ],
)
def test_range_choice_and_glob_expand_as_hydra_expands_them(
    run_main: Run, sweep: str, values: list[Any]
) -> None:
    status, out, err = run_main("autotune", "--cfg", "-m", "cluster=ascend", sweep)
    assert status == 0, err
    configs = _configs(out)
    key = sweep.split("=")[0]
    if key == "model":
        names = {v: catalog.load_model(v).name for v in values}
        assert [c["model"]["name"] for c in configs] == [names[v] for v in values]
    else:
        assert [c["search"]["n_trials"] for c in configs] == values
    assert len(_headers(err)) == len(values)


def test_m_with_nothing_to_sweep_runs_one_job_as_without_it(run_main: Run) -> None:
    args = (*SMALL, "parallel.tp=2", "output=json")
    status, once, err = run_main("autotune.simulate", *args)
    assert status == 0, err
    status, swept, err = run_main("autotune.simulate", "-m", *args)
    assert status == 0, err
    assert swept == once
    assert _headers(err) == [f"[1/1] {' '.join(args)}"]
    status, out, err = run_main("autotune", "--multirun", "--cfg", *SMALL)
    assert status == 0 and yaml.safe_load(out)["launch_dir"] == "launch"  # not numbered


def test_every_job_runs_and_the_exit_status_is_the_worst(run_main: Run) -> None:
    """tp=3 does not divide 32 heads: that job fails, the others still run, in order."""
    status, out, err = run_main(
        "autotune.simulate", "-m", *SMALL, "parallel.tp=2,3,4", "output=json"
    )
    assert status == 2
    assert [d["layout"]["tp"] for d in _documents(out)] == [2, 4]
    lines = err.splitlines()
    failed = lines.index("[2/3] parallel.tp=3")
    assert lines[failed + 1].startswith("error: layout dp2 tp3 ")
    assert "[3/3] parallel.tp=4" in lines[failed + 1 :]


NUMBERED = [
    ("autotune", ["search.top_k=1,2"], "launch_dir", ["launch/1", "launch/2"]),
    ("autotune", ["probes=1", "search.seed=1,2"], "probes_out", ["1/probes.csv", "2/probes.csv"]),
    ("autotune.simulate", ["trace=t.json", "parallel.tp=1,2"], "trace", ["1/t.json", "2/t.json"]),
    (
        "autotune.benchmark",
        ["seed=0,1"],
        "report_dir",
        ["benchmark_report/1", "benchmark_report/2"],
    ),
    ("autotune.profile", ["out=ops.csv", "repeats=1,2"], "out", ["1/ops.csv", "2/ops.csv"]),
    (
        "autotune.calibrate",
        ["out=c/x.yaml", "rows.model=a,b"],
        "out",
        ["c/1/x.yaml", "c/2/x.yaml"],
    ),
]
APART = [
    ("autotune", ["launch_dir=a,b"], "launch_dir", ["a", "b"]),  # the sweep sets them apart
    ("autotune", ["launch_dir=null", "search.seed=1,2"], "launch_dir", [None, None]),
    ("autotune.simulate", ["parallel.tp=1,2"], "trace", [None, None]),
]


@pytest.mark.parametrize(("module", "args", "key", "paths"), NUMBERED)
def test_an_output_two_jobs_share_goes_to_a_numbered_subfolder(
    run_main: Run, module: str, args: list[str], key: str, paths: list[str]
) -> None:
    status, out, err = run_main(module, "--cfg", "-m", *BASE[module], *args)
    assert status == 0, err
    assert [c[key] for c in _configs(out)] == paths
    headers = _headers(err)  # each says where its job's output went
    assert all(f"{key}={p}" in h for h, p in zip(headers, paths, strict=True)), headers


@pytest.mark.parametrize(("module", "args", "key", "paths"), APART)
def test_outputs_the_jobs_do_not_share_stay_as_given(
    run_main: Run, module: str, args: list[str], key: str, paths: list[str | None]
) -> None:
    status, out, err = run_main(module, "--cfg", "-m", *BASE[module], *args)
    assert status == 0, err
    assert [c[key] for c in _configs(out)] == paths
    assert not any("(" in header for header in _headers(err))


def test_calibrations_named_apart_stay_where_their_names_put_them(run_main: Run) -> None:
    status, out, err = run_main(
        "autotune.calibrate", "--cfg", "-m", "data=korthikanti", "name=a,b"
    )
    assert status == 0, err
    assert [c["out"] for c in _configs(out)] == [None, None]  # calibrations/a.yaml, b.yaml
    status, out, err = run_main(
        "autotune.calibrate", "--cfg", "-m", "data=korthikanti,vtrain", "name=same"
    )
    assert status == 0, err
    calibrations = catalog.CALIBRATIONS
    assert [c["out"] for c in _configs(out)] == [
        str(calibrations / "1" / "same.yaml"),
        str(calibrations / "2" / "same.yaml"),
    ]


def test_a_sweep_of_searches_writes_each_job_s_launch_files_and_config_apart(
    run_main: Run, tmp_path: Path
) -> None:
    status, out, err = run_main(
        "autotune", "-m", *SMALL, OFF, "search.top_k=1", "search.seed=1,2", "output=json"
    )
    assert status == 0, err
    for number, payload in enumerate(_documents(out), start=1):
        assert payload["launch_files"] == [f"launch/{number}/rank-1/launch_mindspeed.sh"]
        assert payload["config_file"] == f"launch/{number}/config.yaml"
        config = yaml.safe_load((tmp_path / payload["config_file"]).read_text())
        assert config["search"]["seed"] == number and config["launch_dir"] == f"launch/{number}"
    assert sorted(p.name for p in (tmp_path / "launch").iterdir()) == ["1", "2"]


@pytest.mark.slow
def test_each_job_of_a_sweep_is_its_own_mlflow_run(run_main: Run, tmp_path: Path) -> None:
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    status, out, err = run_main(
        "autotune", "-m", *SMALL, f"tracking.uri={uri}", "search.seed=1,2", "output=json"
    )
    assert status == 0, err
    ids = [payload["mlflow_run_id"] for payload in _documents(out)]
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs(
        [client.get_experiment_by_name("autotune").experiment_id],
        filter_string="tags.`autotune.command` = 'search'",
    )
    assert len(set(ids)) == 2 and {r.info.run_id for r in runs} == set(ids)


@pytest.mark.parametrize("deferred", [False, True], ids=["interrupted", "stopped_after_its_work"])
def test_a_signal_stops_the_sweep_after_the_job_in_flight(
    capsys: pytest.CaptureFixture[str], deferred: bool
) -> None:
    """SIGINT in job 2 of 4: job 2 stops as the signal asks (at once, or after the work it
    defers the signal for, as a search does), jobs 3 and 4 never start, exit 130."""
    ran: list[int] = []

    def run(config: AutotuneConfig) -> None:
        ran.append(config.search.seed)
        if config.search.seed == 2:
            if deferred:
                with _signals.deferred(lambda number: None):
                    os.kill(os.getpid(), signal.SIGINT)
            else:
                os.kill(os.getpid(), signal.SIGINT)
                raise AssertionError("the signal did not interrupt the job")

    command = Command("autotune", "config", AutotuneConfig, "", (("model", ""),), (), run)
    status = run_command(command, ["-m", OFF, "search.seed=1,2,3,4"])
    err = capsys.readouterr().err
    assert status == 130 and ran == [1, 2]
    assert _headers(err) == ["[1/4] search.seed=1", "[2/4] search.seed=2"]
    assert "the sweep stops after job 2: jobs 3 to 4 of 4 not run" in err
    assert err.rstrip().endswith("interrupted by SIGINT: nothing was recorded in MLflow")


# A search without MLflow still records its config ------------------------------------------


def test_a_search_writes_its_config_beside_its_launch_files(run_main: Run, tmp_path: Path) -> None:
    secret = "tracking.uri=postgresql://me:secret@db.example/mlflow"
    status, out, err = run_main("autotune", *SMALL, OFF, secret, "search.top_k=1", "launch_dir=l")
    assert status == 0, err
    assert out.rstrip().splitlines()[-1] == "Config of this search: l/config.yaml"
    text = (tmp_path / "l" / "config.yaml").read_text()
    assert "secret" not in text and "postgresql://me:***@db.example/mlflow" in text
    config = yaml.safe_load(text)
    assert config["model"]["name"] == "Llama-2-7B" and config["tracking"]["enabled"] is False
    manifest = (tmp_path / "l" / ".autotune-files").read_text().splitlines()
    assert [line for line in manifest if not line.startswith("#")] == ["config.yaml"]
    assert sorted(p.name for p in (tmp_path / "l").iterdir()) == [
        ".autotune-files",
        "config.yaml",
        "rank-1",
    ]


def test_a_config_yaml_autotune_did_not_write_is_refused_before_the_search(
    run_main: Run, tmp_path: Path
) -> None:
    (tmp_path / "config.yaml").write_text("mine: true\n")
    status, out, err = run_main("autotune", *SMALL, OFF, "launch_dir=.")
    assert status == 2 and out == "" and "Traceback" not in err
    assert err.startswith("error: launch_dir='.': config.yaml was not written by autotune")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]
    assert (tmp_path / "config.yaml").read_text() == "mine: true\n"


# --help lists the options the README uses --------------------------------------------------

# Options the README names for a command in its prose, not on a command line.
README_PROSE = {
    "autotune": [
        "calibration",
        "search.workers",
        "launch_dir",
        "probes",
        "measured",
        "search.memory_margin",
        "search.top_k",
        "search.rerank",
        "search.study_name",
        "hydra.searchpath",
    ],
    "autotune.simulate": ["trace", "calibration"],
    "autotune.benchmark": [
        "data",
        "hardware",
        "source",
        "simulators",
        "protocols",
        "memory_margin",
        "calibration",
        "output",
        "report_dir",
    ],
    "autotune.profile": ["budget_s", "out"],
    "autotune.calibrate": ["data", "name", "out"],
}


def _readme_keys() -> dict[str, set[str]]:
    """The keys each command's README command lines set, and those its prose names."""
    keys = {module: set(prose) for module, prose in README_PROSE.items()}
    for command in readme.readme_commands():
        keys[command.module] |= {
            arg.partition("=")[0].lstrip("+~") for arg in command.args if "=" in arg
        }
    return keys


def _listed(key: str, shown: str) -> bool:
    """Whether ``--help`` lists ``key`` (``parallel.tp`` under ``parallel.<field>``, a train
    setting under ``train.<setting>``, a simulator constant under ``analytical.<constant>``)."""
    group = key.split(".")[0]
    return any(
        line.split()[0] in (key, f"{group}.<field>", f"{group}.<setting>", f"{group}.<constant>")
        or line.split()[0].startswith(f"{key}=")
        for line in shown.splitlines()
        if line.startswith("  ") and line.strip()
    )


def test_the_readme_names_the_prose_options_it_is_said_to_and_shows_a_sweep() -> None:
    assert any("-m" in command.args for command in readme.readme_commands())
    text = readme.README.read_text()
    for options in README_PROSE.values():
        for option in options:
            assert f"`{option}" in text, option


@pytest.mark.parametrize("module", sorted(MAINS))
def test_help_lists_every_option_the_readme_uses_with_its_default(module: str) -> None:
    command = importlib.import_module(MAINS[module]).COMMAND
    shown = help_text(command)
    missing = sorted(k for k in _readme_keys()[module] if not _listed(k, shown))
    assert missing == []
    assert "[" in shown.split("Main options")[1]  # defaults in brackets
    for flag in ("-m, --multirun", "--cfg [job|all]", "--info [PART]", "hydra.searchpath"):
        assert flag in shown
