"""YAML files are checked before they load: no anchor or alias, bounded size
(autotune.catalog._user_yaml).

A "billion laughs" file (nine aliases of nine aliases, nine levels deep: 9^9 strings from a
file of 600 bytes) is refused at its first alias, as a ``calibration=`` file and as a user's
own model file in a ``hydra.searchpath`` folder, in one line; before the check, OmegaConf
copied every alias and the load never ended.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotune import catalog
from autotune.calibrate._file import write_calibration
from autotune.catalog import _user_yaml
from autotune.catalog._user_yaml import MAX_YAML_BYTES
from autotune.catalog._user_yaml import check_config_folders
from autotune.catalog._user_yaml import check_yaml_file
from autotune.simulators import UserError

REPO = Path(__file__).resolve().parents[2]
LEVELS = "abcdefghi"
BOMB = "".join(
    f"{level}: &{level} [" + ",".join([f"*{LEVELS[i - 1]}"] * 9 if i else ['"lol"'] * 9) + "]\n"
    for i, level in enumerate(LEVELS)
)
ALIAS_REFUSED = "YAML anchors and aliases (&name, *name) are not allowed"
ALIAS_PATTERN = re.escape(ALIAS_REFUSED)


def _bomb(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(BOMB)
    return path


def _own_model(folder: Path, text: str) -> list[str]:
    """A user's model file holding ``text`` after llama2_7b's keys, in a search folder."""
    shipped = (catalog.conf_dir() / "model" / "llama2_7b.yaml").read_text()
    (folder / "model").mkdir(parents=True, exist_ok=True)
    (folder / "model" / "mine.yaml").write_text(shipped + text)
    return [f"hydra.searchpath=[file://{folder}]", "model=mine"]


def test_the_bomb_is_a_bomb() -> None:
    """The file really stands for 9^9 strings (counted on the parsed events, not built)."""
    assert len(BOMB) < 700 and BOMB.count("*") == 8 * 9
    assert yaml.safe_load(BOMB)["i"][0][0][0][0][0][0][0][0][0] == "lol"


def test_a_calibration_bomb_is_one_error_line(tmp_path: Path) -> None:
    path = _bomb(tmp_path / "bomb.yaml")
    with pytest.raises(UserError) as refused:
        catalog.load_calibration(str(path))
    assert str(refused.value) == f"{path}, line 1: {ALIAS_REFUSED}; write the values out " + (
        "(an alias can stand for billions of nodes)"
    )


def test_a_model_bomb_in_a_search_folder_is_one_error_line(tmp_path: Path) -> None:
    catalog.register()
    overrides = _own_model(tmp_path, BOMB.replace(": &", "_x: &"))
    shipped = (catalog.conf_dir() / "model" / "llama2_7b.yaml").read_text()
    line = len(shipped.splitlines()) + 1  # the bomb's first line, after llama2_7b's keys
    with pytest.raises(
        UserError, match=f"^{tmp_path}/model/mine.yaml, line {line}: {ALIAS_PATTERN}"
    ):
        catalog.compose("job", overrides)


def test_a_bomb_through_a_linked_folder_is_found(tmp_path: Path) -> None:
    """Hydra follows links, so the check does too (each folder once, even in a loop)."""
    _own_model(tmp_path / "elsewhere", BOMB.replace(": &", "_x: &"))
    (tmp_path / "search").mkdir()
    (tmp_path / "search" / "model").symlink_to(tmp_path / "elsewhere" / "model")
    (tmp_path / "search" / "loop").symlink_to(tmp_path / "search")
    with pytest.raises(UserError, match=ALIAS_PATTERN):
        check_config_folders(catalog.conf_dir(), [f"hydra.searchpath=[{tmp_path / 'search'}]"])


@pytest.mark.slow
@pytest.mark.parametrize("which", ["calibration", "model"])
def test_a_bomb_on_the_command_line_is_one_error_line(tmp_path: Path, which: str) -> None:
    if which == "calibration":
        args = ["model=llama2_7b", f"calibration={_bomb(tmp_path / 'bomb.yaml')}"]
    else:
        args = _own_model(tmp_path, BOMB.replace(": &", "_x: &"))
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_DEBUG"}
    proc = subprocess.run(
        [sys.executable, "-m", "autotune.simulate", *args, "cluster=ascend"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,  # a hang fails the test instead of stalling the suite
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and ALIAS_REFUSED in proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: &x 1\nb: 2\n", "line 1: YAML anchors and aliases"),
        ("a: [1]\nb: *x\n", "line 2: YAML anchors and aliases"),
        ("a: [1\n", "line 2: not valid YAML: "),
        ("a: b: c\n", "line 1: not valid YAML: mapping values are not allowed"),
    ],
)
def test_an_anchor_an_alias_or_broken_yaml_is_named_by_its_line(
    tmp_path: Path, text: str, words: str
) -> None:
    path = tmp_path / "cal.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=f"^{re.escape(f'{path}, {words}')}"):
        check_yaml_file(path)


@pytest.mark.parametrize(
    ("text", "line", "key", "first"),
    [
        ("a: 1\nb: 2\na: 3\n", 3, "a", 1),
        ("a:\n  b: 1\n  c: {d: 1, d: 2}\n", 3, "d", 3),
        ("a:\n  b: [1, 2]\nc: 2\na: {}\n", 4, "a", 1),
    ],
)
def test_a_key_given_twice_in_one_mapping_is_named_by_both_lines(
    tmp_path: Path, text: str, line: int, key: str, first: int
) -> None:
    path = tmp_path / "cal.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as refused:
        check_yaml_file(path)
    assert str(refused.value) == (
        f"{path}, line {line}: key {key!r} is given twice in one mapping (first on line "
        f"{first}); keep one"
    )


def test_a_key_may_repeat_across_mappings_and_a_value_anywhere(tmp_path: Path) -> None:
    path = tmp_path / "cal.yaml"
    path.write_text("a: {x: 1}\nb: {x: 1}\nc: [x, x, {x: x}]\nd:\n  - x: 1\n  - x: 2\n")
    check_yaml_file(path)


def test_a_model_file_with_a_key_twice_is_one_error_line(tmp_path: Path) -> None:
    catalog.register()
    overrides = _own_model(tmp_path, "num_layers: 40\n")
    with pytest.raises(UserError, match="key 'num_layers' is given twice in one mapping"):
        catalog.compose("job", overrides)


def test_a_wrong_value_in_a_model_file_names_the_file_and_its_key(tmp_path: Path) -> None:
    catalog.register()
    overrides = _own_model(tmp_path, "")
    path = tmp_path / "model" / "mine.yaml"
    path.write_text(path.read_text().replace("hidden_size: 4096", "hidden_size: big"))
    with pytest.raises(UserError) as refused:
        catalog.compose("job", overrides)
    assert str(refused.value) == "model/mine.yaml, model.hidden_size: 'big' is not an integer"


def test_a_file_too_large_or_not_a_file_is_refused(tmp_path: Path) -> None:
    large = tmp_path / "large.yaml"
    with large.open("wb") as file:
        file.truncate(MAX_YAML_BYTES + 1)
    with pytest.raises(UserError, match="a YAML file read here holds at most 16,777,216 bytes"):
        check_yaml_file(large)
    pipe = tmp_path / "pipe.yaml"
    os.mkfifo(pipe)
    with pytest.raises(UserError, match="pipe.yaml: not a regular file"):
        check_yaml_file(pipe)


def test_a_search_folder_too_large_to_be_config_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_user_yaml, "MAX_SCANNED_ENTRIES", 3)
    (tmp_path / "conf").mkdir()
    for name in "abcd":
        (tmp_path / "search" / name).mkdir(parents=True)
    with pytest.raises(UserError, match="search: more than 3 files and folders"):
        check_config_folders(tmp_path / "conf", [f"hydra.searchpath=[file://{tmp_path}/search]"])


def test_every_shipped_config_file_passes() -> None:
    check_config_folders(catalog.conf_dir(), [])


def test_a_written_calibration_holds_no_alias_and_reads_back(tmp_path: Path) -> None:
    """The writer repeats shared values instead of aliasing them, so the reader takes them."""
    shared = [0.9, 1.1]
    record = {
        "name": "mine",
        "simulator": "analytical",
        "cluster": "a100",
        "framework": None,
        "factors": {"host_overhead": 1.0},
        "intervals": {"host_overhead": shared, "memory_factor": shared},
    }
    path = write_calibration(record, tmp_path / "mine.yaml", 0.9)
    check_yaml_file(path)
    assert catalog.load_calibration(str(path)).name == "mine"
