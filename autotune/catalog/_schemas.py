"""Structured-config schemas of the job groups (``model/``, ``cluster/``, ``train/``).

The schemas are derived from the spec dataclasses themselves (same field names, types and
defaults, but mutable so that command-line overrides apply): a misspelt key fails at compose
time, and a field added to a spec is configurable at once. A spec field's default lives in the
spec; the yaml files hold the values that describe one model or cluster.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from autotune.simulators import ClusterSpec
from autotune.simulators import ModelSpec
from autotune.simulators import TrainSpec

__all__ = [
    "ClusterConfig",
    "FrameworkConfig",
    "JobConfig",
    "ModelConfig",
    "RecipeConfig",
    "TrainConfig",
    "register",
]


def _schema_of(
    spec: type,
    name: str,
    extra: dict[str, type] | None = None,
    by_name: tuple[str, ...] = (),
) -> type:
    """A mutable dataclass with the fields of ``spec`` (nested specs become nested schemas);
    ``extra`` adds fields whose defaults are instances of the given dataclasses; ``by_name``
    fields hold the name of a catalog entry instead (None: a default chosen elsewhere)."""
    hints = typing.get_type_hints(spec)
    rows: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(spec):
        kind = hints[f.name]
        if f.name in by_name:
            rows.append((f.name, str | None, field(default=None)))
        elif isinstance(kind, type) and dataclasses.is_dataclass(kind):
            nested = _schema_of(kind, f"{kind.__name__.removesuffix('Spec')}Config")
            rows.append((f.name, nested, field(default_factory=nested)))
        elif f.default is not dataclasses.MISSING:
            rows.append((f.name, kind, field(default=f.default)))
        else:
            rows.append((f.name, kind, field(default=MISSING)))
    for key, kind in (extra or {}).items():
        rows.append((key, kind, field(default_factory=kind)))
    return dataclasses.make_dataclass(name, rows)


@dataclass
class RecipeConfig:
    """A model's usual training job: what ``train.seq_len`` / ``global_batch_size`` follow."""

    seq_len: int = MISSING
    global_batch_size: int = MISSING


ModelConfig = _schema_of(ModelSpec, "ModelConfig", {"recipe": RecipeConfig})
ClusterConfig = _schema_of(ClusterSpec, "ClusterConfig")
# train.framework names a file of conf/framework/ (None: the cluster's default_framework).
TrainConfig = _schema_of(TrainSpec, "TrainConfig", by_name=("framework",))


@dataclass
class FrameworkConfig:
    """Settings of the job's framework (``train.framework``) beside its facts."""

    # the release launch files are written for (one of the framework's ``releases``);
    # None: the one its conf/framework/<name>.yaml names
    release: str | None = MISSING


@dataclass
class JobConfig:
    """A training job: ``conf/job.yaml``, and the first part of every command's config.

    ``simulator`` holds the chosen simulator's ``name`` and constants; each simulator checks
    its own keys (``conf/simulator/<name>.yaml``). ``framework`` holds the settings of the
    framework ``train.framework`` names (``framework.release``).
    """

    model: Any = field(default_factory=ModelConfig)
    cluster: Any = field(default_factory=ClusterConfig)
    train: Any = field(default_factory=TrainConfig)
    framework: FrameworkConfig = field(default_factory=FrameworkConfig)
    simulator: dict[str, Any] = field(default_factory=dict)


def register() -> None:
    """Register the job schema that ``conf/job.yaml`` names first in its defaults."""
    ConfigStore.instance().store(name="job_schema", node=JobConfig)
