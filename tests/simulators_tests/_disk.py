"""A full disk, in this process: no test can fill a real one, so the file handles the atomic
writer opens take a few bytes (none, or 4 KiB) and then fail with ENOSPC, as ``write(2)`` does
on a full disk."""

from __future__ import annotations

import errno
import os
from typing import Any

import pytest

import autotune.simulators.files

ROOM = 4096  # bytes a file may take before the disk is full


class _FullFile:
    """A file handle that writes ``room`` bytes, then raises ENOSPC."""

    def __init__(self, stream: Any, room: int) -> None:
        self._stream = stream
        self._left = room

    def write(self, data: Any) -> int:
        if len(data) > self._left:
            self._stream.write(data[: self._left])
            self._left = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._left -= len(data)
        return int(self._stream.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __enter__(self) -> _FullFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stream.close()


def fill_disk(monkeypatch: pytest.MonkeyPatch, room: int = 0) -> None:
    """From now on (in this test), every file the atomic writer opens takes ``room`` bytes."""
    opened = os.fdopen

    def full(descriptor: int, *args: Any, **kwargs: Any) -> _FullFile:
        return _FullFile(opened(descriptor, *args, **kwargs), room)

    monkeypatch.setattr(autotune.simulators.files.os, "fdopen", full)
