"""A database server named by a URL (``postgresql://``, ``mysql://``), asked once before any work.

MLflow retries a database it cannot reach for about two minutes, after the work, and Optuna
opens one only once the layouts are built: a wrong host, port, user or password, or a missing
driver, is refused here instead, before anything runs.
"""

from __future__ import annotations

import threading

from autotune.config import hide_passwords
from autotune.simulators import UserError

__all__ = ["SERVER_SCHEMES", "check_database"]

SERVER_SCHEMES = ("postgresql", "mysql")  # SQLAlchemy URLs of a database server
_TIMEOUT_S = 10  # a server that has not answered by then is taken for unreachable


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
