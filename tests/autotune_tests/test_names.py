"""Names a user gives follow one rule, checked where they enter (``autotune.simulators.names``).

The rule's cases, every shipped name, a property over any text (refused as one clean line, or
accepted and carried unchanged, as one shell word, into the launch files), the user's own
YAML file as a door, and ``calibrate name=`` / ``calibration=``, where a name must never
become a path. The command-line refusals of each name key are cases of
``test_bad_input.py`` (``NAMES``).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from autotune import catalog
from autotune.calibrate.__main__ import main as calibrate_main
from autotune.launch import write_launch_files
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import UserError
from autotune.simulators.limits import MAX_NAME_LENGTH
from autotune.simulators.names import check_label
from autotune.simulators.names import check_name
from autotune.simulators.names import is_name
from tests.dataset_tests._tables import write

CONF = catalog.conf_dir()
# The rule as the docs state it, written again here as the oracle of the properties.
RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*", re.ASCII)
DANGEROUS = list("\n\r\x00\x0b\x0c\x85\u2028\u2029$`'\";/\\ ()&|<>*?~#=") + ["é", "١", "ｆ"]
NAMES = st.one_of(
    st.text(max_size=MAX_NAME_LENGTH + 8),
    st.text(alphabet=st.sampled_from([*"aZ09._-", *DANGEROUS]), max_size=MAX_NAME_LENGTH + 8),
)


def _follows_rule(text: str) -> bool:
    return RULE.fullmatch(text) is not None and len(text) <= MAX_NAME_LENGTH


def _one_clean_line(message: str, value: str) -> None:
    assert message.isprintable() and len(message.splitlines()) == 1, message
    assert repr(value) in message


@pytest.mark.parametrize(
    "name", ["Llama-2-7B", "Llama-3.1-70B", "Qwen2.5-72B", "a100_40g", "x", "9", "a" * 64]
)
def test_names_of_letters_digits_dots_underscores_dashes_pass(name: str) -> None:
    check_name("model.name", name)


@pytest.mark.parametrize(
    "name",
    ["", " ", "GPT-3 175B", ".", "..", ".hidden", "-rf", "_x", "a/b", "../x", "a\\b", "a;b"]
    + ["$(id)", "`id`", "a'b", 'a"b', "x\ny", "x\ry", "x\u2028y", "x\x00", "ﬁ", "é", "a" * 65],
)
def test_anything_else_is_refused_in_one_line(name: str) -> None:
    with pytest.raises(UserError) as refused:
        check_name("model.name", name)
    _one_clean_line(str(refused.value), name)
    assert str(refused.value).startswith(f"model.name={name!r} is not a name: use 1 to 64")


def test_every_shipped_name_follows_the_rule() -> None:
    for path in sorted((CONF / "model").glob("*.yaml")):
        model = yaml.safe_load(path.read_text())
        assert is_name(model["name"]) if "name" in model else model["defaults"], path.name
    for path in sorted((CONF / "cluster").glob("*.yaml")):
        cluster = yaml.safe_load(path.read_text())
        assert is_name(cluster["name"]), path.name
        assert all(map(is_name, cluster.get("fitted_on", []))), path.name
        check_label("cluster.device.name", cluster["device"]["name"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=NAMES)
def test_any_text_is_refused_cleanly_or_kept_whole(text: str) -> None:
    """Refused: one printable line that shows the text. Accepted: it follows the rule, is
    one shell word as it is, and the launch files show it unchanged."""
    try:
        check_name("cluster.name", text)
    except UserError as refused:
        _one_clean_line(str(refused), text)
        assert not _follows_rule(text)
        return
    assert _follows_rule(text)
    assert shlex.quote(text) == text and shlex.split(text) == [text]
    job = catalog.load_job("llama2_7b", "ascend", ["cluster.num_nodes=1"])
    model = dataclasses.replace(job.model, name=text)
    cluster = dataclasses.replace(job.cluster, name=text)
    with tempfile.TemporaryDirectory() as folder:
        layout = Layout.resolve(cluster.num_devices, tp=2)
        (script,) = write_launch_files(
            Job(model=model, cluster=cluster, train=job.train), layout, folder
        )
        header = script.read_text().split("\n")[2]
    assert header.startswith(f"# {text} on {text} (1 nodes x 8 devices)")


def _own_cluster(folder: Path, **values: object) -> list[str]:
    """A user's cluster file (ascend's, with ``values`` changed) in a search folder."""
    (folder / "cluster").mkdir(parents=True, exist_ok=True)
    shipped = yaml.safe_load((CONF / "cluster" / "ascend.yaml").read_text())
    (folder / "cluster" / "mine.yaml").write_text(yaml.safe_dump({**shipped, **values}))
    return [f"hydra.searchpath=[file://{folder}]", "cluster=mine", "model=llama2_7b"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=NAMES)
def test_a_name_in_a_users_own_yaml_file_meets_the_same_rule(text: str) -> None:
    """The door of a user's own cluster file (``hydra.searchpath``): the name it holds is
    refused in one line, or composed unchanged (OmegaConf resolves ``${...}`` in any value,
    and the rule then applies to what it resolved to)."""
    catalog.register()
    with tempfile.TemporaryDirectory() as folder:
        overrides = _own_cluster(Path(folder), name=text)
        try:
            cfg = catalog.compose("job", overrides)
        except UserError as refused:
            assert str(refused).isprintable() and len(str(refused).splitlines()) == 1
            assert "${" in text or not _follows_rule(text)
            return
    assert _follows_rule(cfg.cluster.name)
    assert "${" in text or cfg.cluster.name == text


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"name": "c\nimport os"}, "cluster.name='c\\nimport os' is not a name"),
        ({"name": "c\rtouch owned"}, "cluster.name='c\\rtouch owned' is not a name"),
        ({"fitted_on": ["a b"]}, "cluster.fitted_on='a b' is not a name"),
        (
            {"device": {"name": "x\u2028y"}},
            "cluster.device.name='x\\u2028y' is not a device name",
        ),
    ],
)
def test_a_users_own_cluster_file_is_refused_by_the_name_it_holds(
    tmp_path: Path, values: dict[str, object], words: str
) -> None:
    catalog.register()
    if "device" in values:
        shipped = yaml.safe_load((CONF / "cluster" / "ascend.yaml").read_text())["device"]
        values = {"device": {**shipped, **values["device"]}}  # type: ignore[dict-item]
    with pytest.raises(UserError, match=re.escape(words)):
        catalog.compose("job", _own_cluster(tmp_path, **values))


def _snapshot(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "name", ["../model/llama2_7b", "/abs/x", "", "a/b/c", "..", "x.yaml", "x\nmodel: y"]
)
def test_calibrate_never_writes_a_name_as_a_path(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
) -> None:
    data = write(tmp_path / "runs.csv", {}, {"tp": 4, "dp": 2})
    monkeypatch.chdir(tmp_path)
    before = _snapshot(CONF)
    quoted = "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"
    assert calibrate_main([f"data={data}", f"name={quoted}"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: name={name!r} ") and len(error.splitlines()) == 1
    assert _snapshot(CONF) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.csv"]


@pytest.mark.parametrize(
    ("given", "is_path"),
    [
        ("mine", False),
        ("mine.v2", False),
        ("mine.yaml", True),
        ("mine.yml", True),
        ("./mine", True),
        ("/abs/mine", True),
        ("../calibrations/mine", True),
    ],
)
def test_a_calibration_is_a_path_by_its_spelling_alone(given: str, is_path: bool) -> None:
    assert catalog.is_calibration_path(given) is is_path


def test_a_calibration_name_is_looked_up_in_its_folder_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``calibration=mine`` never reads ./mine or ./mine.yaml, even when they exist."""
    monkeypatch.chdir(tmp_path)
    for file in ("mine", "mine.yaml"):
        (tmp_path / file).write_text("simulator: analytical\n")
    with pytest.raises(UserError, match=r"^unknown calibration 'mine'; available: "):
        catalog.calibration_path("mine")
    assert catalog.calibration_path("./mine.yaml") == Path("./mine.yaml")
    assert catalog.load_calibration("mine.yaml").name == "mine"
    with pytest.raises(UserError, match=r"^calibration='a\\\\b' is not a name"):
        catalog.calibration_path("a\\b")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("simulator: analytical\nname: '../x'\n", "name='../x' is not a name"),
        ('simulator: analytical\ncluster: "a\\nb"\n', "cluster='a\\nb' is not a name"),
        ("simulator: 'x y'\n", "simulator='x y' is not a name"),
        ("factors: {}\n", "simulator is missing"),
    ],
)
def test_a_calibration_file_holds_names(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "cal.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as refused:
        catalog.load_calibration(str(path))
    assert str(refused.value).startswith(f"calibration file {path}: ")
    assert words in str(refused.value)


def test_a_calibration_file_without_a_name_is_named_by_its_file(tmp_path: Path) -> None:
    (tmp_path / "my-cal.yaml").write_text("simulator: analytical\n")
    (tmp_path / "my cal.yaml").write_text("simulator: analytical\n")
    assert catalog.load_calibration(str(tmp_path / "my-cal.yaml")).name == "my-cal"
    with pytest.raises(UserError, match=r"name \(the file's\)='my cal' is not a name"):
        catalog.load_calibration(str(tmp_path / "my cal.yaml"))
