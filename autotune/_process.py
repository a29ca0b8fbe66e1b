"""Which process wrote a trial or a run, and whether that process is gone.

A trial or an MLflow run left RUNNING by a process that was killed (``kill -9``, a lost node)
carries its writer as ``host:pid``; the next command on the same host fails or ends it. A
worker process follows its parent out (:func:`die_with_parent`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable

__all__ = [
    "ORPHAN_GRACE_S",
    "PARENT_POLL_S",
    "dead_here",
    "die_with_parent",
    "pool_worker",
    "this_process",
]

PARENT_POLL_S = 0.5  # seconds between two looks at a worker's parent
# Seconds an orphaned worker has to finish its trial in flight (a trial of the slowest
# simulator takes a few seconds); past them it ends at once, its trial left to the next command.
ORPHAN_GRACE_S = 20.0
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


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


def die_with_parent(parent: int, on_parent_gone: Callable[[], None]) -> None:
    """Make a worker process follow ``parent`` (its pid) out, even after ``kill -9``.

    On Linux the kernel sends SIGTERM when the parent dies (``prctl(PR_SET_PDEATHSIG)``);
    everywhere, a thread looks at the parent every :data:`PARENT_POLL_S` and calls
    ``on_parent_gone`` once it is gone (an orphan is adopted: its parent pid changes). The
    worker's SIGTERM handler decides what to finish first; a worker still there
    :data:`ORPHAN_GRACE_S` later (blocked, or finishing more than it should) ends at once, with
    exit status 1.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        on_parent_gone()
        time.sleep(ORPHAN_GRACE_S)
        os._exit(1)  # nobody is left to report to; the next command fails its trial

    threading.Thread(target=watch, name="autotune-parent-watch", daemon=True).start()


def pool_worker(parent: int) -> None:
    """The start of a ``multiprocessing.Pool`` worker: Ctrl-C reaches the parent, which ends
    the pool (SIGTERM, default: the process ends quietly); it ends with its parent too."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(parent, lambda: os.kill(os.getpid(), signal.SIGTERM))
