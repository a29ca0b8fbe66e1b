"""Record one benchmark as one MLflow run: settings as params, summaries as metrics, the
report folder as artifacts."""

from __future__ import annotations

import contextlib
import math
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["log_benchmark_run"]

_UNSAFE = re.compile(r"[^0-9A-Za-z_\-. /]")


def _sqlite_folder(uri: str) -> None:
    """Create the folder of a relative or absolute ``sqlite:///path`` database."""
    prefix = "sqlite:///"
    if uri.startswith(prefix):
        Path(uri[len(prefix) :]).parent.mkdir(parents=True, exist_ok=True)


def _metrics(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """``<ranker>.<figure>`` and ``<ranker>.<source>.<figure>`` for every finite number."""
    found: dict[str, float] = {}
    for name, summary in summaries.items():
        scopes = {name: summary, **{f"{name}.{s}": v for s, v in summary["by_source"].items()}}
        for scope, figures in scopes.items():
            for key, value in figures.items():
                if isinstance(value, int | float) and math.isfinite(value):
                    found[_UNSAFE.sub("_", f"{scope}.{key}")] = float(value)
    return found


def log_benchmark_run(
    uri: str,
    experiment: str,
    params: Mapping[str, Any],
    summaries: Mapping[str, Mapping[str, Any]],
    config_yaml: str,
    report_dir: Path,
) -> str:
    """Log the run and return its id; a failure inside marks the run FAILED, never RUNNING."""
    import mlflow

    _sqlite_folder(uri)
    with contextlib.redirect_stdout(sys.stderr):  # stdout is reserved for output=json
        mlflow.set_tracking_uri(uri)
        mlflow.set_experiment(experiment)
        with mlflow.start_run(run_name="benchmark") as run:
            mlflow.log_params({k: str(v) for k, v in params.items()})
            mlflow.log_metrics(_metrics(summaries))
            mlflow.log_text(config_yaml, "config.yaml")
            mlflow.log_artifacts(str(report_dir), artifact_path="report")
        return str(run.info.run_id)
