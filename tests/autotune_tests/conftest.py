"""Compose the real config tree, as the command line does."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from autotune.config import AutotuneConfig
from autotune.config import load_config


@pytest.fixture
def make_cfg() -> Callable[..., AutotuneConfig]:
    def make(*overrides: str) -> AutotuneConfig:
        return load_config(AutotuneConfig, overrides)

    return make
