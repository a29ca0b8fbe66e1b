"""Whatever path a user gives an output, the command writes it whole or refuses it first.

Hypothesis draws, for each output of the search (``probes_out``, ``launch_dir``,
``search.storage`` as SQLite or journal) and for the writer itself, a path from the kinds a
hostile user can make: absent, a regular file, a folder, a FIFO, a symbolic link to a folder,
to a file or to nothing, ``/dev/null``, ``/dev/full``, ``/proc/x``, a missing parent folder, a
read-only folder, a file standing where a folder should be. Each case either writes a regular
file (or folder) there, or refuses with one ``error:`` line before any work and leaves the
folder as it was; it never hangs (an alarm fails the test) and never shows a traceback.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import stat
import tempfile
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from autotune.simulators import UserError
from autotune.simulators.files import check_output_path
from autotune.simulators.files import write_atomically
from tests.dataset_tests._tables import write
from tests.simulators_tests._disk import fill_disk

SMALL = ["model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1", "search.top_k=1"]
QUICK = [*SMALL, "tracking.enabled=false", "output=json"]
HANG_S = 60  # far beyond a refusal (milliseconds) or this small search (seconds)
ROOT = os.geteuid() == 0  # root writes into a read-only folder


def _make(kind: str, folder: Path) -> str:
    """A path of ``kind`` in ``folder`` (made there), or a system path."""
    inside = folder / "out"
    if kind == "file":
        inside.write_text("what was there\n")
    elif kind == "folder":
        inside.mkdir()
    elif kind == "fifo":
        os.mkfifo(inside)
    elif kind in ("link_to_folder", "link_to_file"):
        real = folder / "real"
        real.mkdir() if kind == "link_to_folder" else real.write_text("real\n")
        inside.symlink_to(real)
    elif kind == "dangling_link":
        inside.symlink_to(folder / "nowhere")
    elif kind == "read_only_folder":
        locked = folder / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        inside = locked / "out"
    elif kind == "file_as_parent":
        (folder / "plain").write_text("a file\n")
        inside = folder / "plain" / "out"
    elif kind == "missing_parent":
        inside = folder / "a" / "b" / "out"
    elif kind != "absent":
        return {"dev_null": "/dev/null", "dev_full": "/dev/full", "proc": "/proc/x"}[kind]
    return str(inside)


KINDS = [
    "absent",
    "file",
    "folder",
    "fifo",
    "link_to_folder",
    "link_to_file",
    "dangling_link",
    "dev_null",
    "dev_full",
    "proc",
    "missing_parent",
    "read_only_folder",
    "file_as_parent",
]
# Kinds that can never take a file (or a folder): refused, whoever runs the command.
NOT_A_FILE = {"folder", "fifo", "link_to_folder", "dev_null", "dev_full", "proc", "file_as_parent"}
NOT_A_FOLDER = {"file", "fifo", "link_to_file", "dev_null", "dev_full", "proc", "file_as_parent"}


def _snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every entry under ``folder``: its type and, for a file, its bytes."""
    seen = {}
    for path in sorted(folder.rglob("*")):
        mode = path.lstat().st_mode
        regular = stat.S_ISREG(mode)
        seen[str(path.relative_to(folder))] = (
            stat.S_IFMT(mode),
            path.read_bytes() if regular else b"",
        )
    return seen


@contextlib.contextmanager
def _no_hang() -> Iterator[None]:
    """Fail, instead of hanging, when the block blocks (on a FIFO) for ``HANG_S`` seconds."""

    def hung(*_: Any) -> None:
        raise TimeoutError(f"blocked for {HANG_S} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _workspace() -> Iterator[Path]:
    """An empty folder as the working folder (read-only folders made writable to clean up)."""
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="autotune-paths-") as name:
        folder = Path(name)
        os.chdir(folder)
        try:
            yield folder
        finally:
            os.chdir(here)
            for path in folder.rglob("*"):
                if path.is_dir() and not path.is_symlink():
                    path.chmod(0o755)


def _run(capsys: pytest.CaptureFixture[str], module: str, *args: str) -> tuple[int, str, str]:
    main = importlib.import_module(module).main
    capsys.readouterr()
    with _no_hang():
        try:
            status = main(list(args))
        except SystemExit as exc:  # pragma: no cover - reported below
            status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def assert_refused(status: int, out: str, err: str) -> None:
    """One ``error:`` line, before the work (nothing on stdout), no traceback."""
    assert status == 2, err
    assert "Traceback" not in err
    assert out == ""
    assert [line for line in err.splitlines() if line.strip()] == [err.splitlines()[0]]
    assert err.startswith("error: "), err


# Each output of the search: the overrides that name it, whether a folder is wanted, and the
# files the search says it wrote there (from its JSON object).
Written = Callable[[dict[str, Any], str], list[str]]
OUTPUTS: dict[str, tuple[Callable[[str], list[str]], bool, Written]] = {
    "probes_out": (
        lambda path: ["probes=1", f"probes_out={path}"],
        False,
        lambda payload, _: [payload["probe_round"]["probes_csv"]],
    ),
    "launch_dir": (
        lambda path: [f"launch_dir={path}"],
        True,
        lambda payload, _: payload["launch_files"],
    ),
    "search.storage": (
        lambda path: [f"search.storage=sqlite:///{path}"],
        False,
        lambda _, path: [path],
    ),
    "journal": (
        lambda path: [f"search.storage=journal:{path}"],
        False,
        lambda _, path: [path],
    ),
}


def _check_search_output(
    capsys: pytest.CaptureFixture[str], output: str, kind: str
) -> tuple[int, str]:
    overrides, folder_wanted, written = OUTPUTS[output]
    with _workspace() as folder:
        path = _make(kind, folder)
        before = _snapshot(folder)
        status, out, err = _run(capsys, "autotune.__main__", *QUICK, *overrides(path))
        assert "Traceback" not in err
        if status == 2:
            assert_refused(status, out, err)
            assert _snapshot(folder) == before  # nothing made, nothing changed
        else:
            assert status == 0, err
            for file in written(json.loads(out), path):
                assert stat.S_ISREG(os.stat(file).st_mode), file
            if kind == "file" and output == "probes_out":
                assert Path(path).read_text() == "what was there\n"  # not a probe template
        refused = NOT_A_FOLDER if folder_wanted else NOT_A_FILE
        if kind in refused or (kind == "read_only_folder" and not ROOT):
            assert status == 2, f"{output}={kind} was not refused"
        return status, err


@pytest.mark.parametrize("output", sorted(OUTPUTS))
@pytest.mark.parametrize("kind", ["fifo", "dev_full", "proc", "file_as_parent"])
def test_an_output_that_cannot_be_written_is_refused_before_the_search(
    capsys: pytest.CaptureFixture[str], output: str, kind: str
) -> None:
    _check_search_output(capsys, output, kind)


@pytest.mark.slow
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(output=st.sampled_from(sorted(OUTPUTS)), kind=st.sampled_from(KINDS))
def test_every_search_output_is_written_whole_or_refused_first(
    capsys: pytest.CaptureFixture[str], output: str, kind: str
) -> None:
    _check_search_output(capsys, output, kind)


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(KINDS), folder_wanted=st.booleans(), follow=st.booleans())
def test_the_check_and_the_writer_agree_on_every_kind_of_path(
    kind: str, folder_wanted: bool, follow: bool
) -> None:
    """What the check lets through, the writer writes whole (a file, or a file in the
    folder); what it refuses, it refuses with one sentence, and nothing is left behind."""
    with _workspace() as folder, _no_hang():
        path = _make(kind, folder)
        try:
            check_output_path("out", path, folder=folder_wanted, follow_symlinks=follow)
        except UserError as refused:
            assert "\n" not in str(refused) and str(refused).startswith("out=")
            assert kind in (NOT_A_FOLDER if folder_wanted else NOT_A_FILE) | {
                "read_only_folder",
                "dangling_link",  # as a folder without following it: a link, not a folder
                "link_to_folder",
                "link_to_file",
            }
            return
        target = Path(path) / "file" if folder_wanted else Path(path)
        write_atomically(target, "new\n", follow_symlinks=follow)
        assert target.read_text() == "new\n"
        leftovers = [p for p in folder.rglob(".*") if p.name.startswith(".out.")]
        assert leftovers == []


def test_a_refused_search_creates_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """A refusal found only once the space is built (tp=3 does not divide 32 heads) comes
    before the study's database, the MLflow store and the launch folder are made."""
    with _workspace() as folder:
        status, out, err = _run(
            capsys,
            "autotune.__main__",
            *SMALL,
            "parallel.tp=3",
            f"search.storage=sqlite:///{folder / 'study' / 'optuna.db'}",
            f"tracking.uri=sqlite:///{folder / 'mlruns' / 'mlflow.db'}",
            "launch_dir=launch",
        )
        assert status == 2 and "tp=3" in err and "Traceback" not in err
        assert list(folder.iterdir()) == []


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error: ")]


def test_a_full_disk_keeps_the_earlier_files_and_prints_the_result_first(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launch script and the probes' CSV of an earlier search stay whole when the disk
    fills up; the search's answer is printed, then one ``error:`` line (exit 2)."""
    with _workspace() as folder:
        status, _, err = _run(capsys, "autotune.__main__", *QUICK, "probes=1")
        assert status == 0, err
        before = _snapshot(folder)
        assert "launch/rank-1/launch_mindspeed.sh" in before and "probes.csv" in before
        fill_disk(monkeypatch)
        status, out, err = _run(capsys, "autotune.__main__", *QUICK, "probes=1", "parallel.tp=2")
        assert status == 2 and "Traceback" not in err
        assert json.loads(out)["best"]["tp"] == 2  # the result, printed first
        (error,) = _errors(err)
        assert "No space left on device" in error and err.rstrip().endswith(error)
        assert _snapshot(folder) == before  # whole, as they were; no temporary file left


def test_a_full_disk_keeps_the_earlier_calibration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write(tmp_path / "runs.csv", {"tp": 8, "dp": 1}, {"tp": 4, "dp": 2})
    out = tmp_path / "cal.yaml"
    out.write_text("# an earlier calibration\n")
    fill_disk(monkeypatch)
    status, printed, err = _run(
        capsys,
        "autotune.calibrate.__main__",
        f"data={data}",
        "name=toy",
        f"out={out}",
        "calibrate.bootstrap_samples=2",
    )
    assert status == 2 and "Traceback" not in err
    assert "Calibration of the analytical simulator" in printed  # the fit, printed first
    (error,) = _errors(err)
    assert f"{out} was not written: No space left on device" in error
    assert out.read_text() == "# an earlier calibration\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.yaml", "runs.csv"]


JOB = ["model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1"]
OFF = "tracking.enabled=false"


@pytest.mark.parametrize(
    ("module", "args", "fifo"),
    [
        ("autotune.simulate", [*JOB, "simulator=hierarchical"], "trace="),
        ("autotune.profile", [*JOB, "device=cpu"], "out="),
        ("autotune.calibrate.__main__", ["data={data}", "name=x"], "out="),
        ("autotune.benchmark.__main__", ["data={data}", OFF], "report_dir="),
        ("autotune.benchmark.__main__", ["data={data}", OFF, "report_dir=r"], "r/benchmark.md"),
        ("autotune.benchmark.__main__", ["data={data}", OFF, "report_dir=r"], "r/plots.html"),
        ("autotune.__main__", [*QUICK, "probes=1"], "probes_out="),
        ("autotune.__main__", [*QUICK, "launch_dir=l"], "l/rank-1"),
    ],
)
def test_a_fifo_at_any_output_is_refused_before_the_work(
    capsys: pytest.CaptureFixture[str], module: str, args: list[str], fifo: str
) -> None:
    """A FIFO would block the writer forever: each command refuses it first."""
    with _workspace() as folder:
        data = write(folder / "runs.csv", {"tp": 8, "dp": 1}, {"tp": 4, "dp": 2})
        given = [a.replace("{data}", str(data)) for a in args]
        if fifo.endswith("="):  # the output itself
            os.mkfifo(folder / "pipe")
            given.append(f"{fifo}pipe")
        else:  # a file or folder the command writes inside the folder it is given
            (folder / fifo).parent.mkdir()
            os.mkfifo(folder / fifo)
        before = _snapshot(folder)
        status, out, err = _run(capsys, module, *given)
        assert_refused(status, out, err)
        assert "FIFO" in err or "not a folder" in err, err
        assert _snapshot(folder) == before


def test_launch_files_go_only_into_marked_rank_folders(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """launch_dir=. writes rank-N folders and its config.yaml, listed in its manifest, and
    nothing else; a later search with fewer ranks removes only the files autotune wrote; a
    symbolic link as rank-1 is refused."""
    with _workspace() as folder:
        (folder / ".env").write_text("SECRET=1\n")
        status, out, err = _run(
            capsys, "autotune.__main__", *QUICK, "launch_dir=.", "search.top_k=2"
        )
        assert status == 0, err
        assert json.loads(out)["launch_files"] == [
            "rank-1/launch_mindspeed.sh",
            "rank-2/launch_mindspeed.sh",
        ]
        (folder / "rank-2" / "notes.txt").write_text("mine\n")  # a user's file in rank-2
        (folder / "rank-3").mkdir()  # a folder autotune did not write
        (folder / "rank-3" / "launch_mindspeed.sh").write_text("mine\n")
        status, out, err = _run(capsys, "autotune.__main__", *QUICK, "launch_dir=.")
        assert status == 0, err
        assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == [
            ".autotune-files",  # lists config.yaml, the config the search ran with
            ".env",
            "config.yaml",
            "rank-1",
            "rank-1/.autotune-files",
            "rank-1/launch_mindspeed.sh",
            "rank-2",
            "rank-2/notes.txt",
            "rank-3",
            "rank-3/launch_mindspeed.sh",
        ]
        outside = folder / "outside"
        outside.mkdir()
        (folder / "rank-1" / ".autotune-files").unlink()
        (folder / "rank-1" / "launch_mindspeed.sh").unlink()
        (folder / "rank-1").rmdir()
        (folder / "rank-1").symlink_to(outside)
        status, out, err = _run(capsys, "autotune.__main__", *QUICK, "launch_dir=.")
        assert_refused(status, out, err)
        assert "rank-1 is a symbolic link" in err
        assert list(outside.iterdir()) == []  # never written through


def test_a_huge_top_k_checks_only_the_rank_folders_there_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """search.top_k=10^12 reads launch_dir once (it looked at every rank-N up to top_k: hours),
    refuses a link at a far rank, and otherwise writes the layouts there are."""
    huge = "search.top_k=1000000000000"
    with _workspace() as folder:
        (folder / "rank-2000").symlink_to(folder)
        status, out, err = _run(capsys, "autotune.__main__", *QUICK, "launch_dir=.", huge)
        assert_refused(status, out, err)
        assert "rank-2000 is a symbolic link" in err
        (folder / "rank-2000").unlink()
        status, out, err = _run(capsys, "autotune.__main__", *QUICK, "launch_dir=.", huge)
        assert status == 0, err
        assert (folder / "rank-1").is_dir() and not (folder / "rank-2000").exists()


@pytest.mark.slow
def test_mlflow_keeps_exactly_the_launch_files(capsys: pytest.CaptureFixture[str]) -> None:
    """launch_dir=. logs rank-1's files, not the working folder (nor a copy of itself)."""
    import mlflow

    with _workspace() as folder:
        (folder / ".env").write_text("SECRET=1\n")
        uri = f"sqlite:///{folder / 'db' / 'mlflow.db'}"
        status, out, err = _run(
            capsys,
            "autotune.__main__",
            *SMALL,
            "output=json",
            f"tracking.uri={uri}",
            "launch_dir=.",
        )
        assert status == 0, err
        client = mlflow.MlflowClient(uri)

        def files(path: str) -> list[str]:
            found = []
            for entry in client.list_artifacts(json.loads(out)["mlflow_run_id"], path):
                found += files(entry.path) if entry.is_dir else [entry.path]
            return found

        assert files("launch") == ["launch/rank-1/launch_mindspeed.sh"]
        assert not any(".env" in path or "db/" in path for path in files(""))


@pytest.mark.slow
def test_processes_creating_one_mlflow_database_all_record(tmp_path: Path) -> None:
    """Four searches that start on one new MLflow database at once each record their run
    (MLflow creates the database's tables without a lock: autotune holds one)."""
    import subprocess
    import sys

    import mlflow

    uri = f"sqlite:///{tmp_path / 'db' / 'mlflow.db'}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    command = [sys.executable, "-m", "autotune", *SMALL, f"tracking.uri={uri}", "launch_dir=null"]
    searches = [
        subprocess.Popen(
            command,
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for search in searches:
        out, err = search.communicate(timeout=600)
        assert search.returncode == 0 and "not recorded" not in err, err
    runs = mlflow.MlflowClient(uri).search_runs(
        [mlflow.MlflowClient(uri).get_experiment_by_name("autotune").experiment_id],
        filter_string="tags.`autotune.command` = 'search'",
    )
    assert len(runs) == 4


@pytest.mark.slow
def test_mlflow_keeps_exactly_the_report_files(capsys: pytest.CaptureFixture[str]) -> None:
    """report_dir=. logs the report it wrote, not the rest of the working folder."""
    import mlflow

    with _workspace() as folder:
        data = write(folder / "runs.csv", {"tp": 8, "dp": 1}, {"tp": 4, "dp": 2})
        uri = f"sqlite:///{folder / 'db' / 'mlflow.db'}"
        status, _, err = _run(
            capsys,
            "autotune.benchmark.__main__",
            f"data={data}",
            "report_dir=.",
            f"tracking.uri={uri}",
            "bootstrap_samples=10",
        )
        assert status == 0, err
        client = mlflow.MlflowClient(uri)
        (run,) = client.search_runs(
            [client.get_experiment_by_name("benchmark").experiment_id],
            filter_string="attributes.run_name = 'benchmark zero_shot'",
        )
        logged = {entry.path for entry in client.list_artifacts(run.info.run_id, "report")}
        assert "report/benchmark.md" in logged
        assert logged <= {f"report/{p.name}" for p in folder.iterdir() if p.is_file()}
        assert "report/runs.csv" not in logged


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["name=../../outside"], "name='../../outside' is not a name"),
        (["name=a/b"], "name='a/b' is not a name"),
        (["name=.hidden"], "name='.hidden' is not a name"),
        (["name=x.yaml"], "name='x.yaml' ends in .yaml"),
        (["name=x", "out=/dev/full"], "out='/dev/full' is a device; give a file path"),
        (["name=x", "out=/proc/c.yaml"], "/proc takes no new file"),
    ],
)
def test_a_calibration_is_written_only_where_it_can_be(
    capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    """A calibration's name is a file of ./calibrations/, never a path out of it."""
    with _workspace() as folder:
        status, out, err = _run(capsys, "autotune.calibrate.__main__", "data=x.csv", *args)
        assert_refused(status, out, err)
        assert words in err
        assert list(folder.iterdir()) == []
