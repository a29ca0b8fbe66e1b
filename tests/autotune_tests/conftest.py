"""Compose the real config tree, as the command line does."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import autotune.calibrate._fits as fits
from autotune.calibrate import Run
from autotune.config import AutotuneConfig
from autotune.config import load_config


@pytest.fixture
def make_cfg() -> Callable[..., AutotuneConfig]:
    def make(*overrides: str) -> AutotuneConfig:
        return load_config(AutotuneConfig, overrides)

    return make


@pytest.fixture
def fitted(monkeypatch: pytest.MonkeyPatch) -> list[list[Run]]:
    """Every set of rows the calibration protocols fit a calibration on."""
    calls: list[list[Run]] = []
    real = fits.fit

    def spy(simulator, runs, settings, center=None, layouts=False):  # noqa: ANN001, ANN202
        calls.append(list(runs))
        return real(simulator, runs, settings, center, layouts=layouts)

    monkeypatch.setattr(fits, "fit", spy)
    return calls
