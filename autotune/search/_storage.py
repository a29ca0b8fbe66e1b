"""The study's storage (``search.storage``): checked before any work, created once every
other check has passed. An SQLite file, an Optuna journal file, or a PostgreSQL or MySQL
server; someone else's file (MLflow's database included) is refused, never opened as one.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage

from autotune._database import SERVER_SCHEMES
from autotune._database import check_database
from autotune._database import check_sqlite_store
from autotune.config import TrackingConfig
from autotune.config import hide_passwords
from autotune.simulators import UserError
from autotune.simulators.files import check_output_path

__all__ = ["check_storage", "open_storage"]

# Heartbeat of RDB studies: a trial whose process stopped beating this long is failed.
HEARTBEAT_S = 10
GRACE_S = 30
# What processes creating one fresh database at once run into (sqlite, PostgreSQL, MySQL):
# the loser retries and finds the tables made.
_SQLITE_WAIT_S = 60  # how long an SQLite statement waits for another worker's lock
_WAL_ATTEMPTS = 5  # a connection's tries to put a fresh SQLite file in WAL mode (_write_ahead)
_WAL_WAIT_MS = 100  # and how long each waits for the file's exclusive lock
_CREATION_RACES = ("locked", "already exists", "UNIQUE constraint", "duplicate key", "Duplicate")
# The storages in a local file, by their URL prefix. Someone else's file is refused, never
# opened as a store: an SQLite file by its tables (check_sqlite_store), a journal by its start.
_FILE_STORES = ("sqlite:///", "journal:")
_JOURNAL_START = b"{"


def check_storage(url: str | None, tracking: TrackingConfig | None = None) -> None:
    """Refuse an unusable ``search.storage`` before any work, creating nothing.

    ``sqlite:///PATH``, ``postgresql://...`` or ``mysql://...`` (Optuna's RDB storage, with
    heartbeats), or ``journal:PATH`` (Optuna's journal file, safe for several local workers).
    An existing SQLite file is read (never written) and must be Optuna's database
    (:func:`autotune._database.check_sqlite_store`); a server's database is connected to once
    (:func:`autotune._database.check_database`). With ``tracking`` (MLflow's settings), a file
    that is also MLflow's ``tracking.uri`` is refused.

    Raises:
        UserError: a malformed URL, a path that cannot be written, a file there that is not
            such a store (someone else's file, MLflow's database included, is never opened as
            one), the file of ``tracking.uri``, or a database that cannot be reached.
    """
    if url is None:
        return
    allowed = "sqlite:///PATH, postgresql://USER:PASSWORD@HOST/DB, mysql://..., journal:PATH"
    scheme = next((scheme for scheme in _FILE_STORES if url.startswith(scheme)), None)
    if scheme is not None:
        path = check_output_path("search.storage", url.removeprefix(scheme), given=url)
        _check_apart(url, path, tracking)
        if not path.is_file() or not path.stat().st_size:  # created by open_storage
            return
        if scheme == "sqlite:///":
            check_sqlite_store("search.storage", url, path, "Optuna", "an Optuna study database")
            return
        with path.open("rb") as handle:
            if handle.read(len(_JOURNAL_START)) != _JOURNAL_START:
                raise UserError(f"search.storage={url!r}: {path} is not an Optuna journal file")
        return
    if not url.startswith(SERVER_SCHEMES):
        raise UserError(f"search.storage={url!r} is not a storage URL; allowed: {allowed}")
    check_database("search.storage", url)


def _check_apart(url: str, path: Path, tracking: TrackingConfig | None) -> None:
    """Refuse the study's file ``path`` if MLflow records in it too (``tracking.uri``): each
    program needs a database of its own.

    Raises:
        UserError: naming both settings and the file.
    """
    if tracking is None or not tracking.enabled or not tracking.uri.startswith("sqlite:///"):
        return
    mlflow = Path(os.path.realpath(tracking.uri.removeprefix("sqlite:///")))
    same = mlflow == path
    with contextlib.suppress(OSError):  # one file by two names (a hard link)
        same = same or os.path.samefile(mlflow, path)
    if same:
        raise UserError(
            f"search.storage={url!r} and tracking.uri={tracking.uri!r} name one file, {path}: "
            "Optuna's study and MLflow's runs need a database each; give two paths"
        )


def open_storage(url: str | None) -> BaseStorage | None:
    """The storage of ``search.storage`` (None: in memory), created if need be: once every
    other check has passed, so that a refused search creates no database.

    Raises:
        UserError: what :func:`check_storage` refuses, a missing driver, an unreachable
            server or a file that is not a database.
    """
    check_storage(url)
    if url is None:
        return None
    if url.startswith(("journal:", "sqlite:///")):
        path = Path(url.removeprefix("journal:").removeprefix("sqlite:///"))
        path.parent.mkdir(parents=True, exist_ok=True)
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
    engine = (
        {"connect_args": {"timeout": _SQLITE_WAIT_S}}
        if url.startswith("sqlite")
        else {"pool_pre_ping": True}
    )
    for attempt in range(5):  # several workers creating one fresh database race on its tables
        try:
            with warnings.catch_warnings():  # heartbeats are experimental in Optuna 5: known
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=engine,
                    heartbeat_interval=HEARTBEAT_S,
                    grace_period=GRACE_S,
                )
            if url.startswith("sqlite"):
                _write_ahead(storage)
            return storage
        except ImportError as exc:
            raise UserError(
                f"search.storage={hide_passwords(url)!r} needs a database driver: {exc}"
            ) from None
        except Exception as exc:  # sqlalchemy's errors: locked, unreachable, not a database
            if attempt == 4 or not any(race in str(exc) for race in _CREATION_RACES):
                first = str(exc).strip().splitlines()[0]
                raise UserError(
                    f"cannot open search.storage={hide_passwords(url)!r}: {first}"
                ) from None
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def _write_ahead(storage: optuna.storages.RDBStorage) -> None:
    """SQLite in write-ahead-log mode, synced at checkpoints rather than at every commit.

    Optuna commits each suggested value: with SQLite's defaults every commit waits for the
    disk (14 ms each here, 0.4 s per trial). In WAL mode with ``synchronous=NORMAL`` a commit
    survives a crash of the process (not a power cut) and readers do not block the writer,
    which is what several workers on one file need (sqlite.org/wal.html).

    The mode is a property of the file: a connection sets it only when the file is not in it
    yet. Setting it takes the file's exclusive lock, which waits while another worker reads or
    writes, as when several workers open one fresh file together: the connection waits for it
    a short while (:data:`_WAL_WAIT_MS`, a few times), not the minute a write waits, and goes on
    without it if still refused (a slower file, as correct; another connection sets it).
    """
    import sqlalchemy

    def on_connect(connection: Any, _: Any) -> None:
        cursor = connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {_WAL_WAIT_MS}")
            for _ in range(_WAL_ATTEMPTS):
                (mode,) = cursor.execute("PRAGMA journal_mode").fetchone()
                if str(mode).lower() == "wal":
                    break
                try:
                    cursor.execute("PRAGMA journal_mode=WAL")
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc):
                        raise
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.execute(f"PRAGMA busy_timeout = {1000 * _SQLITE_WAIT_S}")
            cursor.close()

    sqlalchemy.event.listen(storage.engine, "connect", on_connect)
    storage.engine.dispose()  # the pooled connections opened before the listener
