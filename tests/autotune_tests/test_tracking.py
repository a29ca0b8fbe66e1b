"""What a search leaves in MLflow, read back from a real store: tables the UI can open."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from autotune.__main__ import COMMAND as SEARCH
from autotune.cli import run_command
from autotune.config import TrackingConfig
from autotune.search._record import UI_ROWS
from autotune.tracking import TrackedRun
from autotune.tracking import record


def _config(tmp_path: Path) -> TrackingConfig:
    return TrackingConfig(enabled=True, uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="x")


@pytest.mark.slow
def test_a_gz_table_is_the_whole_frame_compressed(tmp_path: Path) -> None:
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
    assert len(shown) == UI_ROWS < len(every)  # 2,016 valid layouts on 16 NPUs
    assert len(json.loads((folder / "layouts.json").read_text())["data"]) == UI_ROWS
    assert shown.equals(every.head(UI_ROWS))
    top = pd.read_csv(folder / "top_k.csv")
    assert list(top.columns[:7]) == [
        "rank", "step_time_s", "tokens_per_s_per_device", "mfu", "memory_gib", "fits", "dp"
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
    assert "Pareto-front Plot" in (folder / "plots.html").read_text()
