"""benchmarks/compare_predictions.py: two benchmark runs' predictions, cell by cell."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks_tests._scripts import import_script

compare = import_script("compare_predictions")
HEADER = "simulator,layout,predicted_step_time_s\n"


def _file(folder: Path, *rows: str) -> Path:
    folder.mkdir()
    (folder / "predictions.csv").write_text(HEADER + "".join(f"{row}\n" for row in rows))
    return folder


def test_identical_predictions_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _file(tmp_path / "before", "analytical,dp8,1.5", "analytical,tp8,2.0")
    after = _file(tmp_path / "after", "analytical,dp8,1.5", "analytical,tp8,2.0")
    assert compare.main([str(before), str(after / "predictions.csv")]) == 0
    assert capsys.readouterr().out == "identical: 2 rows, every cell the same\n"


def test_a_last_digit_or_a_missing_row_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _file(tmp_path / "before", "analytical,dp8,1.5", "analytical,tp8,2.0")
    after = _file(tmp_path / "after", "analytical,dp8,1.5000000000000002")
    assert compare.main([str(before), str(after)]) == 1
    out = capsys.readouterr().out
    assert "2 rows before, 1 after" in out
    assert "line 2 (analytical, dp8), predicted_step_time_s: '1.5' before, '1.5000000" in out


def test_a_folder_without_predictions_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _file(tmp_path / "before", "analytical,dp8,1.5")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exit_:
        compare.main([str(before), str(tmp_path / "empty")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "cannot read " in err and "predictions.csv: No such file or directory" in err
