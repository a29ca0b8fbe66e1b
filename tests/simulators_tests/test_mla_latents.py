"""An MLA layer keeps its latents twice: the down-projections' outputs, which the latent norms
read, and the normed latents the up-projections read (Transformer Engine's
``LayerNormColumnParallelLinear`` saves its input and its norm's output; 1-byte copies of the
latter in FP8). Both simulators count the same bytes (docs/decisions/0071)."""

from __future__ import annotations

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


def test_the_normed_latents_are_kept_beside_the_latents_in_bf16() -> None:
    """DeepSeek-V2 (q_lora 1536, kv_lora 512) at TP 1: the bf16 layer keeps 2 x 2048 bytes
    per token more than the latents alone."""
    job = catalog.load_job("deepseek_v2", "h100", ["cluster.num_nodes=4"])
    layout = Layout.resolve(32, tp=1)
    model = job.model
    tokens = job.train.seq_len * layout.micro_batch
    counted = layer_bytes_with_modules(job, False, layout, analytical().constants)[0]
    without = counted - tokens * 2 * (model.q_lora_rank + model.kv_lora_rank)
    recorded = compile_mod.compile_layer(layer_shapes(job, layout)["dense"]).saved_bytes
    assert recorded == pytest.approx(counted, rel=0.002)
    assert recorded - without == pytest.approx(tokens * 2 * 2048, rel=0.02)
