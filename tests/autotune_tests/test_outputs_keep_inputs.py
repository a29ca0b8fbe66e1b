"""No command writes over a file it reads, and a file output is named as a file.

``calibrate out=`` naming the data file once replaced the measurements with YAML, a trace
written over the cost table replaced the table, and a benchmark report over a data file in
its folder replaced the data: each is now refused before any work (``_sweep.check_inputs_kept``
over each command's ``inputs`` and ``outputs``), naming both settings, with nothing written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autotune import dataset
from autotune.benchmark.__main__ import COMMAND as BENCHMARK
from autotune.calibrate.__main__ import COMMAND as CALIBRATE
from autotune.cli import Command
from autotune.profile import COMMAND as PROFILE
from autotune.simulate import COMMAND as SIMULATE

SMALL = ("model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1", "parallel.tp=2")
COST_HEADER = "op,shapes,dtype,device,time_us\n"


def _refused(
    command: Command, args: list[str], capsys: pytest.CaptureFixture[str], words: str
) -> None:
    assert command.main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"error: {words}\n"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("AUTOTUNE_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    shutil.copy(dataset.DATA_DIR / "korthikanti.csv", tmp_path / "runs.csv")
    (tmp_path / "report").mkdir()
    shutil.copy(dataset.DATA_DIR / "korthikanti.csv", tmp_path / "report" / "scenarios.csv")
    (tmp_path / "ops.csv").write_text(COST_HEADER)
    return tmp_path


def test_an_output_over_a_file_the_command_reads_is_refused_and_the_file_kept(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = (here / "runs.csv").read_bytes()
    (here / "link.yaml").symlink_to(here / "runs.csv")  # the data file by another name
    said = "out='link.yaml' would replace data='runs.csv', which this command reads; "
    args = ["data=runs.csv", "name=x", "out=link.yaml"]
    _refused(CALIBRATE, args, capsys, said + "write it elsewhere")
    said = "report_dir='report' would replace data='report/scenarios.csv', which this command "
    _refused(
        BENCHMARK,
        ["data=report/scenarios.csv", "report_dir=report", "tracking.enabled=false"],
        capsys,
        said + "reads; write it elsewhere",
    )
    args = [*SMALL, "simulator=hierarchical", "simulator.op_costs=ops.csv", "trace=ops.csv"]
    said = "trace='ops.csv' would replace simulator.op_costs='ops.csv', which this command "
    _refused(SIMULATE, args, capsys, said + "reads; write it elsewhere")
    assert (here / "runs.csv").read_bytes() == data
    assert (here / "ops.csv").read_text() == COST_HEADER
    assert sorted(p.name for p in here.iterdir()) == ["link.yaml", "ops.csv", "report", "runs.csv"]


def test_a_sweep_names_the_job_that_would_write_over_its_input(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Jobs sharing an output write it in numbered folders; one of its own is checked."""
    args = ["-m", *SMALL, "simulator=hierarchical", "simulator.op_costs=ops.csv"]
    words = "[2/2] trace=ops.csv: trace='ops.csv' would replace simulator.op_costs='ops.csv', "
    _refused(
        SIMULATE,
        [*args, "trace=t.json,ops.csv"],
        capsys,
        words + "which this command reads; write it elsewhere",
    )
    assert not (here / "t.json").exists()


def test_a_report_beside_the_data_and_a_refit_in_place_are_allowed(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the files a report replaces count, and a calibration may be refitted over the
    file it started from."""
    args = ["data=runs.csv", "report_dir=.", "tracking.enabled=false", "protocols=[zero_shot]"]
    assert BENCHMARK.main(args) == 0
    assert CALIBRATE.main(["data=runs.csv", "name=x", "out=x.yaml"]) == 0
    assert CALIBRATE.main(["data=runs.csv", "name=x", "out=x.yaml", "calibration=x.yaml"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize(
    ("command", "args", "words"),
    [
        (CALIBRATE, ["data=korthikanti", "name=x", "out=cal/"], "out='cal/' ends in a slash"),
        (PROFILE, ["out=costs/"], "out='costs/' ends in a slash"),
        (SIMULATE, [*SMALL, "trace=traces/"], "trace='traces/' ends in a slash"),
    ],
)
def test_a_file_output_named_as_a_folder_is_refused(
    here: Path, capsys: pytest.CaptureFixture[str], command: Command, args: list[str], words: str
) -> None:
    _refused(command, args, capsys, f"{words}, a folder's name; give a file path")
    assert not [p for p in here.iterdir() if p.name.startswith(("cal", "costs", "traces"))]


def test_a_calibration_is_written_only_where_calibration_can_read_it(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    words = "out='cal.txt': a calibration is a .yaml or .yml file (what calibration= reads as "
    _refused(
        CALIBRATE,
        ["data=korthikanti", "name=x", "out=cal.txt"],
        capsys,
        words + ("a path); give such a name"),
    )


def test_a_launch_folder_keeps_the_config_of_the_launch_files_it_holds(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Launch files that cannot be written leave config.yaml as it was: it describes the
    files the folders hold, not a search whose files are not there."""
    from autotune.__main__ import COMMAND as SEARCH

    args = ["cluster=a100", "search.n_trials=20", "tracking.enabled=false"]
    assert SEARCH.main(["model=llama2_7b", *args]) == 0
    config = (here / "launch" / "config.yaml").read_text()
    script = here / "launch" / "rank-1" / "launch_megatron.sh"
    script.unlink()
    script.mkdir()  # a folder where the next search writes its script
    capsys.readouterr()
    assert SEARCH.main(["model=qwen2_5_7b", *args]) == 2
    assert "error: 'launch/rank-1/launch_megatron.sh' is a folder" in capsys.readouterr().err
    assert (here / "launch" / "config.yaml").read_text() == config
