"""The databases of MLflow and Optuna, checked once before any work.

A database server named by a URL (``postgresql://``, ``mysql://``): MLflow retries one it
cannot reach for about two minutes, after the work, and Optuna opens one only once the layouts
are built: a wrong host, port, user or password, or a missing driver, is refused here instead,
before anything runs (:func:`check_database`).

An SQLite file that already holds something (:func:`check_sqlite_store`): each program, given
the other's database, writes its own tables into it (MLflow migrates Optuna's ``alembic_version``
and fails half-way, "Can't locate revision"; Optuna adds its 12 tables to MLflow's and then says
its version is too old). The file is read, never written, and refused unless it is the program's
own database.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import urllib.parse
from pathlib import Path

from autotune.config import hide_passwords
from autotune.simulators import UserError

__all__ = ["SERVER_SCHEMES", "SQLITE_HEADER", "check_database", "check_sqlite_store"]

SERVER_SCHEMES = ("postgresql", "mysql")  # SQLAlchemy URLs of a database server
_TIMEOUT_S = 10  # a server that has not answered by then is taken for unreachable
SQLITE_HEADER = b"SQLite format 3\x00"  # how an SQLite database file starts
# Two tables each program creates in a new database and the other never does (MLflow 3.17:
# 65 tables, Optuna 5.1: 13; both also keep an ``alembic_version``): how a file is told apart.
PROGRAM_TABLES = {"MLflow": ("experiments", "runs"), "Optuna": ("studies", "version_info")}
_SHOWN_TABLES = 3  # the tables of another program's database named in its refusal


def check_database(key: str, url: str) -> None:
    """Connect once to the database of ``url`` (any SQLAlchemy driver), then let go.

    Raises:
        UserError: naming ``key``, the URL (passwords ``***``) and why it cannot be used.
    """
    outcome: list[str | None] = []
    thread = threading.Thread(target=lambda: outcome.append(_connect(url)), daemon=True)
    thread.start()
    thread.join(_TIMEOUT_S)  # the driver's own timeout may be none at all
    problem = outcome[0] if outcome else f": no database server answered within {_TIMEOUT_S} s"
    if problem is not None:
        raise UserError(f"{key}={hide_passwords(url)!r}{hide_passwords(problem)}")


def _connect(url: str) -> str | None:
    """What stops a connection to ``url``, said after the URL (None: it connected)."""
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(url)
        try:
            with engine.connect():
                pass
        finally:
            engine.dispose()
    except (ImportError, sqlalchemy.exc.NoSuchModuleError) as exc:
        return f" needs a database driver: {exc}"
    except Exception as exc:  # noqa: BLE001 - the driver's or SQLAlchemy's refusal, said as is
        said = str(exc).strip().splitlines()
        reason = said[0] if said else type(exc).__name__
        return (
            f": cannot connect to the database ({reason}); check its host, port, user and password"
        )
    return None


def check_sqlite_store(key: str, url: str, path: Path, program: str, store: str) -> None:
    """Refuse the existing, non-empty file ``path`` unless it is ``program``'s SQLite database
    (an empty one, with no tables, too); read-only, creating nothing beside it. No file there,
    or an empty one, is where the program creates its database: nothing to refuse.

    Args:
        key: the setting (``tracking.uri``, ``search.storage``); url: its value.
        program: ``"MLflow"`` or ``"Optuna"`` (a key of :data:`PROGRAM_TABLES`).
        store: what ``key`` takes, as the refusal says it ("an MLflow database").

    Raises:
        UserError: naming ``key``, the URL, the file, what it holds instead and what is allowed.
    """
    if not path.is_file() or not path.stat().st_size:
        return
    shown = f"{key}={url!r}: {path}"
    allowed = f"give {store}, an empty file or a new path"
    try:
        with path.open("rb") as handle:
            header = handle.read(100)
        size = path.stat().st_size
    except OSError as exc:
        raise UserError(f"{shown} cannot be read ({exc.strerror or exc}); {allowed}") from None
    if not header.startswith(SQLITE_HEADER):
        raise UserError(f"{shown} is not an SQLite database; {allowed}")
    expected = _expected_size(header)
    if expected > size:
        raise UserError(
            f"{shown} is a truncated SQLite database ({size} of its {expected} bytes); {allowed}"
        )
    try:
        tables = _tables(path, wal=header[18:20] == b"\x02\x02")
    except sqlite3.Error as exc:
        raise UserError(f"{shown} is not a readable SQLite database ({exc}); {allowed}") from None
    holds = [name for name, marks in PROGRAM_TABLES.items() if set(marks) <= tables]
    if not tables or holds == [program]:
        return
    if len(holds) > 1:
        what = "both MLflow's and Optuna's tables (a file given to both tracking.uri "
        what += "and search.storage)"
    elif holds:
        other = {"MLflow": "tracking.uri", "Optuna": "search.storage"}[holds[0]]
        what = f"{holds[0]}'s tables (a {other} database), not {program}'s"
    else:
        names = sorted(tables)
        more = ", ..." if len(names) > _SHOWN_TABLES else ""
        what = f"tables of neither MLflow nor Optuna ({', '.join(names[:_SHOWN_TABLES])}{more})"
    raise UserError(f"{shown} holds {what}; {allowed}")


def _expected_size(header: bytes) -> int:
    """The bytes an SQLite file's header says it holds (0: the header does not say)."""
    if len(header) < 100 or header[24:28] != header[92:96]:  # the page count is stale
        return 0
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    return page_size * int.from_bytes(header[28:32], "big")


def _tables(path: Path, wal: bool) -> set[str]:
    """The tables of the SQLite database ``path``, read in read-only mode.

    A read-only connection to a database in write-ahead-log mode (Optuna's, see
    ``autotune.search._storage._write_ahead``) creates its ``-wal`` and ``-shm`` files and cannot
    remove them: with no ``-wal`` file there (no connection open, the whole database in the
    file) it is read as immutable instead, which creates nothing.
    """
    immutable = wal and not os.path.exists(f"{path}-wal")
    uri = f"file:{urllib.parse.quote(str(path))}?mode=ro{'&immutable=1' if immutable else ''}"
    connection = sqlite3.connect(uri, uri=True)
    try:
        rows = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {name for (name,) in rows}
    finally:
        connection.close()
