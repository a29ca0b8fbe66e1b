"""Raw ground truth -> schema v1 -> loader, and the shipped files match a fresh build."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest

from autotune import dataset
from autotune.dataset.build import RAW_DIR
from autotune.dataset.build import build
from autotune.dataset.importers import IMPORTERS
from autotune.dataset.importers import bigscience_tr3m
from autotune.dataset.importers import dgxc
from autotune.dataset.importers import flagperf
from autotune.dataset.importers import megatron_bridge
from autotune.dataset.importers import mindspeed
from autotune.dataset.importers import mindspeed_2026
from autotune.dataset.importers import nemo
from autotune.dataset.importers import torchtitan
from autotune.dataset.importers._common import configs
from autotune.dataset.importers._common import knobs
from autotune.dataset.importers._common import leading_int
from autotune.dataset.importers._common import metric
from autotune.dataset.importers._common import padded_vocab
from autotune.dataset.importers._tables import LayoutMismatch
from autotune.dataset.importers._tables import precision_of
from autotune.dataset.importers._tables import read_rows
from autotune.dataset.importers._tables import sharding_columns


def test_free_text_parsers() -> None:
    assert knobs("hidden=3072;layers=30; flag ;") == {"hidden": "3072", "layers": "30", "flag": ""}
    assert leading_int("4 (num-layers-per-virtual-pipeline-stage=5)") == 4
    with pytest.raises(ValueError):
        leading_int("none")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    """A fresh build's folder and row counts, built once for the tests that read it."""
    folder = tmp_path_factory.mktemp("built")
    return folder, build(RAW_DIR, folder)


def test_build_round_trip_matches_the_shipped_files(built: tuple[Path, dict[str, int]]) -> None:
    folder, written = built
    assert written == {
        "vtrain": 1549,
        "simumax": 43,
        "korthikanti": 8,
        "dlperf": 36,
        "mindspeed": 25,
        "nemo": 17,
        "megatron_bridge": 110,
        "dgxc": 214,
        "mindspeed_2026": 1,
        "bloom": 131,
        "flagperf": 16,
        "bigscience_tr3m": 27,
        "torchtitan": 21,
    }
    for source in IMPORTERS:
        fresh = (folder / f"{source}.csv").read_text()
        assert fresh == (dataset.DATA_DIR / f"{source}.csv").read_text(), source


def test_values_survive_the_round_trip(built: tuple[Path, dict[str, int]]) -> None:
    table = dataset.load_public(data_dir=built[0])
    by_ref = {
        ref.split(" [config_id ")[1].rstrip("]"): row
        for ref, row in zip(table["source_ref"], table.to_dict("records"), strict=True)
        if " [config_id " in ref
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
    bloom = by_ref["bloom_L613_72"]  # 02-21: 181B, DP 8, TP 8, PP 6, MBS 4: 121.48 s, 56GB
    assert bloom["step_time_s"] == pytest.approx(121.48)
    assert bloom["peak_memory_gib"] == pytest.approx(56 * 1000 / 1024)
    assert (bloom["num_layers"], bloom["hidden_size"], bloom["num_attention_heads"]) == (
        72,
        14336,
        64,
    )
    assert (bloom["precision"], bloom["distributed_optimizer"]) == ("fp16", True)
    assert (bloom["cluster"], bloom["framework"]) == ("jean_zay_a100", "megatron_deepspeed")
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


def test_published_precision_labels() -> None:
    assert precision_of("BF16") == "bf16" and precision_of("bf16") == "bf16"
    for label in ("FP8", "FP8-CS", "FP8-MX", "MXFP8", "FP8 (32x32 block scaling; parenthesized)"):
        assert precision_of(label) == "fp8", label
    assert precision_of("NVFP4") == ""  # skipped
    with pytest.raises(ValueError):
        precision_of("INT4")


def test_published_tables_values_checked_by_hand(built: tuple[Path, dict[str, int]]) -> None:
    table = dataset.load_public(["nemo", "megatron_bridge", "dgxc", "mindspeed_2026"], built[0])
    rows = {row["scenario"]: row for row in table.to_dict("records")}
    # Megatron-Bridge 25.09, DGX-H100: | LLAMA3_70B | 64 | 128 | 1 | 8192 | 0 | 4 | 8 | 1 | 5 |
    # 1 | 64 | 1619 | 727 | (GPUs, GBS, MBS, seq, FSDP, TP, PP, CP, VP, EP, GA, tokens/s/GPU).
    bridge = rows["megatron_bridge|LLAMA3_70B|h100|64|FP8|8192|128|NeMo 25.09"]
    assert bridge["tokens_per_s_per_device"] == 1619
    assert bridge["step_time_s"] == pytest.approx(128 * 8192 / (1619 * 64))  # 10.12 s
    assert (bridge["dp"], bridge["tp"], bridge["pp"], bridge["vpp"]) == (2, 4, 8, 5)
    assert (bridge["precision"], bridge["framework"], bridge["num_layers"]) == (
        "fp8",
        "megatron_core",
        80,
    )
    assert bool(bridge["sequence_parallel"]) and bridge["recompute"] == "none"
    # A GB200 job of 256 GPUs: 64 GPUs in each of 4 NVL72 racks (assumed placement).
    gb200 = rows["megatron_bridge|LLAMA3.1_405B|gb200|256|FP8|8192|1536|NeMo 26.04.01"]
    assert (gb200["cluster"], gb200["devices_per_node"]) == ("gb200", 64)
    # NeMo 24.07: | LLAMA3-70B | 64 | 8192 | 1 | 128 | 4 | 4 | 2 | 5 | 1524 | 734 |.
    nemo_70b = rows["nemo|LLAMA3-70B|h100|64|FP8|8192|128|NeMo 24.07"]
    assert nemo_70b["step_time_s"] == pytest.approx(128 * 8192 / (1524 * 64))  # 10.75 s
    assert (nemo_70b["dp"], nemo_70b["cp"], nemo_70b["vpp"]) == (2, 2, 5)
    # Long sequence, 1024 GPUs, 1024K tokens, GBS 4, TP 8, CP 32: 536 TFLOP/s; its duplicate
    # row (commit 35029a0c84) gives 318 tokens/s/GPU and MBS 1.
    long_seq = rows["nemo|LLAMA2-7B|h100|1024|FP8|1048576|4|NeMo 24.03.01.framework"]
    assert long_seq["step_time_s"] == pytest.approx(4 * 1048576 / (318 * 1024))  # 12.88 s
    layout = (long_seq["tp"], long_seq["cp"], long_seq["dp"], long_seq["micro_batch"])
    assert layout == (8, 32, 4, 1)
    # dgxc v24.11.1, 'Llama 3.1 70b 24.09 FP8 (TP=4, PP=4, CP=2, VP=5, MBS=1, GA=64)', 64 H100
    # (GBS=128): step time 11.01 s, 95239 tokens/s; sequence 8192 from the README's notes.
    dgxc_70b = rows["dgxc|Llama 3.1 70b|h100|64|FP8|8192|128|dgxc-benchmarking v24.11.1"]
    assert dgxc_70b["step_time_s"] == pytest.approx(11.01)
    assert dgxc_70b["tokens_per_s_per_device"] == pytest.approx(95239 / 64)
    assert (dgxc_70b["dp"], dgxc_70b["seq_len"]) == (2, 8192)
    # The 96-GPU 405B proxy: step-time cell '8.7  5' is malformed; 117965 tokens/s, 21 layers,
    # the recipe's 16 KV groups and GPT-2 BPE vocabulary (50257 padded to 128 * TP 8).
    proxy = rows["dgxc|Llama 3.1 405b|h100|96|BF16|8192|126|dgxc-benchmarking v24.11.1"]
    assert proxy["step_time_s"] == pytest.approx(126 * 8192 / 117965)
    assert (proxy["num_layers"], proxy["num_kv_heads"], proxy["vocab_size"]) == (21, 16, 51200)
    nemotron = rows["dgxc|Nemotron4 340b|h100|128|FP8|4096|32|dgxc-benchmarking v24.11.1"]
    assert (nemotron["recompute"], nemotron["step_time_s"]) == ("selective", 3.16)
    # MindSpeed-LLM docs 2026-06: | Qwen3 | 30B | Atlas 900 A2 PODc | 2x8 | 2318.373 |.
    qwen = rows[
        "mindspeed_2026|Qwen3 30B|ascend_910b (Atlas 900 A2 PODc)|16|bf16|4096|256|"
        "MindSpeed-LLM master 2026-06-03"
    ]
    assert qwen["step_time_s"] == pytest.approx(256 * 4096 / (2318.373 * 16))  # 28.3 s
    assert (qwen["cluster"], qwen["framework"]) == ("ascend", "mindspeed")
    assert (qwen["recompute"], bool(qwen["sequence_parallel"])) == ("full", False)
    assert (qwen["dp"], qwen["pp"], qwen["ep"]) == (8, 2, 8)


@pytest.mark.parametrize("importer", [nemo, megatron_bridge, dgxc, mindspeed_2026, torchtitan])
def test_published_tables_account_for_every_row(importer: ModuleType) -> None:
    raw = RAW_DIR / importer.RAW_FILE
    kept, skipped = importer.convert(raw), importer.skipped(raw)
    assert len(kept) + len(skipped) == len(read_rows(raw))
    assert all(reason for _, reason in skipped)


def test_dgxc_keeps_megatron_core_runs_only() -> None:
    kept = dgxc.convert(RAW_DIR / dgxc.RAW_FILE)
    assert kept["notes"].str.contains("framework=NeMo (Megatron-Core)", regex=False).all()


def test_published_tables_skip_reasons() -> None:
    bridge = Counter(r for _, r in megatron_bridge.skipped(RAW_DIR / megatron_bridge.RAW_FILE))
    assert not [r for r in bridge if r.startswith("FSDP")]  # imported as ZeRO-3
    assert sum(n for r, n in bridge.items() if r.startswith("NVFP4")) == 33
    # DeepSeek-V3 dropless on 1,024 H100, block-scaled variant: model TFLOP/s only
    assert sum(n for r, n in bridge.items() if r.startswith("no tokens/s")) == 1
    jobs = Counter(r for _, r in dgxc.skipped(RAW_DIR / dgxc.RAW_FILE))
    assert jobs["FSDP on (MaxText on JAX: not a Megatron-Core run)"] == 22


def test_megatron_bridge_fsdp_rows_are_zero3() -> None:
    """The 9 FSDP rows of catalog hardware: Megatron-FSDP ``optim_grads_params`` (ZeRO-3) over
    all of dp * cp (``fsdp`` 64 of 64 ranks, 8 of 8, or the 25.09 flag); the rest unsharded."""
    kept = megatron_bridge.convert(RAW_DIR / megatron_bridge.RAW_FILE)
    fsdp = kept[kept["zero_stage"].notna()]
    assert len(fsdp) == 9
    assert (fsdp["zero_stage"] == 3).all() and (fsdp["dp_replicate"] == 1).all()
    assert sorted(set(fsdp["model"])) == ["LLAMA3.1_405B", "LLAMA3_70B", "LLAMA3_8B"]
    assert kept.loc[kept["zero_stage"].isna(), "dp_replicate"].isna().all()


def test_fsdp_shard_size_sets_the_replicas() -> None:
    """A shard size below dp * cp is hybrid sharding; one that does not divide it is refused."""
    row = {"fsdp": "16", "num_devices": "128", "tp": "2", "pp": "1"}
    assert sharding_columns(row) == {"zero_stage": 3, "dp_replicate": 4}
    assert sharding_columns({**row, "fsdp": "1"}) == {"zero_stage": 3, "dp_replicate": 1}
    assert sharding_columns({**row, "fsdp": "0"}) == {}
    with pytest.raises(LayoutMismatch):
        sharding_columns({**row, "fsdp": "48"})


def test_moe_rows_keep_their_expert_tp() -> None:
    """Expert TP 1 under TP 2 (MoE parallel folding): as published (dgxc-benchmarking's ETP
    column) or as the Megatron-Bridge performance recipes set it where the table is silent."""
    bridge = megatron_bridge.convert(RAW_DIR / megatron_bridge.RAW_FILE)
    folded = bridge[bridge["etp"].notna()]
    assert len(folded) == 9 and set(folded["tp"]) == {2} and set(folded["etp"]) == {1}
    assert set(folded["model"].str.split().str[0]) == {"Qwen3_235B_a22B", "DeepSeekV3"}
    jobs = dgxc.convert(RAW_DIR / dgxc.RAW_FILE)
    assert jobs[jobs["etp"].notna()]["etp"].tolist() == [1] * 5  # DeepSeek-V3, TP 2
    assert bridge[bridge["num_experts"] == 0]["etp"].isna().all()  # dense: no expert TP


def test_bloom_rows_carry_what_the_chronicles_state(built: tuple[Path, dict[str, int]]) -> None:
    """Out-of-memory runs, the layer count inferred from the size, 2022 DeepSpeed's split, the
    BF16_Optimizer epoch, and the table whose GBS heading contradicts its column."""
    table = dataset.load_public(["bloom"], data_dir=built[0])
    by_ref = {
        ref.split(" [config_id ")[1].rstrip("]"): row
        for ref, row in zip(table["source_ref"], table.to_dict("records"), strict=True)
    }
    assert (table["status"] == "oom").sum() == 6
    assert by_ref["bloom_L786_156"]["status"] == "oom"  # DP 48, TP 8, PP 1
    assert by_ref["bloom_L474_16"]["num_layers"] == 78  # "194B", NLAYERS tweaked for PP 6
    assert by_ref["bloom_L474_28"]["num_layers"] == 72  # "183B" at PP 12
    uneven = by_ref["bloom_L828_181"]  # 78 layers over 12 stages: "the last stage has 1 block"
    assert tuple(uneven["layer_split"]) == (7,) * 11 + (1,)
    rebalanced = by_ref["bloom_L904_230"]  # 106 layers + 2 embedding slots over 12 stages
    assert tuple(rebalanced["layer_split"]) == (8,) + (9,) * 10 + (8,)
    assert (rebalanced["precision"], rebalanced["distributed_optimizer"]) == ("bf16", False)
    assert by_ref["bloom_L656_84"]["global_batch_size"] == 512  # "NLAYERS=6 / GBS=512"
    assert "bloom_L646_82" not in by_ref  # 40 nodes cannot hold DP 8 x TP 8 x PP 10
    assert "bloom_L798_161" not in by_ref  # the same layout measured again on one day


def test_padded_vocab_rounds_up_to_128_times_tp() -> None:
    assert padded_vocab(50257, 1) == 50304 and padded_vocab(50257, 2) == 50432
    assert padded_vocab(128256, 2) == 128256 and padded_vocab(128256, 8) == 129024


def test_an_empty_metric_is_absent_and_asking_for_it_names_the_config(tmp_path: Path) -> None:
    raw = tmp_path / "raw.csv"
    raw.write_text(
        "config_id,metric_name,metric_value,unit,status\n"
        "ran,iteration_time,29,s,ok\n"
        "failed,iteration_time,,s,oom\n"
    )
    ran, failed = configs(raw)
    assert metric(ran, "iteration_time", "s") == 29.0
    assert failed.metrics == {}
    with pytest.raises(ValueError, match="failed: no value for metric iteration_time"):
        metric(failed, "iteration_time", "s")
    with pytest.raises(ValueError, match="expected 'ms'"):
        metric(ran, "iteration_time", "ms")


def _rows_by_config(
    built: tuple[Path, dict[str, int]], source: str
) -> dict[str, dict[str, object]]:
    table = dataset.load_public([source], built[0])
    return {
        str(row["source_ref"]).split(" [config_id ")[1].rstrip("]"): row
        for row in table.to_dict("records")
    }


def test_flagperf_values_checked_by_hand(built: tuple[Path, dict[str, int]]) -> None:
    rows = _rows_by_config(built, "flagperf")
    # llama3_8B README line 60: | A100单机8卡（1x8） | bf16 | PP2DP4TP1 | / | 3698.7 | .. | 76/80 |
    base = rows["flagperf_llama3_8b_a800x8_pp2dp4tp1"]
    assert base["step_time_s"] == pytest.approx(512 * 8192 / (3698.7 * 8))  # 141.7 s
    assert (base["peak_memory_gib"], base["tokens_per_s_per_device"]) == (76, 3698.7)
    assert (base["dp"], base["tp"], base["pp"], base["cluster"]) == (4, 1, 2, "a100")
    assert base["intra_node_gbps"] == 200  # A800: NVLink 400 GB/s both ways
    assert not base["sequence_parallel"] and base["recompute"] == "none"  # SP off at tp 1
    assert (base["overlap_grad_reduce"], base["dropout"]) == (False, pytest.approx(0.1))
    # line 72, the ablation's PP1DP8TP1: '/' for token/p/s and OOM for mem
    oom = rows["flagperf_llama3_8b_a800x8_pp1dp8tp1"]
    assert oom["status"] == "oom" and pd.isna(oom["step_time_s"])
    assert pd.isna(oom["peak_memory_gib"])
    assert oom["scenario"] == base["scenario"]
    scenario = [r for r in rows.values() if r["scenario"] == base["scenario"]]
    assert Counter(str(r["status"]) for r in scenario) == {"ok": 7, "oom": 1}
    tp8 = rows["flagperf_llama3_8b_a800x8_pp1dp1tp8"]  # 128256 padded to 1024
    assert (tp8["vocab_size"], tp8["peak_memory_gib"]) == (129024, 30)
    fp8 = rows["flagperf_llama3_8b_h100x8_fp8_pp1dp4tp2"]  # 10486 tokens/s, 74/80
    assert (fp8["precision"], fp8["cluster"]) == ("fp8", "h100") and fp8["sequence_parallel"]
    assert fp8["step_time_s"] == pytest.approx(512 * 8192 / (10486 * 8))
    # llama2_70B README line 59: | H800四机32卡（4x8） | amp | TP4PP8DP1 | / | 791.37 | / | 74/80 |
    h800 = rows["flagperf_llama2_70b_h800x32_tp4pp8dp1_gbs44"]
    assert h800["step_time_s"] == pytest.approx(44 * 4096 / (791.37 * 32))
    assert (h800["precision"], h800["dropout"], h800["vocab_size"]) == ("bf16", 0, 32256)
    assert (h800["intra_node_gbps"], h800["inter_node_gbps"]) == (200, 25)


def test_flagperf_accounts_for_every_configuration() -> None:
    raw = RAW_DIR / flagperf.RAW_FILE
    skipped = dict(flagperf.skipped(raw))
    assert len(flagperf.convert(raw)) + len(skipped) == len(list(configs(raw))) == 20
    assert skipped["flagperf_mixtral_8x7b_h100x32_pp2dp2ep1tp8"].startswith("status config_")
    assert "gbs_unverified" in skipped["flagperf_llama3_8b_h100x440_bf16_pp1dp220tp2"]


def test_bigscience_tr3m_values_checked_by_hand(built: tuple[Path, dict[str, int]]) -> None:
    rows = _rows_by_config(built, "bigscience_tr3m")
    # experiments/tr3m-1B3.md line 22: | 2 | 1 | 1 | 8 | 1 | 29 | 47.0 | 16GB |
    first = rows["bigscience_tr3m_v100_32g_full_tp1_pp1_dp8_mbs1"]
    assert (first["step_time_s"], first["peak_memory_gib"]) == (29, 16)
    assert (first["recompute"], first["precision"], first["framework"]) == (
        "full",
        "fp16",
        "megatron_deepspeed",
    )
    assert (first["device_memory_gib"], first["devices_per_node"]) == (32, 4)
    assert (first["vocab_size"], first["num_layers"], first["hidden_size"]) == (50304, 24, 2048)
    assert first["distributed_optimizer"] and not first["flash_attention"]
    # line 48, without --checkpoint-activations: | 2 | 2 | 1 | 4 | 1 | 39 | 26.2 | 21GB |
    tp2 = rows["bigscience_tr3m_v100_32g_none_tp2_pp1_dp4_mbs1"]
    assert (tp2["recompute"], tp2["step_time_s"], tp2["vocab_size"]) == ("none", 39, 50432)
    assert tp2["scenario"] == first["scenario"]  # recompute is part of the layout
    # line 104 on the 16 GB partition: | 2 | 1 | 8 | 1 | 8 | x | | OOM |
    oom = rows["bigscience_tr3m_v100_16g_full_tp1_pp8_dp1_mbs8"]
    assert oom["status"] == "oom" and pd.isna(oom["step_time_s"])
    assert oom["device_memory_gib"] == 16
    # the readings are the first node's, which holds the first pipeline stage (0069)
    assert {row["peak_memory_rank"] for row in rows.values()} == {"first"}
    by_scenario = Counter((str(r["scenario"]), str(r["status"])) for r in rows.values())
    assert by_scenario == {
        ("bigscience_tr3m|1B3|V100-32GB|gpus8|gbs512|seq2048", "ok"): 15,
        ("bigscience_tr3m|1B3|V100-32GB|gpus8|gbs512|seq2048", "oom"): 1,
        ("bigscience_tr3m|1B3|V100-16GB|gpus8|gbs512|seq2048", "ok"): 8,
        ("bigscience_tr3m|1B3|V100-16GB|gpus8|gbs512|seq2048", "oom"): 3,
    }
    assert bigscience_tr3m.SOURCE == "bigscience_tr3m"
