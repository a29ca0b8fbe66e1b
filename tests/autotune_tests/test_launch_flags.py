"""Launch flags derived from the layout and the training settings."""

from __future__ import annotations

import catalog
from autotune.launch_flags import megatron_flags
from autotune.launch_flags import mindspeed_flags
from simulators import Layout


def test_uneven_split_is_spelled_out_per_framework() -> None:
    job = catalog.load_job("deepseek_v3", "h100", ["cluster.num_nodes=16"])
    layout = Layout.resolve(128, tp=2, pp=8, ep=8)
    flags = megatron_flags(job.model, job.train, layout)
    assert '--pipeline-model-parallel-layout "Et*7|t*7|t*8|t*8|t*8|t*8|t*8|t*7L"' in flags
    assert not any(f.startswith("--num-layers-per-virtual") for f in flags)
    assert "--num-layer-list 7,7,8,8,8,8,8,7" in mindspeed_flags(job.model, job.train, layout)


def test_even_split_with_virtual_stages_and_framework_overlaps() -> None:
    job = catalog.load_job("llama70b", "h100", ["train.precision=fp8"])
    layout = Layout.resolve(64, tp=8, pp=4, vpp=5)
    flags = megatron_flags(job.model, job.train, layout)
    assert "--num-layers-per-virtual-pipeline-stage 4" in flags
    assert {"--bf16", "--fp8-format hybrid", "--overlap-grad-reduce"} <= set(flags)
    legacy = catalog.load_job("llama70b", "a100", ["train.framework=megatron_lm"])
    assert "--overlap-grad-reduce" not in megatron_flags(legacy.model, legacy.train, layout)
