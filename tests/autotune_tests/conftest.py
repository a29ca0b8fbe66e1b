"""Compose the real config tree, as the command line does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose
from hydra import initialize_config_dir
from omegaconf import DictConfig

from autotune.config import register_schemas

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.fixture
def make_cfg() -> Callable[..., DictConfig]:
    register_schemas()

    def make(*overrides: str) -> DictConfig:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides))

    return make
