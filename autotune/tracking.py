"""MLflow records: one parent run per search or benchmark, one child run per trial."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.config import TrackingConfig

__all__ = ["TrackedRun", "child_runs", "tracked_run"]

log = logging.getLogger("autotune")


class TrackedRun:
    """A handle on the active parent run that writes params, metrics and artifacts."""

    def __init__(self, mlflow: Any, run_id: str) -> None:
        self._mlflow = mlflow
        self.run_id = run_id
        self._dir = Path(tempfile.mkdtemp(prefix="autotune-artifacts-"))

    def params(self, values: Mapping[str, Any]) -> None:
        self._mlflow.log_params({k: str(v) for k, v in values.items()})

    def metrics(self, values: Mapping[str, float]) -> None:
        self._mlflow.log_metrics({k: float(v) for k, v in values.items()})

    def text(self, name: str, content: str) -> None:
        self._mlflow.log_text(content, name)

    def table(self, name: str, frame: Any) -> None:
        path = self._dir / name
        frame.to_csv(path, index=False)
        self._mlflow.log_artifact(str(path))

    def folder(self, path: Path, artifact_path: str) -> None:
        self._mlflow.log_artifacts(str(path), artifact_path=artifact_path)


@contextlib.contextmanager
def tracked_run(config: TrackingConfig, run_name: str) -> Iterator[TrackedRun | None]:
    """A parent MLflow run (``None`` when tracking is off).

    An exception inside the block ends the run as FAILED, never leaving it RUNNING. MLflow's
    own prints go to stderr: stdout is kept for ``output=json``.
    """
    if not config.enabled:
        yield None
        return
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    import mlflow

    _ensure_sqlite_folder(config.uri)
    with contextlib.redirect_stdout(sys.stderr):
        mlflow.set_tracking_uri(config.uri)
        mlflow.set_experiment(config.experiment)
        with mlflow.start_run(run_name=run_name) as run:
            yield TrackedRun(mlflow, run.info.run_id)


def _ensure_sqlite_folder(uri: str) -> None:
    prefix = "sqlite:///"
    if uri.startswith(prefix):
        Path(uri[len(prefix) :]).parent.mkdir(parents=True, exist_ok=True)


def child_runs(
    parent: TrackedRun, rows: list[dict[str, Any]], param_keys: tuple[str, ...]
) -> None:
    """One child run per row: ``param_keys`` as params, numeric others as metrics.

    ``rows`` come best first. MLflow lists runs newest first, so the children are created from
    the last row to the first, each a millisecond after the previous one: the UI shows them in
    the order of ``rows``. Each child is written with one ``log_batch`` call (~16 ms per child
    on sqlite, against ~47 ms for one call per value; docs/libraries.md).
    """
    from mlflow import MlflowClient
    from mlflow.entities import Metric
    from mlflow.entities import Param

    client = MlflowClient()
    experiment_id = client.get_run(parent.run_id).info.experiment_id
    now = int(time.time() * 1000)
    for offset, row in enumerate(reversed(rows)):
        child = client.create_run(
            experiment_id,
            start_time=now + offset,
            run_name=f"trial-{row['trial']}",
            tags={"mlflow.parentRunId": parent.run_id},
        )
        params = [
            Param(k, json.dumps(row[k]) if isinstance(row[k], bool) else str(row[k]))
            for k in param_keys
        ]
        metrics = [
            Metric(k, float(v), now, 0)
            for k, v in row.items()
            if k not in param_keys and isinstance(v, int | float)
        ]
        client.log_batch(child.info.run_id, metrics=metrics, params=params)
        client.set_terminated(child.info.run_id)
