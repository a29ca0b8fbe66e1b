"""What every entry point shares: logging to stderr, one-line user errors, specs from config."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from autotune.config import plain_dict
from autotune.config import to_specs
from autotune.tracking import TrackingConfig
from simulators import ClusterSpec
from simulators import ModelSpec
from simulators import Simulator
from simulators import TrainSpec
from simulators import UserError
from simulators.registry import make_simulator

__all__ = ["emit_json", "guarded", "load_job", "tracking_config"]

log = logging.getLogger("autotune")
OUTPUTS = ("table", "json")


def guarded(main: Callable[[DictConfig], None]) -> Callable[[DictConfig], None]:
    """Run a Hydra task: logs to stderr; a UserError prints ``error: ...`` and exits 2.

    ``AUTOTUNE_DEBUG=1`` re-raises it with its traceback. Other exceptions are bugs and keep
    their traceback.
    """

    @functools.wraps(main)
    def wrapper(cfg: DictConfig) -> None:
        logging.basicConfig(
            level=logging.INFO, format="%(message)s", stream=sys.stderr, force=True
        )
        for noisy in ("optuna", "alembic", "mlflow"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        try:
            if cfg.get("output", "table") not in OUTPUTS:
                raise UserError(f"output={cfg.output!r}; allowed: {', '.join(OUTPUTS)}")
            main(cfg)
        except UserError as exc:
            if os.environ.get("AUTOTUNE_DEBUG") == "1":
                raise
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)

    return wrapper


def load_job(cfg: DictConfig) -> tuple[ModelSpec, ClusterSpec, TrainSpec, Simulator]:
    """The specs and the simulator named by the composed config."""
    model, cluster, train = to_specs(cfg)
    constants = plain_dict(cfg.simulator)
    name = str(constants.pop("name"))
    return model, cluster, train, make_simulator(name, constants)


def tracking_config(cfg: DictConfig, experiment: str) -> TrackingConfig:
    return TrackingConfig(
        enabled=bool(cfg.tracking.enabled), uri=str(cfg.tracking.uri), experiment=experiment
    )


def emit_json(payload: dict[str, Any]) -> None:
    """The one JSON object of ``output=json``, on stdout."""
    sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
    sys.stdout.flush()
