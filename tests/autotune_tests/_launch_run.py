"""Run a written launch script with a stand-in ``torchrun`` and parse what it receives.

The stand-in on PATH records its argv, environment and working folder, so a test sees exactly
what bash expands (arrays, quoting, variables); both argument lists go through the strict
option parser (``_argrules``).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.autotune_tests import _argrules

_RECORDER = """#!/usr/bin/env bash
printf '%s\\0' "$@" > "$CAPTURE/argv"
env -0 > "$CAPTURE/env"
pwd > "$CAPTURE/cwd"
"""


@dataclass(frozen=True)
class Launched:
    """What the stand-in torchrun received."""

    launcher: dict[str, Any]
    args: dict[str, Any]
    env: dict[str, str]
    cwd: Path


def run_script(
    script: Path, tmp_path: Path, table: dict[str, _argrules.Opt], **env: str
) -> Launched:
    """Run ``script`` with the stand-in torchrun; parse both argument lists strictly."""
    stand_ins, capture = tmp_path / "bin", tmp_path / "capture"
    stand_ins.mkdir(exist_ok=True)
    capture.mkdir(exist_ok=True)
    recorder = stand_ins / "torchrun"
    recorder.write_text(_RECORDER)
    recorder.chmod(0o755)
    environment = {
        "PATH": f"{stand_ins}:{os.environ['PATH']}",
        "CAPTURE": str(capture),
        "HOME": str(tmp_path),
        **env,
    }
    done = subprocess.run(
        ["bash", str(script)], env=environment, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    argv = (capture / "argv").read_text().split("\0")[:-1]
    entry = argv.index("pretrain_gpt.py")
    pairs = (line.split("=", 1) for line in (capture / "env").read_text().split("\0") if line)
    return Launched(
        launcher=_argrules.parse(argv[:entry], _argrules.TORCHRUN),
        args=_argrules.parse(argv[entry + 1 :], table),
        env=dict(pairs),
        cwd=Path((capture / "cwd").read_text().strip()),
    )


def mindspeed_env(tmp_path: Path) -> dict[str, str]:
    """A MindSpeed-LLM folder, CANN and ATB environment files, data and a tokenizer folder."""
    for folder in ("mindspeed_llm", "tokenizer"):
        (tmp_path / folder).mkdir(exist_ok=True)
    (tmp_path / "cann.sh").write_text("export ASCEND_HOME_PATH=/usr/local/Ascend/cann\n")
    (tmp_path / "atb.sh").write_text("export ATB_HOME_PATH=/usr/local/Ascend/nnal/atb\n")
    return {
        "MINDSPEED_LLM_DIR": str(tmp_path / "mindspeed_llm"),
        "CANN_SET_ENV": str(tmp_path / "cann.sh"),
        "ATB_SET_ENV": str(tmp_path / "atb.sh"),
        "DATA_PATH": "/data/c4_text_document",
        "TOKENIZER_PATH": str(tmp_path / "tokenizer"),
    }
