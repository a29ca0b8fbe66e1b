"""Files the commands write: checked before any work, then written whole or not at all.

:func:`check_output_path` refuses, before any work and without leaving anything behind, a path
that cannot take a regular file (or a folder): an empty path, a folder where a file is wanted
(or the reverse), a FIFO, a device (``/dev/null``, ``/dev/full``), a socket, a file the user
made read-only, or a folder that does not take a new file (``/proc``, a read-only disk, a
file standing where a folder should be). A missing folder is fine when its nearest existing
parent takes a new file: the writer creates it.

:func:`write_atomically` and :func:`atomic_writer` write into a temporary file in the target's
folder and move it over the target with ``os.replace``: a full disk, a crash or an exception
halfway leaves the previous file whole and no temporary file behind, and the target itself is
never opened (a FIFO never blocks the writer). They refuse what :func:`check_output_path`
refuses, so that no caller can replace a device by mistake.

A path the user names follows its symbolic links: the file the link names is written, in its
own folder. A file a command names itself inside a folder it owns (``launch_dir/rank-1/``,
the benchmark's report) is written with ``follow_symlinks=False``: a link standing there is
replaced, never written through.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO
from typing import Any

from autotune.simulators.errors import UserError

__all__ = ["atomic_writer", "check_output_path", "not_a_file", "write_atomically", "write_failure"]

_EXECUTABLE = stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def not_a_file(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be read as a file (``no such file``, ``a folder``, ``a FIFO (named
    pipe)``, ``a device``, ...); None for a regular file, through symbolic links. A pipe or a
    device could be read forever, so an input is read only from a regular file.

    Example:
        >>> not_a_file("/dev/zero")
        'a device'
    """
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "no such file"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None if stat.S_ISREG(mode) else _kind(mode)


def _target(path: str | os.PathLike[str], follow_symlinks: bool) -> Path:
    """The absolute path written: the file a symbolic link names, with ``follow_symlinks``."""
    text = os.fspath(path)
    return Path(os.path.realpath(text) if follow_symlinks else os.path.abspath(text))


def _check_entry(given: str, target: Path, folder: bool, follow_symlinks: bool) -> bool:
    """Refuse what stands at ``target`` if it cannot be replaced by a file (or be used as a
    folder); whether something stands there."""
    try:
        mode = (os.stat if follow_symlinks else os.lstat)(target).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    wanted = "folder" if folder else "file"
    if stat.S_ISDIR(mode) == folder and (folder or stat.S_ISREG(mode)):
        if not folder and not os.access(target, os.W_OK):
            raise UserError(f"{given} is a read-only file; make it writable or give another path")
        return True
    if stat.S_ISLNK(mode) and not folder:  # replaced, never written through
        return True
    raise UserError(f"{given} is {_kind(mode)}; give a {wanted} path")


def _check_folder(given: str, folder: Path) -> None:
    """Refuse a folder that would not take a new file (or whose nearest existing parent
    would not, when it is still to be created)."""
    home = folder
    while not os.path.lexists(home):
        home = home.parent
    if not home.is_dir():
        raise UserError(f"{given}: {home} is a file, not a folder")
    try:  # the one sure test (root ignores modes; /proc refuses); the file is gone at once
        with tempfile.TemporaryFile(dir=home):
            pass
    except OSError as exc:
        raise UserError(
            f"{given} cannot be written: {home} takes no new file ({exc.strerror or exc})"
        ) from None


def check_output_path(
    key: str,
    path: str | os.PathLike[str],
    *,
    folder: bool = False,
    follow_symlinks: bool = True,
    given: str | None = None,
) -> Path:
    """Refuse ``path`` (a file, or a folder with ``folder``) if it cannot be written, before
    any work and without writing it; the absolute path that will be written.

    Args:
        key: the setting that named the path (``out``, ``trace``, ``search.storage``...).
        path: the path, as given.
        folder: a folder is wanted, not a file.
        follow_symlinks: a symbolic link at ``path`` stands for the file it names (else it
            is replaced by the file written).
        given: the value as the user typed it, when it is not ``path`` (a URL).

    Raises:
        UserError: naming ``key``, the value and why it cannot be written.

    Example:
        >>> check_output_path("out", "/dev/null")
        Traceback (most recent call last):
        ...
        autotune.simulators.errors.UserError: out='/dev/null' is a device; give a file path
    """
    text = os.fspath(path)
    shown = f"{key}={text if given is None else given!r}"
    wanted = "folder" if folder else "file"
    if not text.strip():
        raise UserError(f"{shown} is empty; give a {wanted} path")
    if "\0" in text:
        raise UserError(f"{shown} is not a path (it holds a NUL byte)")
    if not folder and text.endswith(("/", os.sep)):
        raise UserError(f"{shown} ends in a slash, a folder's name; give a file path")
    if folder and os.path.islink(text) and not os.path.exists(text):  # no folder to write in
        raise UserError(
            f"{shown} is a symbolic link to {os.readlink(text)}, which does not exist; create "
            "that folder or give another path"
        )
    try:
        target = _target(text, follow_symlinks)
        exists = _check_entry(shown, target, folder, follow_symlinks)
        _check_folder(shown, target if folder and exists else target.parent)
    except OSError as exc:
        raise UserError(f"{shown} cannot be written: {exc.strerror or exc}") from None
    return target


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_writer(
    path: str | os.PathLike[str],
    *,
    binary: bool = False,
    follow_symlinks: bool = True,
    executable: bool = False,
    newline: str | None = None,
) -> Iterator[IO[Any]]:
    """A handle on a temporary file beside ``path`` that replaces ``path`` when the block
    ends without an exception (and is removed when it raises). Missing folders are created.

    The new file keeps the mode of the file it replaces (a new one: ``0o666`` less the
    umask); ``executable`` adds the execute bits the umask allows.

    Raises:
        UserError: ``path`` is a folder, a FIFO, a device or a read-only file.
        OSError: the disk is full, the folder cannot be created, ...
    """
    target = _target(path, follow_symlinks)
    shown = f"{os.fspath(path)!r}"
    existed = _check_entry(shown, target, folder=False, follow_symlinks=follow_symlinks)
    target.parent.mkdir(parents=True, exist_ok=True)
    umask = _umask()
    mode = 0o666 & ~umask
    if existed and target.is_file() and not target.is_symlink():
        mode = stat.S_IMODE(target.stat().st_mode)
    if executable:
        mode |= _EXECUTABLE & ~umask
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        if binary:
            opened: IO[Any] = os.fdopen(handle, "wb")
        else:
            opened = os.fdopen(handle, "w", encoding="utf-8", newline=newline)
        with opened as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_atomically(
    path: str | os.PathLike[str],
    content: str | bytes,
    *,
    follow_symlinks: bool = True,
    executable: bool = False,
) -> Path:
    """Write ``content`` (text as UTF-8, or bytes) to ``path`` whole or not at all; the
    absolute path written (see :func:`atomic_writer`)."""
    with atomic_writer(
        path,
        binary=isinstance(content, bytes),
        follow_symlinks=follow_symlinks,
        executable=executable,
        newline="",
    ) as handle:
        handle.write(content)
    return _target(path, follow_symlinks)


def write_failure(path: str | os.PathLike[str], exc: OSError | UserError) -> str:
    """One line that says why writing ``path`` failed (for the ``error:`` line a command
    prints after its result)."""
    if isinstance(exc, UserError):
        return str(exc)
    return f"{os.fspath(path)} was not written: {exc.strerror or exc}"
