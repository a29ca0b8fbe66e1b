"""Signals, from a command's start to its exit; a search killed outright loses at most the trial
in flight.

SIGINT and SIGTERM, at any stage of any command: one line says so and what was recorded, an
open MLflow run ends KILLED, no temporary folder is left, the command exits 130 or 143 without
a traceback; a search prints the best layout so far. ``kill -9`` of a search's parent ends its
workers. ``kill -9`` at random moments, then the same command: the study ends with exactly
``n_trials`` complete trials, nothing RUNNING in the study or in MLflow.
``AUTOTUNE_TEST_KILLS=20 python -m pytest -k kill_9 tests/autotune_tests`` kills 20 times
(CI: 4).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune import _signals
from autotune.cli import Command
from autotune.cli import run_command
from autotune.config import AutotuneConfig
from autotune.config import TrackingConfig
from autotune.tracking import TrackedRun
from autotune.tracking import record

SEARCH = (
    "model=llama2_7b",
    "cluster=ascend",
    "cluster.num_nodes=1",
    "search.sampler=tpe",
    "search.grid_budget_s=0.001",  # no exhaustive pricing beside the sampler
    "search.study_name=faults",
)
REPO = Path(__file__).resolve().parents[2]


STATUS = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]


def _signal_self(number: int) -> None:
    """``number`` to this process: Python runs its handler before the next line."""
    os.kill(os.getpid(), number)


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder where ``tempfile`` makes temporary files and folders, empty."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.mark.parametrize(("number", "code"), STATUS)
def test_a_signal_in_a_command_cleans_up_says_so_and_exits_with_its_status(
    temp_dir: Path, capsys: pytest.CaptureFixture[str], number: int, code: int
) -> None:
    def run(config: AutotuneConfig) -> None:
        with tempfile.TemporaryDirectory(prefix="autotune-work-"):
            _signal_self(number)
            raise AssertionError("the signal did not interrupt the command")

    command = Command("autotune", "config", AutotuneConfig, "", (("model", ""),), (), run)
    assert run_command(command, ["tracking.enabled=false"]) == code
    lines = capsys.readouterr().err.strip().splitlines()
    name = signal.Signals(number).name
    assert lines == [f"interrupted by {name}: nothing was recorded in MLflow"]
    assert list(temp_dir.iterdir()) == []  # the temporary folder went on the way out


def test_a_signal_during_the_record_ends_the_run_killed_and_the_next_record_skipped(
    tmp_path: Path, temp_dir: Path
) -> None:
    import mlflow

    config = TrackingConfig(
        enabled=True, uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="x"
    )

    def fill(run: TrackedRun) -> None:
        run.params({"stage": "record"})
        _signal_self(signal.SIGTERM)  # deferred to the next MLflow call, which it stops
        run.metrics({"after_the_signal": 1.0})
        raise AssertionError("the signal did not interrupt the record")

    with _signals.honoured():
        recorded = record(config, "interrupted", fill, tags={})
        skipped = record(config, "after", fill, tags={})
        line = _signals.summary(signal.SIGTERM)
    assert recorded.run_id is not None and recorded.problem is not None
    assert recorded.problem.startswith("interrupted by SIGTERM")
    assert f"MLflow run {recorded.run_id} marked KILLED" in line
    run = mlflow.MlflowClient(config.uri).get_run(recorded.run_id)
    assert run.info.status == "KILLED" and run.data.params == {"stage": "record"}
    assert "after_the_signal" not in run.data.metrics
    assert skipped.run_id is None and skipped.problem  # nothing more after the signal
    assert list(temp_dir.iterdir()) == []  # the artifact folder went with the run


def test_in_a_deferred_stretch_the_first_signal_sets_a_flag_and_the_second_interrupts() -> None:
    first: list[int] = []
    with _signals.honoured(), _signals.deferred(first.append):
        _signal_self(signal.SIGTERM)
        assert first == [signal.SIGTERM] and _signals.received() == signal.SIGTERM
        assert not _signals.interrupted()
        with pytest.raises(_signals.Interrupted) as raised:
            _signal_self(signal.SIGINT)
        assert _signals.interrupted()
    assert raised.value.name == "SIGINT"
    assert not _signals.interrupted()  # the next command in this process starts afresh
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # pytest's, back


class _Running:
    """``python ARGS`` in a subprocess (TMPDIR in its folder), its output read as it comes."""

    def __init__(self, folder: Path, *args: str) -> None:
        self.folder = folder
        (folder / "tmp").mkdir(exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(folder / "tmp")}
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.err: list[str] = []
        self.out: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(stream, lines), daemon=True)
            for stream, lines in ((self.proc.stderr, self.err), (self.proc.stdout, self.out))
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, lines: list[str]) -> None:
        lines.extend(iter(stream.readline, ""))

    def wait_until(self, condition: Callable[[], bool], what: str) -> None:
        """Until ``condition()`` (fails the test if the command ends first, or after 300 s)."""
        deadline = time.monotonic() + 300
        while not condition():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                self.close()
                raise AssertionError(f"no {what}: {''.join(self.err)}")
            time.sleep(0.05)

    def wait_for(self, text: str) -> None:
        """Until a line of stderr holds ``text``."""
        self.wait_until(lambda: any(text in line for line in self.err), repr(text))

    def stop(self, number: int) -> tuple[int, str, str]:
        """Send ``number``; the exit status, stdout and stderr."""
        try:
            self.proc.send_signal(number)
            code = self.proc.wait(timeout=120)
        finally:  # a failure here must not leave the command running into the next test
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self.close()
        return code, "".join(self.out), "".join(self.err)

    def close(self) -> None:
        """Read the output to its end (every process that holds its pipes has ended)."""
        for reader in self._readers:
            reader.join()
        for stream in (self.proc.stdout, self.proc.stderr):
            assert stream is not None
            stream.close()


def _assert_interrupted(folder: Path, number: int, code: int, err: str) -> None:
    """Exit status 128 + ``number``, no traceback, the line that says what was recorded last,
    no temporary file or folder left (torch's compile cache, made where torch is imported,
    is a cache kept on purpose)."""
    assert code == 128 + number, err
    assert "Traceback" not in err
    assert (
        err.strip().splitlines()[-1].startswith(f"interrupted by {signal.Signals(number).name}: ")
    )
    left = [p.name for p in (folder / "tmp").iterdir() if not p.name.startswith("torchinductor_")]
    assert left == []


def _run_states(folder: Path) -> list[str]:
    """The states of the MLflow runs in ``folder``'s store, read without writing."""
    database = folder / "mlflow.db"
    if not database.exists():
        return []
    try:
        with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)) as db:
            return [state for (state,) in db.execute("SELECT status FROM runs")]
    except sqlite3.OperationalError:  # the tables are not there yet
        return []


@pytest.mark.slow
@pytest.mark.parametrize(("number", "code"), STATUS)
def test_a_signal_during_the_record_of_a_search_prints_it_and_ends_the_run_killed(
    tmp_path: Path, number: int, code: int
) -> None:
    command = _Running(tmp_path, "-m", "autotune", *SEARCH[:3], f"tracking.uri={_store(tmp_path)}")
    command.wait_until(lambda: "RUNNING" in _run_states(tmp_path), "MLflow run")
    status, out, err = command.stop(number)
    _assert_interrupted(tmp_path, number, status, err)
    assert "Top 5 of " in out  # what the search found is printed all the same
    assert "not recorded in MLflow: interrupted by" in err
    (parent,) = [r for r in _runs(tmp_path) if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.status == "KILLED"
    assert "RUNNING" not in _run_states(tmp_path)


@pytest.mark.slow
def test_sigterm_stops_a_long_grid_at_the_layout_in_flight(tmp_path: Path) -> None:
    command = _Running(
        tmp_path,
        "-m",
        "autotune",
        "model=llama3_70b",
        "cluster=ascend",
        "cluster.num_nodes=4",
        "simulator=hierarchical",  # 3,294 layouts, about a minute
        "search.sampler=grid",
        "tracking.enabled=false",
    )
    command.wait_for("hierarchical: ")  # its first progress line: a tenth is priced
    code, out, err = command.stop(signal.SIGTERM)
    _assert_interrupted(tmp_path, signal.SIGTERM, code, err)
    assert "hierarchical: " not in err.split("stopping after the layout in flight")[1]
    assert "The search was stopped: the table shows the best layouts found so far" in out


def _imported(module: str) -> Callable[[_Running], bool]:
    """Whether ``python -X importtime`` has reported ``module`` imported."""
    return lambda command: any(line.rstrip().endswith(f"| {module}") for line in command.err)


def _said(text: str) -> Callable[[_Running], bool]:
    return lambda command: any(text in line for line in command.err)


def _recording(command: _Running) -> bool:
    return "RUNNING" in _run_states(command.folder)


TRACKING = "tracking.uri=sqlite:///mlflow.db"  # in the folder the command runs in
# Each command at a stage: while Python imports it (the handler is set first thing), pricing,
# fitting, timing operators, recording in MLflow.
STAGES = {
    "simulate, importing": (
        ["-X", "importtime", "-m", "autotune.simulate", *SEARCH[:3], TRACKING],
        _imported("autotune"),
        signal.SIGINT,
    ),
    "benchmark, recording": (
        ["-m", "autotune.benchmark", "data=vtrain", "report_dir=report", TRACKING],
        _recording,
        signal.SIGINT,
    ),
    "calibrate, fitting": (
        ["-m", "autotune.calibrate", "data=vtrain", "name=x", "out=x.yaml"],
        _said("fitting the analytical simulator"),
        signal.SIGTERM,
    ),
    "profile, timing": (
        ["-m", "autotune.profile", "model=llama2_7b", "device=cpu", "budget_s=60"],
        _said("profile: "),
        signal.SIGTERM,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("stage", STAGES)
def test_every_command_honours_a_signal_at_every_stage(tmp_path: Path, stage: str) -> None:
    args, reached, number = STAGES[stage]
    command = _Running(tmp_path, *args)
    command.wait_until(lambda: reached(command), stage)
    code, out, err = command.stop(number)
    _assert_interrupted(tmp_path, number, code, err)
    if reached is _recording:  # the run it was writing, as MLflow reads it (a child run it
        # finished before the signal stays FINISHED)
        runs = _runs(tmp_path, "benchmark")
        parents = [run for run in runs if "mlflow.parentRunId" not in run.data.tags]
        assert [run.info.status for run in parents] == ["KILLED"]
    assert "RUNNING" not in _run_states(tmp_path)
    assert not (tmp_path / "x.yaml").exists() and not (tmp_path / "op_costs.csv").exists()


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _describe(pids: Iterable[int], command: _Running) -> str:
    """What each of ``pids`` is and where it waits, and the end of the command's stderr."""
    lines = []
    for pid in pids:
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            threads = [
                f"{(task / 'comm').read_text().strip()}@{(task / 'wchan').read_text()}"
                for task in Path(f"/proc/{pid}/task").iterdir()
            ]
            lines.append(f"{pid} {state} {argv[:200]} threads: {', '.join(threads)}")
    return "\n".join([*lines, *command.err[-20:]])


def test_an_orphan_that_does_not_stop_is_ended_after_its_grace_period(tmp_path: Path) -> None:
    code = (
        "import os, time\n"
        "from autotune import _process\n"
        "_process.ORPHAN_GRACE_S = 0.5\n"
        "_process.die_with_parent(os.getppid() + 1, lambda: None)  # gone, says the watch\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=60, check=False)
    assert done.returncode == 1 and time.monotonic() - started < 30


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")
def test_kill_9_of_a_search_ends_its_workers(tmp_path: Path) -> None:
    command = _Running(
        tmp_path,
        "-m",
        "autotune",
        *SEARCH,
        "search.workers=3",
        "search.n_trials=100000",
        f"search.storage=sqlite:///{tmp_path / 'study.db'}",
        "tracking.enabled=false",
    )
    command.wait_for("3 workers sample the study")
    command.wait_until(lambda: _complete_trials(tmp_path) >= 20, "20 trials")
    workers = _children(command.proc.pid)
    command.proc.kill()
    try:
        deadline = time.monotonic() + 60
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(map(_alive, workers)), _describe(filter(_alive, workers), command)
        count = _complete_trials(tmp_path)
        time.sleep(2)
        assert _complete_trials(tmp_path) == count  # nobody samples the study any more
    finally:  # a worker left running must not outlive the test
        for pid in filter(_alive, workers):
            os.kill(pid, signal.SIGKILL)
        command.proc.wait()
        command.close()


def _store(folder: Path) -> str:
    return f"sqlite:///{folder / 'mlflow.db'}"


def _command(folder: Path, n_trials: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "autotune",
        *SEARCH,
        f"search.n_trials={n_trials}",
        f"search.storage=sqlite:///{folder / 'study.db'}",
        f"tracking.uri=sqlite:///{folder / 'mlflow.db'}",
    ]


def _start(folder: Path, n_trials: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        _command(folder, n_trials),
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _complete_trials(folder: Path) -> int:
    """Complete trials so far, read without writing: Optuna's ``load_study`` would create the
    schema itself and race the search that is creating it."""
    database = folder / "study.db"
    if not database.exists():
        return 0
    try:
        with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)) as db:
            query = "SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'"
            (count,) = db.execute(query).fetchone()
    except sqlite3.OperationalError:  # the schema is not there yet, or a writer holds the lock
        return 0
    return int(count)


def _runs(folder: Path, experiment: str = "autotune") -> list[Any]:
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{folder / 'mlflow.db'}")
    return mlflow.search_runs(experiment_names=[experiment], output_format="list")


@pytest.mark.slow
@pytest.mark.parametrize(("number", "code"), STATUS)
def test_a_signal_stops_the_search_with_its_best_layout(
    tmp_path: Path, number: int, code: int
) -> None:
    proc = _start(tmp_path, n_trials=5000)
    try:
        deadline = time.monotonic() + 120
        while _complete_trials(tmp_path) < 5 and time.monotonic() < deadline:
            time.sleep(0.5)
        proc.send_signal(number)
        out, err = proc.communicate(timeout=120)
    finally:  # a failure here must not leave the search running into the next test
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, err
    assert "Traceback" not in err and "stopping after the layout in flight" in err
    assert err.strip().splitlines()[-1].startswith(f"interrupted by {signal.Signals(number).name}")
    assert "Top 5 of " in out  # the best layout so far
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert {t.state for t in study.trials} == {optuna.trial.TrialState.COMPLETE}
    runs = _runs(tmp_path)
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.status == "KILLED"  # the top layouts below it are complete runs
    assert all(r.info.status == "FINISHED" for r in runs if r is not parent)


@pytest.mark.slow
def test_kill_9_at_random_moments_then_resume_loses_at_most_the_trial_in_flight(
    tmp_path: Path,
) -> None:
    kills = int(os.environ.get("AUTOTUNE_TEST_KILLS", "4"))
    n_trials = 60  # a run that finishes before its kill records, and the next one resumes
    moments = random.Random(0)
    for _ in range(kills):
        proc = _start(tmp_path, n_trials)
        time.sleep(moments.uniform(2.0, 12.0))  # imports, study creation, trials, recording
        proc.kill()
        proc.communicate()
    proc = _start(tmp_path, n_trials)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{tmp_path / 'study.db'}")
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.COMPLETE) == n_trials  # n_trials in all
    assert states.count(optuna.trial.TrialState.FAIL) <= kills  # the trials in flight
    assert optuna.trial.TrialState.RUNNING not in states
    progress = [(int(a), int(b)) for a, b in re.findall(r"(\d+)/(\d+) trials", err)]
    assert all(done <= total == n_trials for done, total in progress)  # none past n_trials
    assert all(run.info.status != "RUNNING" for run in _runs(tmp_path))
