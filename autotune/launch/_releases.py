"""Which launch options each framework release accepts, where the releases autotune knows differ.

A framework's releases are ``releases`` in ``conf/framework/<name>.yaml``, oldest first, and
the job's is ``framework.release`` (:class:`autotune.simulators.frameworks.FrameworkSpec`).
Every option a launcher writes is accepted by every known release of its framework except
those below, each mapped to the first known release that accepts it. The option lists were read
from each release's own parser (docs/reference.md 7.8, which also says which release added
each option and where).
"""

from __future__ import annotations

from collections.abc import Mapping

from autotune.simulators.frameworks import FrameworkSpec

# Megatron-LM: the YaRN of a non-MLA model. --position-embedding-type takes yarn from
# core_v0.18.0; the --yarn-* options came with fcbb6ed8fc (2026-06-23), first in core_v0.19.0.
_MEGATRON: dict[str, str] = {
    "--position-embedding-type yarn": "core_v0.19.0",
    "--yarn-original-max-position-embeddings": "core_v0.19.0",
    "--yarn-beta-fast": "core_v0.19.0",
    "--yarn-beta-slow": "core_v0.19.0",
}

# MindSpeed-LLM: MindSpeed back-ports Megatron's layout string in 94e8ac1c (2026-06-02), on its
# 26.1.0_core_r0.12.1 branch and master; the 26.0.0_core_r0.12.1 branch has no such option.
_MINDSPEED: dict[str, str] = {"--pipeline-model-parallel-layout": "26.1.0"}

# conf/framework/<name> -> its options that not every known release accepts.
ADDED_IN: Mapping[str, Mapping[str, str]] = {
    "megatron_core": _MEGATRON,
    "megatron_lm": _MEGATRON,  # launched with today's Megatron-LM
    "mindspeed": _MINDSPEED,
    "megatron_deepspeed": {},
    "torchtitan": {},  # one release, v0.2.2: its keys are autotune/launch/_torchtitan_keys.py
}


def added_in(framework: FrameworkSpec, option: str) -> str:
    """The first of the framework's known releases that accepts ``option`` (``--name`` or
    ``--name value``)."""
    return ADDED_IN.get(framework.name, {}).get(option, framework.releases[0])


def accepts(framework: FrameworkSpec, option: str) -> bool:
    """Whether the framework's release (``framework.release``) accepts ``option``."""
    releases = framework.releases
    return releases.index(framework.release) >= releases.index(added_in(framework, option))


def written_for(framework: FrameworkSpec, what: str) -> str:
    """The header's first sentence: ``what`` was written for the framework's release."""
    known = ", ".join(framework.releases)
    return (
        f"{what} written by autotune for release {framework.release} "
        f"(framework.release; known: {known})."
    )
