"""The job a simulator prices: model architecture, cluster and training settings.

All three are frozen values, defined in :mod:`.model_spec`, :mod:`.cluster_spec` and
:mod:`.train_spec`; this module is their common face. Derived quantities (parameter counts,
FLOPs per token) are properties computed from the fields, following Megatron-LM's own
accounting (``megatron/training/training.py::num_floating_point_operations`` and
``theoretical_memory_usage.py``; docs/reference.md sections 2 and 3.1).
"""

from autotune.simulators.cluster_spec import GEMM_TABLES
from autotune.simulators.cluster_spec import TOPOLOGIES
from autotune.simulators.cluster_spec import ClusterSpec
from autotune.simulators.cluster_spec import DeviceSpec
from autotune.simulators.cluster_spec import LinkSpec
from autotune.simulators.model_spec import ACTIVATIONS
from autotune.simulators.model_spec import ATTENTIONS
from autotune.simulators.model_spec import CARD_FIELDS
from autotune.simulators.model_spec import ModelSpec
from autotune.simulators.model_spec import gpt_family
from autotune.simulators.train_spec import MEGATRON_DROPOUT
from autotune.simulators.train_spec import OPTIMIZERS
from autotune.simulators.train_spec import PRECISIONS
from autotune.simulators.train_spec import RUN_SETTINGS
from autotune.simulators.train_spec import TrainSpec

__all__ = [
    "ACTIVATIONS",
    "ATTENTIONS",
    "CARD_FIELDS",
    "GEMM_TABLES",
    "MEGATRON_DROPOUT",
    "OPTIMIZERS",
    "PRECISIONS",
    "RUN_SETTINGS",
    "TOPOLOGIES",
    "ClusterSpec",
    "DeviceSpec",
    "LinkSpec",
    "ModelSpec",
    "TrainSpec",
    "gpt_family",
]
