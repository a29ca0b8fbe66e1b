"""A wheel built from the checkout works anywhere: conf/ and the data ship inside it.

The wheel is installed into a fresh virtual environment that sees the already installed
dependencies (optuna, mlflow, torch...) through a ``.pth`` line but not this checkout, and
the commands run from a folder outside the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _packages_in_checkout() -> set[str]:
    """The importable packages of the checkout: top-level folders with an ``__init__.py``
    and their subpackages (a virtual environment made inside the checkout is none)."""
    found = set()
    for top in REPO.glob("*/__init__.py"):
        if top.parent.name in ("tests", "benchmarks"):
            continue
        for init in top.parent.glob("**/__init__.py"):
            found.add(".".join(init.parent.relative_to(REPO).parts))
    return found


def _sources(folder: Path) -> Path:
    """The files the wheel is built from, copied: setuptools builds in the source folder, and
    a checkout's build/ would keep modules that are gone (and ship them), besides leaving build/
    and autotune.egg-info behind."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, folder / name)
    for name in ("autotune", "conf"):
        shutil.copytree(REPO / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    sources = _sources(tmp_path_factory.mktemp("sources"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(out), str(sources)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("autotune-*.whl")
    return built


@pytest.mark.slow
def test_wheel_carries_every_package_conf_and_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {str(Path(n).parent).replace("/", ".") for n in names if n.endswith("__init__.py")}
    assert _packages_in_checkout() <= packages, "list new packages in pyproject.toml"
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"autotune"}, "one top-level package: the wheel must not shadow others"
    for path in (REPO / "conf").rglob("*.yaml"):
        shipped = f"autotune/conf/{path.relative_to(REPO / 'conf')}"
        assert shipped in names, "list a new conf/ folder in pyproject.toml, as autotune.conf.<x>"
    data = REPO / "autotune" / "dataset"
    for path in [*(data / "data").iterdir(), *(data / "raw").iterdir()]:
        assert f"autotune/dataset/{path.parent.name}/{path.name}" in names


@pytest.mark.slow
def test_installed_wheel_runs_the_main_command_elsewhere(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # The dependencies, not the checkout: a plain path line is not a site dir, so the
    # editable install's own .pth hook there is not run.
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site)]
        + [str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [python, "-m", "autotune", "model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1"]
        + ["search.n_trials=5", "tracking.enabled=false", "output=json"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["world_size"] == 8
    where = subprocess.run(
        [
            python,
            "-c",
            "from autotune import catalog, dataset; "
            "print(catalog.conf_dir(), len(dataset.load_public()))",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert where[0] == str(site / "autotune" / "conf")
    assert int(where[1]) > 1000
    # The console script, and a calibration written where the user is, not into the package
    script = site / "bin" / "autotune"
    calibrated = subprocess.run(
        [python, str(script), "calibrate", "data=korthikanti", "name=demo"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert calibrated.returncode == 0, calibrated.stderr
    assert (elsewhere / "calibrations" / "demo.yaml").is_file()
    assert not list(site.rglob("demo.yaml"))
