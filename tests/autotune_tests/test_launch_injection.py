"""No name reaches a launch file as code: every launcher, rendered with hostile names.

The rule of names (``autotune.simulators.names``) refuses these names at the door; here the writer
is called directly with specs whose model, cluster and device names hold line breaks (``\\n``,
``\\r``, ``\\r\\n``, Unicode's line and paragraph separators), command substitutions, quotes,
``;`` and NUL. The specs refuse such names themselves, so the test sets them past every check,
as a caller that built specs some other way would.

How "the file holds exactly the intended statements" is checked, per language:

- bash: the hostile script is compared with the script of the same job under plain names. It
  has the same number of lines (bash ends a line at ``\\n`` only), every line that differs is a
  comment in both, and ``bash -n`` accepts it. Then both scripts run under ``bash -x`` with a
  stand-in ``torchrun`` that records its argv: the trace of every command bash ran and the
  argv must be identical, and no command of a name (each creates a file ``owned-*``) ran.
- Python (the NeMo override): ``ast.parse`` of both files gives the same tree, and both
  have the same comments, one per line (``tokenize``), so no name left its comment.
- ``ds_config.json``: both parse to the same object.
"""

from __future__ import annotations

import ast
import copy
import io
import json
import os
import subprocess
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

from autotune import catalog
from autotune.launch import write_launch_files
from autotune.simulators import ClusterSpec
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import ModelSpec

HOSTILE = [
    "x\ntouch owned-newline #",
    "x\rtouch owned-cr #",
    "x\r\nimport os; os.system('touch owned-crlf') #",
    "$(touch owned-dollar)",
    "`touch owned-backtick`",
    "'; touch owned-quote; '",
    '"; touch owned-dquote; "',
    "x; touch owned-semicolon",
    "x\u2028touch owned-ls\u2029touch owned-ps",
    "x\x85\x0b\x0c\x1c\x1d\x1etouch owned-separators",
    "x\x00touch owned-nul",
    "x\\\ntouch owned-continued",
    '"""\nimport os; os.system("touch owned-docstring")\n"""',
    "x\n)\nimport os\n(",
]
PLAIN = "plain"

# One job per launcher; llama2_7b has a NeMo recipe, so megatron_core also writes the override.
JOBS = {
    "megatron_core": ("llama2_7b", "h100", ()),
    "megatron_lm": ("llama2_7b", "h100", ("train.framework=megatron_lm",)),
    "mindspeed": ("llama2_7b", "ascend", ()),
    "megatron_deepspeed": ("llama2_7b", "a100", ("train.framework=megatron_deepspeed",)),
}
RECORDER = """#!/usr/bin/env bash
printf '%s\\0' "$@" > "$CAPTURE/argv"
"""


def _named(spec: object, name: str) -> object:
    """A copy of a frozen spec with ``name`` set past its own check."""
    clone = copy.copy(spec)
    object.__setattr__(clone, "name", name)
    return clone


@dataclass(frozen=True)
class Renamed:
    """The job's files, written with the model, cluster and device given ``name``."""

    texts: dict[str, str]
    folder: Path


def _render(framework: str, folder: Path, name: str, model_too: bool) -> Renamed:
    model_name, cluster_name, overrides = JOBS[framework]
    job = catalog.load_job(model_name, cluster_name, ["cluster.num_nodes=1", *overrides])
    cluster = _named(job.cluster, name)
    object.__setattr__(cluster, "device", _named(job.cluster.device, name))
    model = _named(job.model, name) if model_too else job.model
    assert isinstance(model, ModelSpec) and isinstance(cluster, ClusterSpec)
    layout = Layout.resolve(cluster.num_devices, tp=2)
    for old in folder.glob("*"):
        old.unlink()
    paths = write_launch_files(Job(model=model, cluster=cluster, train=job.train), layout, folder)
    return Renamed({p.name: p.read_text() for p in paths}, folder)


def _run(script: Path, home: Path) -> tuple[str, list[str]]:
    """Run ``script`` under ``bash -x`` with a stand-in torchrun: (trace, torchrun's argv)."""
    stand_ins, capture = home / "bin", home / "capture"
    stand_ins.mkdir(exist_ok=True)
    capture.mkdir(exist_ok=True)
    (capture / "argv").unlink(missing_ok=True)
    recorder = stand_ins / "torchrun"
    recorder.write_text(RECORDER)
    recorder.chmod(0o755)
    (home / "tokenizer").mkdir(exist_ok=True)
    environment = {
        "PATH": f"{stand_ins}:/usr/bin:/bin",
        "HOME": str(home),
        "CAPTURE": str(capture),
        "DATA_PATH": "data_text_document",
        "TOKENIZER": "tokenizer",
        "TOKENIZER_PATH": str(home / "tokenizer"),
        "CANN_SET_ENV": os.devnull,
        "ATB_SET_ENV": os.devnull,
    }
    done = subprocess.run(
        ["bash", "-x", str(script)],
        env=environment,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr, (capture / "argv").read_text().split("\0")[:-1]


def _check_bash(plain: str, hostile: str, path: Path) -> None:
    """Same lines but for comments, and bash -n clean."""
    plain_lines, hostile_lines = plain.split("\n"), hostile.split("\n")
    assert len(hostile_lines) == len(plain_lines)
    for before, after in zip(plain_lines, hostile_lines, strict=True):
        assert before == after or (before.startswith("#") and after.startswith("#")), after
    syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


def _comments(source: str) -> list[int]:
    """The line of each comment of a Python source (a comment never spans lines)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [t.start[0] for t in tokens if t.type == tokenize.COMMENT]


def _check_python(plain: str, hostile: str) -> None:
    """The same statements (the same tree), and the same comments on the same lines."""
    assert ast.dump(ast.parse(hostile)) == ast.dump(ast.parse(plain))
    assert _comments(hostile) == _comments(plain)
    compile(hostile, "nemo_pretrain.py", "exec")


@pytest.mark.parametrize("framework", list(JOBS))
@pytest.mark.parametrize("model_too", [False, True], ids=["cluster", "cluster+model"])
def test_hostile_names_stay_in_comments_of_every_launch_file(
    tmp_path: Path, framework: str, model_too: bool
) -> None:
    folder, home = tmp_path / "launch", tmp_path / "home"
    folder.mkdir()
    home.mkdir()
    plain = _render(framework, folder, PLAIN, model_too)
    scripts = [name for name in plain.texts if name.endswith(".sh")]
    assert len(scripts) == 1
    trace, argv = _run(folder / scripts[0], home)
    for name in HOSTILE:
        hostile = _render(framework, folder, name, model_too)
        assert hostile.texts.keys() <= plain.texts.keys()
        for file, text in hostile.texts.items():
            if file.endswith(".sh"):
                _check_bash(plain.texts[file], text, folder / file)
                assert _run(folder / file, home) == (trace, argv), name
            elif file.endswith(".py"):
                _check_python(plain.texts[file], text)
            else:
                assert json.loads(text) == json.loads(plain.texts[file])
        assert not list(home.glob("owned*")), name


def test_the_nemo_override_is_written_for_its_recipe_name_only(tmp_path: Path) -> None:
    """The override is chosen by the model's name: a hostile model name writes none (the
    Megatron script alone), a hostile cluster name still writes it."""
    assert "nemo_pretrain.py" in _render("megatron_core", tmp_path, HOSTILE[0], False).texts
    assert "nemo_pretrain.py" not in _render("megatron_core", tmp_path, HOSTILE[0], True).texts


def test_a_comment_holds_the_whole_name_escaped(tmp_path: Path) -> None:
    """The name is shown, not dropped: its line breaks written as escapes, in the header."""
    texts = _render("mindspeed", tmp_path, "x\ny\u2028z", True).texts
    header = texts["launch_mindspeed.sh"].split("\n")[2]
    assert header.startswith("# x\\ny\\u2028z on x\\ny\\u2028z (1 nodes")
