"""Raw ground truth -> schema v1 -> loader, and the shipped files match a fresh build."""

from __future__ import annotations

from pathlib import Path

import pytest

import dataset
from dataset.build import RAW_DIR
from dataset.build import build
from dataset.importers import IMPORTERS
from dataset.importers import mindspeed
from dataset.importers._common import knobs
from dataset.importers._common import leading_int


def test_free_text_parsers() -> None:
    assert knobs("hidden=3072;layers=30; flag ;") == {"hidden": "3072", "layers": "30", "flag": ""}
    assert leading_int("4 (num-layers-per-virtual-pipeline-stage=5)") == 4
    with pytest.raises(ValueError):
        leading_int("none")


def test_build_round_trip_matches_the_shipped_files(tmp_path: Path) -> None:
    written = build(RAW_DIR, tmp_path)
    assert written == {
        "vtrain": 1549,
        "simumax": 43,
        "korthikanti": 8,
        "dlperf": 36,
        "mindspeed": 25,
    }
    for source in IMPORTERS:
        fresh = (tmp_path / f"{source}.csv").read_text()
        assert fresh == (dataset.DATA_DIR / f"{source}.csv").read_text(), source


def test_values_survive_the_round_trip(tmp_path: Path) -> None:
    build(RAW_DIR, tmp_path)
    table = dataset.load_public(data_dir=tmp_path)
    by_ref = {
        ref.split(" [config_id ")[1].rstrip("]"): row
        for ref, row in zip(table["source_ref"], table.to_dict("records"), strict=True)
    }
    vtrain = by_ref["vtrain_multi_2"]  # 3566.5 ms, GPT h3072 L30 a32, dp 64, mbs 8
    assert vtrain["step_time_s"] == pytest.approx(3.5665)
    assert (vtrain["hidden_size"], vtrain["ffn_hidden_size"], vtrain["num_layers"]) == (
        3072,
        12288,
        30,
    )
    assert (vtrain["recompute"], vtrain["cluster"]) == ("full", "vtrain_a100")
    dlperf = by_ref["dlperf_DP_1x1x1_2_1536x16_Megatron-LM"]  # 4.31 sequences/s at GBS 2
    assert dlperf["step_time_s"] == pytest.approx(2 / 4.31)
    assert (dlperf["micro_batch"], dlperf["num_attention_heads"]) == (2, 16)
    simumax = by_ref["simumax_b200_llama3_70b_l12_tp1_pp2_dp4_mbc4_cef"]
    assert simumax["step_time_s"] == pytest.approx(0.843)
    assert simumax["predicted_step_time_s"] == pytest.approx(0.82876)
    assert simumax["peak_memory_gib"] == pytest.approx(66.55)
    assert (simumax["num_layers"], simumax["predictor"]) == (12, "simumax")
    assert not simumax["sequence_parallel"]  # stated yes, but tp = 1
    korthikanti = by_ref["korthikanti_tab5_megatron-22B_seqsel"]
    assert (korthikanti["recompute"], bool(korthikanti["sequence_parallel"])) == (
        "selective",
        True,
    )
    llama2 = by_ref["msllm_LLaMA2_70B_4K"]  # 441 tokens/s/NPU on 32 NPUs, GBS 1024, seq 4096
    assert llama2["step_time_s"] == pytest.approx(1024 * 4096 / (441 * 32))
    assert (llama2["vpp"], llama2["num_kv_heads"]) == (4, 8)


def test_mindspeed_skips_are_explained() -> None:
    raw = RAW_DIR / mindspeed.RAW_FILE
    skipped = dict(mindspeed.skipped(raw))
    assert "mismatch" in skipped["LLaMA3 70B"]
    assert "catalog" in skipped["Aquila 7B"]
    assert "LLaMA2 7B" not in skipped
    converted = mindspeed.convert(raw)
    assert len(converted) + len(mindspeed.skipped(raw)) == 75  # every 910B row accounted for
