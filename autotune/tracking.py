"""MLflow records: one run per search or benchmark, written after the work, never at its cost.

The tracking URI is checked before any work (:func:`check_tracking`). The record itself
(:func:`record`) runs once the result is known: if MLflow fails there (disk full, a locked
database, a server gone), the command still prints its answer and says what was not recorded;
the run is never left RUNNING and no temporary folder is left behind. A signal during the
record ends the run KILLED (not FAILED: nothing went wrong but the stop); the command then
prints its answer too, and exits 130 or 143 (:mod:`autotune._signals`).
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from pathlib import PurePosixPath
from typing import Any

import pandas as pd

from autotune import _signals
from autotune._database import SERVER_SCHEMES
from autotune._database import check_database
from autotune._database import check_sqlite_store
from autotune._process import dead_here
from autotune._process import this_process
from autotune.config import TrackingConfig
from autotune.csv_files import write_csv
from autotune.simulators import UserError
from autotune.simulators.files import check_output_path

__all__ = ["Recorded", "TrackedRun", "check_tracking", "record", "rounded"]

log = logging.getLogger("autotune")
_SQLITE = "sqlite:///"
# MLflow's experiment tag that opens the experiment on the training-runs view (MLflow 3).
_EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
# An experiment's description (MLflow's note), by the command that first records in it.
_EXPERIMENT_NOTES = {
    "search": (
        "Layout searches of autotune: one run per search (`python -m autotune`), its best "
        "layout and time breakdown in the description, the top layouts as child runs, the "
        "evaluated layouts in `layouts.csv` (the whole list in `layouts_all.csv.gz`), the "
        "launch files in `launch.md`; probe rounds of the measure-and-calibrate loop too."
    ),
    "benchmark": (
        "Regret benchmarks of autotune's simulators (`python -m autotune.benchmark`): one "
        "parent run per benchmark with its headline per simulator and protocol, one child run "
        "per simulator, baseline and protocol with the same metric names, the report under "
        "`report/`."
    ),
}
_NOTE = "mlflow.note.content"
_SIGNIFICANT = 6  # digits kept in a metric
_PROCESS_TAG = "autotune.process"  # host:pid of the writer: a dead one's RUNNING run is ended


def rounded(value: float) -> float:
    """``value`` to six significant digits: what a predicted figure means, not 16 digits."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, _SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))


def check_tracking(config: TrackingConfig) -> None:
    """Refuse an unusable tracking URI before any work (nothing is created when it is off):
    an SQLite file that cannot be written or holds something other than MLflow's database
    (read, never written), a server or database that does not answer.

    Raises:
        UserError: naming the URI and what is allowed.
    """
    if not config.enabled:
        return
    uri = config.uri
    allowed = "sqlite:///PATH, http(s)://HOST:PORT of an MLflow server, postgresql://..."
    if uri.startswith(_SQLITE):
        _check_sqlite(uri.removeprefix(_SQLITE), uri)
    elif uri.startswith(("http://", "https://")):
        _check_server(uri)
    elif uri.startswith(SERVER_SCHEMES):
        check_database("tracking.uri", uri)
    elif not uri.startswith("databricks"):
        reason = "MLflow 3.13+ refuses a plain file store" if uri.startswith("file:") else ""
        raise UserError(
            f"tracking.uri={uri!r} is not usable{': ' + reason if reason else ''}; allowed: "
            f"{allowed} (tracking.enabled=false records nothing)"
        )


def _check_sqlite(path: str, uri: str) -> None:
    """A database file that can be written, and if it holds something, MLflow's (its folder
    is made only when the run is recorded, so a refused command creates nothing)."""
    target = check_output_path("tracking.uri", path, given=uri)
    _check_mlflow_file(target, uri)


def _check_mlflow_file(path: Path, uri: str) -> None:
    """Refuse the existing, non-empty ``path`` unless it is an MLflow database (read only).

    Raises:
        UserError: what :func:`autotune._database.check_sqlite_store` refuses.
    """
    check_sqlite_store("tracking.uri", uri, path, "MLflow", "an MLflow database")


def _check_server(uri: str) -> None:
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5):  # noqa: S310
            pass
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UserError(f"tracking.uri={uri!r}: no MLflow server answers ({reason})") from None


@dataclass(frozen=True, slots=True)
class Recorded:
    """What became of a record: its run id, or why it is missing; the seconds it took."""

    run_id: str | None
    problem: str | None
    seconds: float


class TrackedRun:
    """A handle on the active run that writes params, metrics, tables and artifacts.

    Each method first stops the record (:class:`autotune._signals.Interrupted`) if a signal
    came meanwhile: between two MLflow calls, never inside one.
    """

    def __init__(self, mlflow: Any, run_id: str, folder: Path, pending: list[int]) -> None:
        self._mlflow = mlflow
        self.run_id = run_id
        self._dir = folder
        self._pending = pending  # the signals received during the record

    def params(self, values: Mapping[str, Any]) -> None:
        _go_on(self._pending)
        self._mlflow.log_params({k: str(v) for k, v in values.items()})

    def metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        _go_on(self._pending)
        self._mlflow.log_metrics({k: rounded(float(v)) for k, v in values.items()}, step=step)

    def history(self, key: str, values: list[tuple[int, float]]) -> None:
        """A metric's history by step in one call (``mlflow.log_batch``)."""
        _go_on(self._pending)
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(key, rounded(float(v)), now, step) for step, v in values]
        self._mlflow.MlflowClient().log_batch(self.run_id, metrics=metrics)

    def tags(self, values: Mapping[str, str]) -> None:
        _go_on(self._pending)
        self._mlflow.set_tags(dict(values))

    def text(self, name: str, content: str) -> None:
        _go_on(self._pending)
        self._mlflow.log_text(content, name)

    def table(self, name: str, frame: pd.DataFrame, ui: bool = False) -> None:
        """A CSV artifact (formula-like text escaped; gzip-compressed where ``name`` ends in
        ``.gz``); with ``ui``, also a table the MLflow UI renders (``log_table``)."""
        _go_on(self._pending)
        path = write_csv(frame, self._dir / name.removesuffix(".gz"))
        if name.endswith(".gz"):
            with path.open("rb") as plain, gzip.open(self._dir / name, "wb") as packed:
                shutil.copyfileobj(plain, packed)
            path = self._dir / name
        self._mlflow.log_artifact(str(path))
        if ui:
            _go_on(self._pending)
            self._mlflow.log_table(data=frame, artifact_file=Path(name).with_suffix(".json").name)

    def html(self, name: str, content: str) -> None:
        _go_on(self._pending)
        self._mlflow.log_text(content, name)

    def files(self, paths: Sequence[Path], artifact_path: str, root: Path | None = None) -> None:
        """Exactly these files as artifacts under ``artifact_path`` (nothing else of their
        folders), each in its folder relative to ``root`` (without one, side by side)."""
        _go_on(self._pending)
        for path in paths:
            parts = path.parent.relative_to(root).parts if root is not None else ()
            where = str(PurePosixPath(artifact_path, *parts))
            self._mlflow.log_artifact(str(path), artifact_path=where)

    def child(
        self,
        name: str,
        params: Mapping[str, Any],
        values: Mapping[str, Any],
        start_ms: int | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        """A child run in one ``log_batch`` call (~16 ms on sqlite; docs/libraries.md):
        ``params``, and the finite numbers of ``values`` as metrics, with ``tags``. ``start_ms``
        orders the children in the UI, which lists the newest first."""
        _go_on(self._pending)
        from mlflow import MlflowClient
        from mlflow.entities import Metric
        from mlflow.entities import Param

        client = MlflowClient()
        experiment_id = client.get_run(self.run_id).info.experiment_id
        child = client.create_run(
            experiment_id,
            start_time=start_ms,
            run_name=name,
            tags={**(tags or {}), "mlflow.parentRunId": self.run_id, _PROCESS_TAG: this_process()},
        )
        now = int(time.time() * 1000)
        client.log_batch(
            child.info.run_id,
            metrics=[
                Metric(k, rounded(float(v)), now, 0)
                for k, v in values.items()
                if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            ],
            params=[
                Param(k, json.dumps(v) if isinstance(v, bool) else str(v))
                for k, v in params.items()
            ],
        )
        client.set_terminated(child.info.run_id)


def _go_on(pending: list[int]) -> None:
    """Stop the record here if a signal came during it (see :class:`TrackedRun`).

    Raises:
        autotune._signals.Interrupted: for the first such signal.
    """
    if pending:
        _signals.interrupt(pending[0])


def record(
    config: TrackingConfig,
    run_name: str,
    fill: Callable[[TrackedRun], None],
    *,
    tags: Mapping[str, str],
    description: str = "",
    status: str = "FINISHED",
) -> Recorded:
    """Write one run with ``fill``; MLflow's failures are reported, never raised.

    ``status`` ends the run (``KILLED`` for a search stopped by a signal). MLflow's own
    prints go to stderr: stdout is kept for ``output=json``.
    """
    started = time.perf_counter()
    if not config.enabled:
        return Recorded(None, None, 0.0)
    if _signals.interrupted():  # a signal cut the work short: the command is on its way out
        return Recorded(None, "the command was interrupted before this record", 0.0)
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    run_id: str | None = None
    pending: list[int] = []  # a signal stops the record between two MLflow calls
    try:
        with (
            _signals.deferred(pending.append),
            _mlflow_run(config, run_name, tags, description, pending) as (mlflow, run_id, folder),
        ):
            fill(TrackedRun(mlflow, run_id, folder, pending))
            _go_on(pending)
            mlflow.end_run(status=status)
    except _signals.Interrupted as exc:  # the run is ended KILLED, its temporary folder gone
        ended = f"MLflow run {run_id} marked KILLED" if run_id else "no MLflow run started"
        _signals.note_recorded(f"{ended} ({run_name})")
        return Recorded(
            run_id, f"interrupted by {exc.name}; {ended}", time.perf_counter() - started
        )
    except Exception as exc:  # noqa: BLE001 - whatever MLflow raises must not cost the result
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Recorded(run_id, first, time.perf_counter() - started)
    _signals.note_recorded(f"MLflow run {run_id} recorded, {status} ({run_name})")
    return Recorded(run_id, None, time.perf_counter() - started)


def _end_orphans(mlflow: Any, experiment_id: str) -> None:
    """Mark KILLED the runs of this experiment left RUNNING by dead processes of this host
    (a search killed while it was recording)."""
    client = mlflow.MlflowClient()
    running = client.search_runs(
        [experiment_id], filter_string="attributes.status = 'RUNNING'", max_results=1000
    )
    for run in running:
        if dead_here(run.data.tags.get(_PROCESS_TAG, "")):
            client.set_terminated(run.info.run_id, status="KILLED")
            log.info(f"MLflow run {run.info.run_id} of a killed search marked KILLED")


@contextlib.contextmanager
def _creating_store(uri: str) -> Iterator[None]:
    """For an SQLite URI: its folder made, a new database created whole, and the folder held
    under an exclusive lock while MLflow opens the store and the experiment.

    MLflow's tracking store creates a new database's tables with no lock
    (``SqlAlchemyStore.__init__`` calls ``_initialize_tables`` when a table is missing; its
    job store uses ``_safe_initialize_tables``): processes that open one new database at once
    each find it empty, each create and migrate it, and all but one fail ("table runs already
    exists", "duplicate column name"), so their runs were lost. ``flock`` on the folder
    creates no file, and is released when the process dies.

    An existing database is checked again before MLflow opens it (a study's database made
    there since :func:`check_tracking`, as when ``search.storage`` names the same new file).

    Raises:
        UserError: the file is not an MLflow database (:func:`_check_mlflow_file`).
    """
    if not uri.startswith(_SQLITE):
        yield
        return
    path = Path(uri.removeprefix(_SQLITE))
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        if not path.exists() or path.stat().st_size == 0:
            _create_sqlite(path)
        else:  # checked before the work, and again now: MLflow writes into what it opens
            _check_mlflow_file(path.resolve(), uri)
        yield
    finally:
        os.close(descriptor)  # and with it the lock


def _create_sqlite(path: Path) -> None:
    """A new MLflow database at ``path``, made and migrated in a temporary file beside it,
    then renamed into place: a process killed during MLflow's migrations (about 4 s) leaves
    no half-migrated database, which every later run would fail on ("index ... already
    exists"). Called under the folder's lock, so a leftover temporary file is a dead one's."""
    from mlflow.tracking._tracking_service.utils import _get_sqlalchemy_store

    prefix = f".{path.name}.creating-"
    for leftover in path.parent.glob(f"{prefix}*"):
        leftover.unlink(missing_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=prefix, dir=path.parent)
    os.close(handle)
    try:
        store = _get_sqlalchemy_store(f"{_SQLITE}{temporary}", None)  # as MLflow opens one
        store.engine.dispose()
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # as sqlite makes a file (mkstemp's is 0o600)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def _mlflow_run(
    config: TrackingConfig,
    run_name: str,
    tags: Mapping[str, str],
    description: str,
    pending: list[int],
) -> Iterator[tuple[Any, str, Path]]:
    """An active run in a temporary artifact folder; an error inside ends it FAILED, a signal
    KILLED."""
    with (
        contextlib.redirect_stdout(sys.stderr),
        tempfile.TemporaryDirectory(prefix="autotune-artifacts-") as folder,
    ):
        import mlflow

        with _creating_store(config.uri):
            mlflow.set_tracking_uri(config.uri)
            experiment = mlflow.set_experiment(config.experiment)
            wanted = dict(_EXPERIMENT_KIND)
            note = _EXPERIMENT_NOTES.get(tags.get("autotune.command", ""))
            if note and not experiment.tags.get(_NOTE):  # a user's own description stays
                wanted[_NOTE] = note
            for key, value in wanted.items():
                if experiment.tags.get(key) != value:
                    mlflow.set_experiment_tag(key, value)
        _end_orphans(mlflow, experiment.experiment_id)
        _go_on(pending)
        run = mlflow.start_run(
            run_name=run_name,
            tags={**tags, _PROCESS_TAG: this_process()},
            description=description or None,
        )
        try:
            yield mlflow, run.info.run_id, Path(folder)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                stopped = isinstance(exc, _signals.Interrupted)
                mlflow.end_run(status="KILLED" if stopped else "FAILED")
            raise
        finally:
            if mlflow.active_run() is not None:
                with contextlib.suppress(Exception):
                    mlflow.end_run()
