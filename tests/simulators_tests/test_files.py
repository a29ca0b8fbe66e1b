"""Files are written whole or not at all, and a path that cannot take one is refused first."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from autotune.simulators import UserError
from autotune.simulators.files import atomic_writer
from autotune.simulators.files import check_output_path
from autotune.simulators.files import write_atomically
from tests.simulators_tests._disk import ROOM
from tests.simulators_tests._disk import fill_disk


def test_a_write_replaces_the_file_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "out.txt"  # the folder is made
    assert write_atomically(target, "one") == target
    write_atomically(target, b"two")
    assert target.read_text() == "two"
    assert [p.name for p in target.parent.iterdir()] == ["out.txt"]


def test_a_new_file_has_the_usual_mode_and_a_replaced_one_keeps_its_own(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    os.umask(umask)
    fresh = write_atomically(tmp_path / "new", "x")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask
    kept = tmp_path / "kept"
    kept.write_text("old")
    kept.chmod(0o640)
    write_atomically(kept, "new")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640
    script = write_atomically(tmp_path / "run.sh", "echo", executable=True)
    assert os.access(script, os.X_OK)


def test_a_full_disk_leaves_the_previous_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "table.csv"
    target.write_text("previous\n")
    fill_disk(monkeypatch, room=ROOM)  # the file is cut there
    with pytest.raises(OSError, match="No space left"):
        write_atomically(target, "x" * (2 * ROOM))
    assert target.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]  # no temporary file left


def test_an_exception_inside_the_block_keeps_the_previous_file(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("previous")
    with pytest.raises(RuntimeError), atomic_writer(target) as handle:
        handle.write("half")
        raise RuntimeError
    assert target.read_text() == "previous" and len(list(tmp_path.iterdir())) == 1


@pytest.mark.parametrize("kind", ["fifo", "folder", "/dev/null", "/dev/full"])
def test_what_is_not_a_regular_file_is_refused_by_the_check_and_the_writer(
    tmp_path: Path, kind: str
) -> None:
    target = tmp_path / "x"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "folder":
        target.mkdir()
    else:
        target = Path(kind)
    with pytest.raises(UserError, match=r"out='.*' is (a FIFO|a folder|a device)"):
        check_output_path("out", target)
    with pytest.raises(UserError, match="give a file path"):  # never opened: no hang
        write_atomically(target, "x")
    assert target.exists()  # left as it was


def test_a_user_link_is_followed_and_a_link_in_an_owned_folder_is_replaced(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    assert check_output_path("out", link) == real
    write_atomically(link, "followed")
    assert link.is_symlink() and real.read_text() == "followed"
    write_atomically(link, "replaced", follow_symlinks=False)
    assert not link.is_symlink() and link.read_text() == "replaced"
    assert real.read_text() == "followed"  # never written through


@pytest.mark.parametrize(
    ("path", "folder", "words"),
    [
        ("", False, "out='' is empty; give a file path"),
        ("/proc/x.csv", False, "out='/proc/x.csv' cannot be written: /proc takes no new file"),
        ("/etc/passwd/x.csv", False, "/etc/passwd is a file, not a folder"),
        ("/etc/passwd", True, "out='/etc/passwd' is a file; give a folder path"),
        ("a\0b", False, "is not a path (it holds a NUL byte)"),
    ],
)
def test_paths_that_cannot_be_written_are_refused_with_the_reason(
    path: str, folder: bool, words: str
) -> None:
    with pytest.raises(UserError) as refused:
        check_output_path("out", path, folder=folder)
    assert words in str(refused.value)


def test_the_check_writes_nothing(tmp_path: Path) -> None:
    check_output_path("out", tmp_path / "a" / "b" / "c.csv")
    check_output_path("out", tmp_path / "d", folder=True)
    assert list(tmp_path.iterdir()) == []
