"""Tile and wave quantization of GEMM shapes (NVIDIA's GEMM performance guide)."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.simulators import DeviceSpec
from autotune.simulators import SpecError
from autotune.simulators.analytical import gemm_time_s
from autotune.simulators.analytical.layer import gemm_pass_s
from autotune.simulators.gemm_waves import MIN_SPLIT_DEPTH
from autotune.simulators.gemm_waves import wave_efficiency

A100 = DeviceSpec(
    name="A100 SXM",
    bf16_tflops=312.0,
    fp16_tflops=312.0,
    fp32_tflops=19.5,
    memory_gib=80.0,
    memory_gbps=2039.0,
    matmul_efficiency=0.87,
    memory_efficiency=0.85,
    sm_count=108,
)


def test_the_guides_example_fills_98_of_108_sms() -> None:
    """NVIDIA's example: a 1792 x 1792 output in 256 x 128 tiles is 7 x 14 = 98 tiles, one wave
    on the A100's 108 SMs with 10 idle; 128 x 128 tiles make 196, two waves of which the second
    leaves 20 idle: the same 98/108."""
    assert wave_efficiency(1792, 1792, 1792, 108) == pytest.approx(98 / 108)


def test_whole_tiles_in_whole_waves_lose_nothing() -> None:
    assert wave_efficiency(9 * 256, 12 * 128, 4096, 108) == 1.0  # 108 tiles of 256 x 128


def test_one_tile_more_than_a_wave_costs_a_second_wave() -> None:
    """A row more than 9 x 256 adds a row of 12 tiles; the best tile then leaves a wave part
    empty, so the useful fraction falls although the work grew by one row."""
    full = wave_efficiency(9 * 256, 12 * 128, 4096, 108)
    assert wave_efficiency(9 * 256 + 1, 12 * 128, 4096, 108) < 0.9 * full


def test_a_small_output_splits_its_long_k_loop_over_the_idle_sms() -> None:
    """One 256 x 128 tile of output: with K of one tile edge there is nothing to split and the
    GEMM uses a 108th of the device (two 128 x 128 tiles: 2/108); a long K is split so that
    the slices fill the SMs (split-K)."""
    assert wave_efficiency(256, 128, MIN_SPLIT_DEPTH - 1, 108) == pytest.approx(2 / 108)
    assert wave_efficiency(256, 128, 64 * MIN_SPLIT_DEPTH, 108) == pytest.approx(1.0)


def test_batched_gemms_share_the_waves() -> None:
    """16 outputs of one 128 x 128 tile each: 16 of 108 SMs (K too short to split)."""
    assert wave_efficiency(128, 128, 64, 108, batch=16) == pytest.approx(16 / 108)


def test_no_sm_count_means_no_quantization() -> None:
    assert wave_efficiency(1, 1, 1, None) == 1.0


def test_a_gemm_runs_at_the_fraction_its_shape_leaves() -> None:
    """A compute-bound 1024 x 2048 x 2048 GEMM: 64 tiles of 256 x 128 (or 128 of 128 x 128,
    two waves) on 108 SMs; K = 2048 cannot split 64 tiles further (108 // 64 = 1)."""
    whole = dataclasses.replace(A100, sm_count=None)
    ratio = gemm_time_s(1024, 2048, 2048, A100, "bf16") / gemm_time_s(
        1024, 2048, 2048, whole, "bf16"
    )
    assert ratio == pytest.approx(108 / 64)


def test_a_memory_bound_gemm_is_not_slowed() -> None:
    """A skinny GEMM is paced by its bytes; its tiles do not change that."""
    whole = dataclasses.replace(A100, sm_count=None)
    assert gemm_time_s(8192, 8192, 8, A100, "bf16") == gemm_time_s(8192, 8192, 8, whole, "bf16")


@pytest.mark.parametrize("bad", [0, -4, 2.5, 10**6])
def test_an_impossible_sm_count_is_refused(bad: float) -> None:
    with pytest.raises(SpecError, match="sm_count"):
        dataclasses.replace(A100, sm_count=bad)  # type: ignore[arg-type]


def test_the_hierarchical_roofline_prices_a_recorded_gemm_by_its_shape() -> None:
    from autotune.simulators.hierarchical.cost import Efficiencies
    from autotune.simulators.hierarchical.cost import RooflineCost
    from autotune.simulators.hierarchical.graph import Op

    gemm = Op(
        name="aten.mm.default",
        category="matmul",
        region="mlp",
        flops=2.0 * 1024 * 2048 * 2048,
        bytes=2.0 * (1024 * 2048 + 2048 * 2048 + 1024 * 2048),
        dtype="bfloat16",
        gemm=(1, 1024, 2048, 2048),
    )
    cost = RooflineCost(device=A100, precision="bf16", efficiency=Efficiencies())
    unshaped = dataclasses.replace(gemm, gemm=None)
    assert cost.op_time_s(gemm) == pytest.approx(cost.op_time_s(unshaped) * 108 / 64)


def test_the_backward_runs_its_two_gemms_at_their_own_shapes() -> None:
    """1024 x 2048 x 2048 on the A100: the forward and the input gradient write 1024 x 2048
    (64 tiles of 256 x 128: 64/108 of the SMs busy); the weight gradient writes 2048 x 2048,
    best in 128 x 128 tiles (256 tiles, three waves: 256/324)."""
    whole = dataclasses.replace(A100, sm_count=None)
    base = gemm_time_s(1024, 2048, 2048, whole, "bf16")
    forward, backward = gemm_pass_s(1024, 2048, 2048, A100, "bf16")
    assert forward == pytest.approx(base * 108 / 64)
    assert backward == pytest.approx(base * 108 / 64 + base * 324 / 256)
