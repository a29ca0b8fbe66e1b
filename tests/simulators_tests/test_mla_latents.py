"""An MLA layer keeps its latents twice: the down-projections' outputs, which the latent norms
read, and the normed latents the up-projections read (Transformer Engine's
``LayerNormColumnParallelLinear`` saves its input and its norm's output; 1-byte copies of the
latter in FP8). Both simulators count the same bytes (docs/decisions/0071)."""

from __future__ import annotations

import dataclasses

import pytest

from autotune import catalog
from autotune.simulators import Layout
from autotune.simulators.analytical.recompute import layer_bytes_with_modules
from autotune.simulators.hierarchical import compile as compile_mod
from autotune.simulators.hierarchical.graph import layer_shapes
from tests.simulators_tests._specs import analytical


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize(("tp", "sp"), [(1, False), (2, True), (4, False)])
def test_a_dense_mla_layer_keeps_what_both_simulators_count(
    precision: str, tp: int, sp: bool
) -> None:
    job = catalog.load_job(
        "deepseek_v2", "h100", ["cluster.num_nodes=4", f"train.precision={precision}"]
    )
    layout = Layout.resolve(32, tp=tp, sequence_parallel=sp)
    recorded = compile_mod.compile_layer(layer_shapes(job, layout)["dense"]).saved_bytes
    counted = layer_bytes_with_modules(job, False, layout, analytical().constants)[0]
    assert recorded == pytest.approx(counted, rel=0.002)


def test_a_wider_latent_keeps_four_bytes_more_per_token_and_element_in_bf16() -> None:
    """Widening DeepSeek-V2's KV latent by 64 widens what a bf16 layer keeps by 64 x (2 + 2)
    bytes per token: the latent and its normed copy (the up-projections' outputs are the
    heads' and do not change), in both simulators."""
    job = catalog.load_job("deepseek_v2", "h100", ["cluster.num_nodes=4"])
    wider = dataclasses.replace(
        job, model=dataclasses.replace(job.model, kv_lora_rank=job.model.kv_lora_rank + 64)
    )
    layout = Layout.resolve(32, tp=1)
    tokens = job.train.seq_len * layout.micro_batch
    for kept in (
        lambda j: layer_bytes_with_modules(j, False, layout, analytical().constants)[0],
        lambda j: compile_mod.compile_layer(layer_shapes(j, layout)["dense"]).saved_bytes,
    ):
        assert kept(wider) - kept(job) == pytest.approx(tokens * 64 * 4, rel=1e-6)
