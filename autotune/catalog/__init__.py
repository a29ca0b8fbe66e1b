"""The catalog: models, clusters, training steps and simulators of ``conf/``, as specs.

``conf/`` is the one home of these facts; this package is its one reader, used by the command
line, the dataset importers and loader, the benchmark and the profiler. It composes the config
tree with Hydra (so every command takes the same ``group=option`` and ``key=value``
overrides) and returns the frozen specs of :mod:`simulators`.

Example:
    >>> from autotune import catalog
    >>> catalog.load_model("llama70b").num_layers
    80
    >>> catalog.load_cluster("ascend", ["cluster.num_nodes=2"]).num_devices
    16
"""

from __future__ import annotations

from autotune.catalog._calibration import CALIBRATIONS
from autotune.catalog._calibration import calibration_file
from autotune.catalog._calibration import calibration_names
from autotune.catalog._calibration import calibration_path
from autotune.catalog._calibration import check_calibration
from autotune.catalog._calibration import check_calibration_name
from autotune.catalog._calibration import is_calibration_path
from autotune.catalog._calibration import load_calibration
from autotune.catalog._compose import HYDRA_KEYS
from autotune.catalog._compose import compose
from autotune.catalog._compose import conf_dir
from autotune.catalog._compose import group_choices
from autotune.catalog._compose import options
from autotune.catalog._hydra import MAX_JOBS
from autotune.catalog._hydra import ConfigInfo
from autotune.catalog._hydra import DefaultEntry
from autotune.catalog._hydra import config_info
from autotune.catalog._hydra import sweep_jobs
from autotune.catalog._load import PricedJob
from autotune.catalog._load import cluster_from_config
from autotune.catalog._load import job_from_config
from autotune.catalog._load import load_cluster
from autotune.catalog._load import load_framework
from autotune.catalog._load import load_job
from autotune.catalog._load import load_model
from autotune.catalog._load import load_simulator
from autotune.catalog._load import model_from_config
from autotune.catalog._load import plain
from autotune.catalog._load import priced_job_from_config
from autotune.catalog._load import simulator_constants
from autotune.catalog._load import simulator_from_config
from autotune.catalog._load import train_from_config
from autotune.catalog._schemas import ClusterConfig
from autotune.catalog._schemas import JobConfig
from autotune.catalog._schemas import ModelConfig
from autotune.catalog._schemas import TrainConfig
from autotune.catalog._schemas import register

__all__ = [
    "HYDRA_KEYS",
    "MAX_JOBS",
    "ClusterConfig",
    "ConfigInfo",
    "DefaultEntry",
    "JobConfig",
    "ModelConfig",
    "PricedJob",
    "TrainConfig",
    "CALIBRATIONS",
    "calibration_file",
    "calibration_names",
    "calibration_path",
    "check_calibration",
    "check_calibration_name",
    "cluster_from_config",
    "compose",
    "conf_dir",
    "config_info",
    "group_choices",
    "is_calibration_path",
    "job_from_config",
    "load_calibration",
    "load_cluster",
    "load_framework",
    "load_job",
    "load_model",
    "load_simulator",
    "model_from_config",
    "options",
    "plain",
    "priced_job_from_config",
    "register",
    "simulator_constants",
    "simulator_from_config",
    "sweep_jobs",
    "train_from_config",
]
