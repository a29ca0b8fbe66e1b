"""Which process wrote a trial or a run, and whether that process is gone.

A trial or an MLflow run left RUNNING by a process that was killed (``kill -9``, a lost node)
carries its writer as ``host:pid``; the next command on the same host fails or ends it.
"""

from __future__ import annotations

import os
import socket

__all__ = ["dead_here", "this_process"]


def this_process() -> str:
    """``host:pid`` of the calling process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def dead_here(process: str) -> bool:
    """Whether ``process`` (``host:pid``) ran on this host and is no longer alive."""
    host, _, pid = process.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False
