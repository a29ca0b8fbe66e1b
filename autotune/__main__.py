"""``python -m autotune``: search the layouts of a model on a cluster and print the best."""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from autotune.cli import guarded
from autotune.config import register_schemas
from autotune.search_job import run_search_job

log = logging.getLogger("autotune")

register_schemas()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@guarded
def main(cfg: DictConfig) -> None:
    run_search_job(cfg)


if __name__ == "__main__":
    main()
