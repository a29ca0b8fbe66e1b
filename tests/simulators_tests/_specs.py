"""Specs and simulators of the catalog for the simulator tests (conf/ is their one home)."""

from __future__ import annotations

import dataclasses

from autotune import catalog
from autotune.simulators import ClusterSpec
from autotune.simulators import ModelSpec
from autotune.simulators import TrainSpec
from autotune.simulators.analytical import AnalyticalSimulator


def model(key: str, /, **changes: object) -> ModelSpec:
    """The catalog model ``key`` (``conf/model/<key>.yaml``), with fields changed."""
    return dataclasses.replace(catalog.load_model(key), **changes)  # type: ignore[arg-type]


def ascend(num_nodes: int) -> ClusterSpec:
    """Atlas 800T A2 nodes of 8 x 910B2 (``conf/cluster/ascend.yaml``)."""
    return catalog.load_cluster("ascend", [f"cluster.num_nodes={num_nodes}"])


def analytical(*overrides: str) -> AnalyticalSimulator:
    """A fresh analytical simulator with the constants of ``conf/simulator/analytical.yaml``."""
    simulator = catalog.load_simulator("analytical", overrides)
    assert isinstance(simulator, AnalyticalSimulator)
    return simulator


def make_train(framework: str = "megatron_core", **values: object) -> TrainSpec:
    """A training step run by the catalog framework ``framework`` (conf/framework/)."""
    return TrainSpec(framework=catalog.load_framework(framework), **values)  # type: ignore[arg-type]
