"""What a search leaves in MLflow, read back from a real store: tables the UI can open."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import mlflow
import optuna
import pandas as pd
import pytest

from autotune.__main__ import COMMAND as SEARCH
from autotune.cli import run_command
from autotune.config import TrackingConfig
from autotune.search import open_study
from autotune.search._record import UI_ROWS
from autotune.search._study import open_storage
from autotune.simulators import Layout
from autotune.simulators import UserError
from autotune.tracking import TrackedRun
from autotune.tracking import _create_sqlite
from autotune.tracking import check_tracking
from autotune.tracking import record
from autotune.tracking import rounded


def _config(tmp_path: Path) -> TrackingConfig:
    return TrackingConfig(enabled=True, uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="x")


@pytest.mark.slow
def test_a_gz_table_is_the_whole_frame_compressed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the run's artifacts go to ./mlruns, not into the checkout
    frame = pd.DataFrame(
        {"rank": range(1, 2001), "step_time_s": [1.5] * 2000, "who": ["=a"] * 2000}
    )

    def fill(run: TrackedRun) -> None:
        run.table("big.csv.gz", frame)

    config = _config(tmp_path)
    recorded = record(config, "tables", fill, tags={})
    assert recorded.problem is None
    client = mlflow.MlflowClient(config.uri)
    assert [a.path for a in client.list_artifacts(recorded.run_id)] == ["big.csv.gz"]
    path = client.download_artifacts(recorded.run_id, "big.csv.gz", str(tmp_path))
    back = pd.read_csv(io.BytesIO(gzip.decompress(Path(path).read_bytes())))
    assert len(back) == 2000 and back["who"].iloc[0] == "'=a"  # formula-like text escaped


@pytest.mark.slow
def test_a_search_logs_a_bounded_ui_table_and_every_layout_compressed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["model=llama2_7b", "cluster=ascend", "cluster.num_nodes=2", f"tracking.uri={uri}"]
    assert run_command(SEARCH, [*args, "output=json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["mlflow_run_id"]
    client = mlflow.MlflowClient(uri)
    folder = Path(client.download_artifacts(run_id, "", str(tmp_path / "artifacts")))
    shown = pd.read_csv(folder / "layouts.csv")
    every = pd.read_csv(folder / "layouts_all.csv.gz")
    assert len(shown) == UI_ROWS < len(every)  # 1,476 valid layouts on 16 NPUs
    assert len(json.loads((folder / "layouts.json").read_text())["data"]) == UI_ROWS
    assert shown.equals(every.head(UI_ROWS))
    top = pd.read_csv(folder / "top_k.csv")
    assert list(top.columns[:8]) == [
        "rank", "chosen", "step_time_s", "tokens_per_s_per_device", "mfu", "memory_gib", "fits",
        "dp",
    ]  # fmt: skip
    assert list(top["rank"]) == [1, 2, 3, 4, 5]
    page = (folder / "launch.md").read_text()
    script = (tmp_path / "launch" / "rank-1" / "launch_mindspeed.sh").read_text()
    assert f"## rank-1/launch_mindspeed.sh\n\n```bash\n{script.rstrip()}\n```\n" in page
    assert "## rank-5/" in page  # every launch file logged, in the page the UI previews


@pytest.mark.slow
def test_a_multi_objective_search_records_its_pareto_front(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1", f"tracking.uri={uri}"]
    nsga2 = ["search.sampler=nsga2", "search.n_trials=40", "output=json"]
    assert run_command(SEARCH, [*args, *nsga2]) == 0
    payload = json.loads(capsys.readouterr().out)
    client = mlflow.MlflowClient(uri)
    folder = Path(client.download_artifacts(payload["mlflow_run_id"], "", str(tmp_path / "a")))
    front = pd.read_csv(folder / "pareto_front.csv")
    expected = [p["prediction"]["step_time_s"] for p in payload["pareto_front"]]
    assert len(expected) > 1 and list(front["step_time_s"]) == pytest.approx(expected)
    assert front["chosen"].sum() == 1 and front["chosen"].iloc[0]  # the fastest that fits
    page = (folder / "plots.html").read_text()
    assert "Pareto-front Plot" in page
    # On the history (a star, or a line where no trial priced it), the front, time vs memory
    assert page.count('"name":"chosen layout') == 3


def _search(
    uri: str, capsys: pytest.CaptureFixture[str], *options: str, nodes: int = 1
) -> tuple[dict[str, Any], mlflow.entities.Run]:
    """A search of Llama-2-7B on ``nodes`` Ascend nodes recorded in ``uri``: its JSON, its
    run."""
    args = ["model=llama2_7b", "cluster=ascend", f"cluster.num_nodes={nodes}"]
    args.append(f"tracking.uri={uri}")
    assert run_command(SEARCH, [*args, *options, "output=json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    return payload, mlflow.MlflowClient(uri).get_run(payload["mlflow_run_id"])


@pytest.mark.slow
def test_a_sampler_search_marks_its_pick_and_records_its_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # Two nodes: more layouts than the UI's table holds, so the full list is logged too
    payload, run = _search(uri, capsys, "search.sampler=tpe", "search.n_trials=20", nodes=2)
    assert payload["valid_layouts"] > UI_ROWS
    chosen = Layout.from_dict(payload["best"]).describe()
    gap = payload["sampler_gap"]
    assert gap["unknown"] is None and gap["optimum"]["layout"] == payload["best"]
    found, best = gap["sampler_best"]["prediction"], payload["prediction"]
    assert gap["gap_pct"] == pytest.approx(100 * (found["step_time_s"] / best["step_time_s"] - 1))
    assert run.data.tags["chosen_layout"] == chosen
    assert run.data.tags["sampler_gap"].startswith(f"{gap['gap_pct']:.2f}% (tpe's own best ")
    assert run.data.metrics["sampler_gap_pct"] == rounded(gap["gap_pct"])
    assert run.data.metrics["sampler_best_step_time_s"] == rounded(found["step_time_s"])
    assert f"Sampler gap: {gap['gap_pct']:.2f}%" in (run.data.tags["mlflow.note.content"])
    client = mlflow.MlflowClient(uri)
    folder = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path / "a")))
    for table in ("layouts.csv", "layouts_all.csv.gz", "top_k.csv"):
        marked = pd.read_csv(folder / table)
        assert marked["chosen"].sum() == 1 and marked["chosen"].iloc[0], table
    page = (folder / "plots.html").read_text()
    assert f"Chosen layout: {chosen}, " in page and "Sampler gap: " in page
    children = client.search_runs(
        [run.info.experiment_id], f"tags.mlflow.parentRunId = '{run.info.run_id}'"
    )
    picked = [c.info.run_name for c in children if c.data.tags.get("chosen") == "true"]
    assert picked == [f"#1 {chosen}"] and len(children) == 5


@pytest.mark.slow
def test_an_unknown_gap_is_no_metric_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = ("search.sampler=tpe", "search.n_trials=20", "search.grid_budget_s=1e-9")
    payload, run = _search(uri, capsys, *options)
    gap = payload["sampler_gap"]
    assert gap["gap_pct"] is None and gap["optimum"] is None
    assert "above search.grid_budget_s=1e-09 s" in gap["unknown"]
    assert "sampler_gap_pct" not in run.data.metrics
    assert "sampler_best_step_time_s" in run.data.metrics
    assert run.data.tags["sampler_gap"] == f"unknown ({gap['unknown']}); " + (
        f"tpe's own best {gap['sampler_best']['prediction']['step_time_s']:.3f} s"
    )
    payload, run = _search(uri, capsys, "search.sampler=grid")
    assert payload["sampler_gap"] is None and "sampler_gap" not in run.data.tags
    assert run.data.tags["chosen_layout"] == Layout.from_dict(payload["best"]).describe()


def test_the_summary_prints_the_sampler_gap_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1", "tracking.enabled=false"]
    assert run_command(SEARCH, [*args, "search.sampler=random", "search.n_trials=20"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("Sampler gap")]
    assert len(lines) == 1
    assert re.fullmatch(
        r"Sampler gap: \d+\.\d\d% \(random's own best [\d.]+ s against the exhaustive "
        r"optimum [\d.]+ s of the same simulator\)",
        lines[0],
    )


def _tables(path: Path) -> set[str]:
    connection = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)  # creates nothing
    try:
        return {
            n for (n,) in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
    finally:
        connection.close()


def _optuna_db(path: Path) -> Path:
    """A real study's database (in write-ahead-log mode, its connections closed)."""
    storage = open_storage(f"sqlite:///{path}")
    assert isinstance(storage, optuna.storages.RDBStorage)
    open_study(storage, "s", "tpe", 0, {"job": "x"})
    storage.engine.dispose()
    return path


def test_tracking_refuses_a_file_that_is_not_an_mlflow_database(tmp_path: Path) -> None:
    """Read only: each file is left byte for byte, and nothing is created beside it."""
    folder = tmp_path / "files"
    folder.mkdir()
    mlflow_db = folder / "mlflow.db"
    _create_sqlite(mlflow_db)
    other = folder / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as connection:
        connection.execute("CREATE TABLE users (id)")
    truncated = folder / "truncated.db"
    truncated.write_bytes(mlflow_db.read_bytes()[:50000])
    damaged = folder / "damaged.db"  # a whole header whose page count says nothing
    data = bytearray(mlflow_db.read_bytes())
    data[24:28], data[4096:] = b"\0\0\0\1", b"U" * (len(data) - 4096)
    damaged.write_bytes(data)
    (folder / "text.db").write_text("not a database\n")
    both = folder / "both.db"  # what tracking.uri and search.storage on one file left
    shutil.copy(_optuna_db(folder / "optuna.db"), both)
    with contextlib.closing(sqlite3.connect(both)) as connection:
        connection.execute("CREATE TABLE experiments (id)")
        connection.execute("CREATE TABLE runs (id)")
    files = {path.name: path.read_bytes() for path in folder.iterdir()}
    allowed = "; give an MLflow database, an empty file or a new path"
    for name, said in (
        ("optuna.db", "holds Optuna's tables (a search.storage database), not MLflow's"),
        ("both.db", "holds both MLflow's and Optuna's tables"),
        ("other.db", "holds tables of neither MLflow nor Optuna (users)"),
        ("truncated.db", f"is a truncated SQLite database (50000 of its {len(data)} bytes)"),
        ("damaged.db", "is not a readable SQLite database (database disk image is malformed)"),
        ("text.db", "is not an SQLite database"),
    ):
        uri = f"sqlite:///{folder / name}"
        with pytest.raises(UserError) as refused:
            check_tracking(TrackingConfig(enabled=True, uri=uri, experiment="x"))
        assert str(refused.value).startswith(f"tracking.uri={uri!r}: {folder / name} {said}")
        assert str(refused.value).endswith(allowed)
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == files
    (folder / "empty.db").touch()
    for name in ("mlflow.db", "empty.db", "new.db"):  # an MLflow database, or one to create
        check_tracking(
            TrackingConfig(enabled=True, uri=f"sqlite:///{folder / name}", experiment="x")
        )


def test_a_record_never_writes_into_a_study_database_made_since_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As when search.storage names the new file tracking.uri names: the study creates it
    during the search, and MLflow must not add its tables to it afterwards."""
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path)
    check_tracking(config)  # no file yet
    path = _optuna_db(tmp_path / "mlflow.db")
    before, tables = path.read_bytes(), _tables(path)
    recorded = record(config, "run", lambda run: run.params({"a": 1}), tags={})
    assert recorded.run_id is None
    assert recorded.problem == (
        f"tracking.uri={config.uri!r}: {path} holds Optuna's tables (a search.storage "
        "database), not MLflow's; give an MLflow database, an empty file or a new path"
    )
    assert path.read_bytes() == before and _tables(path) == tables
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]
