"""The loader returns a valid file whole, parsed and with defaults, or refuses it whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from autotune import dataset
from autotune.dataset._specs import MODEL_FIELDS
from autotune.simulators import DataFileError
from autotune.simulators.specs import CARD_FIELDS
from tests.dataset_tests._tables import BASE
from tests.dataset_tests._tables import write


def test_valid_file_loads_with_defaults(tmp_path: Path) -> None:
    path = write(tmp_path / "ok.csv", {}, {"tp": 1, "dp": 8, "status": "oom", "step_time_s": None})
    table = dataset.load_measurements(path)
    assert len(table) == 2
    first, second = table.iloc[0], table.iloc[1]
    assert first["vpp"] == 1 and first["precision"] == "bf16"
    assert bool(first["distributed_optimizer"]) is True
    assert bool(first["sequence_parallel"]) is True  # default: tp > 1
    assert bool(second["sequence_parallel"]) is False
    assert pd.isna(second["step_time_s"]) and second["status"] == "oom"
    assert first["activation"] == "swiglu" and first["num_experts"] == 0


def test_extra_columns_are_kept(tmp_path: Path) -> None:
    table = dataset.load_measurements(write(tmp_path / "x.csv", {"my_note": "hello"}))
    assert table.loc[0, "my_note"] == "hello"


def test_model_card_facts_are_not_architecture_columns() -> None:
    """The model card's launch facts price nothing: measurement rows neither need nor carry
    them (shipped tables and written probe rows keep their columns)."""
    assert MODEL_FIELDS and not set(CARD_FIELDS) & set(MODEL_FIELDS)


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path / "bad.csv",
        {"cluster": "nowhere"},  # line 2
        {"dp": 2},  # line 3: 2*8 != 8, a layout that breaks a rule: no problem of the file
        {"step_time_s": -1.5},  # line 4
        {"step_time_s": None},  # line 5: ok without a time
        {"tp": "eight", "recompute": "some"},  # line 6
    )
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    message = str(caught.value)
    assert (
        "bad.csv, line 6, column tp: expected an integer from 1 to 1,048,576, got 'eight'"
        in message
    )
    assert "line 6, column recompute: expected one of none, selective, full" in message
    assert (
        "line 4, column step_time_s: expected a number from 0.001 to 86,400, got '-1.5'" in message
    )
    # the rules across columns run on every row whose own cells parse, in the same pass
    assert "5 problem(s)" in message
    assert "line 2, column cluster: expected one of" in message and "'nowhere'" in message
    assert "a100" in message  # the allowed names are listed
    assert "line 3" not in message
    assert "line 5, column step_time_s: required when status is ok" in message


def test_missing_columns_and_bad_cells_are_listed_together(tmp_path: Path) -> None:
    path = tmp_path / "both.csv"
    rows = [{k: v for k, v in BASE.items() if k != "vocab_size"} for _ in range(2)]
    rows[1]["step_time_s"] = -2
    pd.DataFrame(rows).to_csv(path, index=False)
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    message = str(caught.value)
    assert "missing required column(s): vocab_size" in message
    assert (
        "line 3, column step_time_s: expected a number from 0.001 to 86,400, got '-2.0'" in message
    )


def test_missing_architecture_columns(tmp_path: Path) -> None:
    path = tmp_path / "arch.csv"
    row = {k: v for k, v in BASE.items() if k not in ("num_kv_heads", "vocab_size")}
    pd.DataFrame([row]).to_csv(path, index=False)
    with pytest.raises(DataFileError, match="missing required column.*num_kv_heads, vocab_size"):
        dataset.load_measurements(path)


def test_spec_errors_name_the_row(tmp_path: Path) -> None:
    path = write(tmp_path / "kv.csv", {}, {"num_kv_heads": 3})
    with pytest.raises(DataFileError, match=r"line 3, column model/layout: .*num_kv_heads=3"):
        dataset.load_measurements(path)


def test_parquet_reads_like_csv(tmp_path: Path) -> None:
    csv = write(tmp_path / "t.csv", {}, {"tp": 4, "dp": 2})
    parquet = tmp_path / "t.parquet"
    pd.read_csv(csv).to_parquet(parquet)
    from_csv, from_parquet = dataset.load_measurements(csv), dataset.load_measurements(parquet)
    pd.testing.assert_frame_equal(from_csv, from_parquet)


def test_not_a_table(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("hello")
    with pytest.raises(DataFileError, match=r"expected a \.csv or \.parquet file"):
        dataset.load_measurements(path)
    with pytest.raises(DataFileError, match="no such file"):
        dataset.load_measurements(tmp_path / "missing.csv")


def test_row_to_specs_applies_overrides_and_small_jobs(tmp_path: Path) -> None:
    path = write(
        tmp_path / "o.csv",
        {"num_devices": 2, "tp": 2, "device_memory_gib": 16, "inter_node_gbps": 1.5},
        {"num_devices": 64, "dp": 8, "intra_node_gbps": 100},
    )
    small, big = dataset.load_measurements(path).to_dict("records")
    job, layout = dataset.row_to_specs(small)
    cluster = job.cluster
    assert (cluster.devices_per_node, cluster.num_nodes) == (2, 1)
    assert cluster.device.memory_gib == 16 and cluster.inter_node.bandwidth_gbps == 1.5
    assert job.model.head_dim == 1024 // 16 and job.train.global_batch_size == 64
    assert (layout.tp, layout.sequence_parallel) == (2, True)
    job, layout = dataset.row_to_specs(big)
    cluster = job.cluster
    assert (cluster.devices_per_node, cluster.num_nodes) == (8, 8)
    assert cluster.intra_node.bandwidth_gbps == 100
    assert layout.world_size == cluster.num_devices


def test_training_settings_come_from_the_row_or_the_framework(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.csv",
        {"grad_reduce_in_fp32": "false", "framework": "megatron_core"},
        {"grad_reduce_in_fp32": ""},
        {"grad_reduce_in_fp32": "fp32"},
        {"moe_dispatcher": "nccl"},
        {"cp_comm_type": "ring"},
        {"fused_softmax_rule": "apex"},
    )
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    assert "line 4, column grad_reduce_in_fp32" in str(caught.value)
    assert "line 5, column moe_dispatcher: expected one of alltoall, allgather, deepep" in str(
        caught.value
    )
    assert "line 6, column cp_comm_type: expected one of p2p, a2a" in str(caught.value)
    assert "line 7, column fused_softmax_rule: expected one of megatron, bigscience_fork" in str(
        caught.value
    )
    given_settings = {
        "grad_reduce_in_fp32": "false",
        "overlap_grad_reduce": "true",
        "overlap_param_gather": "false",
        "tp_comm_overlap": "1",
        "moe_dispatcher": "deepep",
        "moe_a2a_overlap": "true",
        "cp_comm_type": "a2a",
        "fused_softmax_rule": "bigscience_fork",
    }
    path = write(tmp_path / "t.csv", given_settings, {})
    rows = dataset.load_measurements(path).to_dict("records")
    given, default = (dataset.row_to_specs(row)[0].train for row in rows)
    assert given.grad_reduce_in_fp32 is False and given.grad_reduce_bytes == 2
    assert given.tp_comm_overlap is True and given.overlaps_tp_comm
    assert given.token_dispatcher == "deepep" and default.token_dispatcher == "alltoall"
    assert given.moe_a2a_overlap and not default.moe_a2a_overlap
    assert default.grad_reduce_in_fp32 is None and default.tp_comm_overlap is None
    assert default.reduces_grads_in_fp32 == default.framework.grad_reduce_in_fp32
    assert default.overlaps_tp_comm == default.framework.tp_comm_overlap
    assert given.overlaps_grad_reduce and not given.overlaps_param_gather
    assert default.overlap_grad_reduce is None and default.overlap_param_gather is None
    assert default.overlaps_grad_reduce == default.framework.overlap_grad_reduce
    assert given.context_exchange == "a2a" and default.cp_comm_type is None
    assert default.context_exchange == default.framework.cp_comm_type
    assert given.fused_softmax_rule == "bigscience_fork" and default.fused_softmax_rule is None


def test_shipped_rows_carry_what_their_scripts_ran() -> None:
    """SimuMax's launchers pass neither overlap flag; MindSpeed-LLM's Mixtral script passes
    both, its LLaMA2-7B script only the gradient one; the CP exchanges
    (autotune/dataset/importers)."""
    simumax = dataset.load_measurements(dataset.DATA_DIR / "simumax.csv")
    assert simumax["overlap_grad_reduce"].eq(False).all()
    mindspeed = dataset.load_measurements(dataset.DATA_DIR / "mindspeed.csv").set_index("model")
    assert mindspeed.loc["Mixtral 8x7B", ["overlap_grad_reduce", "overlap_param_gather"]].all()
    llama = mindspeed.loc["LLaMA2 7B"]
    assert llama["overlap_grad_reduce"] and pd.isna(llama["overlap_param_gather"])
    # and the uneven splits their scripts pass as --num-layer-list
    assert mindspeed.loc["InternLM2 20B", "layer_split"] == (22, 26)
    assert mindspeed["layer_split"].notna().sum() == 3
    # and their context-parallel exchange: SimuMax's CP_COMM_TYPE defaults to a2a; MindSpeed's
    # --context-parallel-algo (ulysses_cp_algo by default then, hybrid left to the framework)
    assert simumax.loc[simumax["cp"] > 1, "cp_comm_type"].eq("a2a").all()
    assert simumax.loc[simumax["cp"] == 1, "cp_comm_type"].isna().all()
    chatglm = mindspeed.loc["ChatGLM3 6B"].set_index("cp")["cp_comm_type"]
    assert chatglm[8] == "a2a" and pd.isna(chatglm[16])  # the second runs hybrid_cp_algo
    assert mindspeed.loc["Mixtral 8x7B", "cp_comm_type"] == "p2p"
    # BLOOM's search and tr3m's benchmark ran BigScience's fork of 2021-10 to 2022-03 and its
    # fused softmax check
    for source in ("bloom", "bigscience_tr3m"):
        table = dataset.load_measurements(dataset.DATA_DIR / f"{source}.csv")
        assert table["fused_softmax_rule"].eq("bigscience_fork").all()
    assert simumax["fused_softmax_rule"].isna().all()


def test_shipped_data_loads_and_breaks_no_layout_rule() -> None:
    table = dataset.load_public()
    assert set(table["source"]) == set(dataset.public_sources())
    for row in table.to_dict("records"):
        job, layout = dataset.row_to_specs(row)
        assert layout.violations(job) == [], row["source_ref"]


def test_absurd_and_non_finite_values_are_refused_all_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path / "absurd.csv",
        {"num_layers": 1e30},  # line 2
        {"num_devices": 8e9},  # line 3
        {"step_time_s": "inf"},  # line 4
        {"step_time_s": "Infinity"},  # line 5
        {"peak_memory_gib": "nan"},  # line 6
        {"global_batch_size": 10**9, "hidden_size": 2_000_000},  # line 7
        {"step_time_s": 1e8, "tp": "-inf"},  # line 8
    )
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    message = str(caught.value)
    assert "9 problem(s)" in message
    for expected in (
        "line 2, column num_layers: expected an integer from 1 to 10,000, got '1e+30'",
        "line 3, column num_devices: expected an integer from 1 to 1,048,576",
        "line 4, column step_time_s: expected a number from 0.001 to 86,400, got 'inf'",
        "line 5, column step_time_s: expected a number from 0.001 to 86,400, got 'Infinity'",
        "line 6, column peak_memory_gib: expected a number > 0 and < 100,000, got 'nan'",
        "line 7, column global_batch_size: expected an integer from 1 to 100,000,000",
        "line 7, column hidden_size: expected an integer from 1 to 1,048,576, got '2000000'",
        "line 8, column step_time_s: expected a number from 0.001 to 86,400, got '100000000.0'",
        "line 8, column tp: expected an integer from 1 to 1,048,576, got '-inf'",
    ):
        assert expected in message


def test_exact_duplicate_rows_name_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "dup.csv", {}, {"tp": 4, "dp": 2}, {}, {"step_time_s": 1.0})
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    message = str(caught.value)
    assert "1 problem(s)" in message  # the repeats of one row are told once
    assert "dup.csv, lines 4-5: the same value in every column as line 2" in message
    # one differing cell anywhere, an extra column included, makes rows distinct
    distinct = write(tmp_path / "distinct.csv", {"note": "a"}, {"note": "b"})
    assert len(dataset.load_measurements(distinct)) == 2


def test_implausible_figures_are_refused_naming_the_row_and_why(tmp_path: Path) -> None:
    """Within the number bounds, but not a measurement: each against the others of its row
    and its device (autotune/simulators/limits.py gives each tolerance)."""
    implied = 64 * 2048 / (1.0 * 8)  # BASE: global batch x sequence / (step x devices)
    path = write(
        tmp_path / "implausible.csv",
        {"step_time_s": 1e-300},  # line 2: below a millisecond
        {"step_time_s": 90_000.0, "tp": 4, "dp": 2},  # line 3: more than a day
        {"tokens_per_s_per_device": implied * 8, "tp": 2, "dp": 4},  # line 4: of all devices
        {"peak_memory_gib": 85.0, "tp": 1, "dp": 8},  # line 5: above the A100's 80 GiB
        {"peak_memory_gib": 120.0, "status": "oom", "tp": 1, "dp": 8, "micro_batch": 2},  # ok
        {"tokens_per_s_per_device": implied * 1.05, "tp": 2, "dp": 4, "micro_batch": 2},  # ok
        {"predicted_step_time_s": 1e-9, "tp": 4, "dp": 2, "micro_batch": 2},  # line 8
        {"device_memory_gib": 0.08, "tp": 8, "micro_batch": 2},  # line 9: TiB?
        {"intra_node_gbps": 0.01, "tp": 8, "micro_batch": 4},  # line 10
    )
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    message = str(caught.value)
    for expected in (
        "line 2, column step_time_s: expected a number from 0.001 to 86,400, got '1e-300'",
        "line 3, column step_time_s: expected a number from 0.001 to 86,400, got '90000.0'",
        "line 4, column tokens_per_s_per_device: 131072, but global_batch_size x seq_len / "
        "(step_time_s x num_devices) = 1.638e+04",
        "line 5, column peak_memory_gib: 85 GiB is more than the device's 80 GiB",
        "line 8, column predicted_step_time_s: expected a number from 0.001 to 86,400",
        "line 9, column device_memory_gib: expected a number from 1 to 100,000, got '0.08'",
        "line 10, column intra_node_gbps: expected a number from 0.1 to 1e+06, got '0.01'",
    ):
        assert expected in message
    assert "7 problem(s)" in message  # an oom row above the device, 5% off: both fine


@pytest.mark.parametrize(
    ("split", "expected"),
    [
        (
            "4/4/4",
            (
                "layer_split has 3 stages, expected pp=2",
                "layer_split [4, 4, 4] sums to 12, expected num_layers=8",
            ),
        ),
        ("7/7", ("layer_split [7, 7] sums to 14, expected num_layers=8",)),
        ("3/5", ()),  # a split of the 8 layers over the 2 stages: the framework's rule
    ],
)
def test_a_layer_split_that_does_not_fit_its_row_loads_and_is_set_apart_with_the_rule(
    tmp_path: Path, split: str, expected: tuple[str, ...]
) -> None:
    path = write(tmp_path / "split.csv", {"tp": 4, "pp": 2, "layer_split": split})
    table = dataset.load_measurements(path)
    assert table["layer_split"][0] == tuple(int(n) for n in split.split("/"))
    rows = dataset.priceable_rows(table)
    assert [row.reasons for row in rows.skipped] == ([expected] if expected else [])
    assert len(rows.table) == len(rows.specs) == 1 - len(rows.skipped)
    if expected:
        assert rows.skipped[0].place == "split.csv, line 2"
        assert rows.skipped[0].rules == ("layers",)


def test_conflicting_measurements_of_one_layout_are_refused_naming_both_lines(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path / "conflict.csv",
        {"step_time_s": 1.0},  # line 2
        {"step_time_s": 3.0},  # line 3: three times line 2
        {"tp": 4, "dp": 2, "status": "oom", "step_time_s": None},  # line 4
        {"tp": 4, "dp": 2, "step_time_s": 1.2},  # line 5: ran where line 4 did not
        {"tp": 2, "dp": 4, "step_time_s": 1.5, "model": "toy-a"},  # repeats within 10%:
        {"tp": 2, "dp": 4, "step_time_s": 1.55, "model": "toy-b"},  # fine
        {"tp": 2, "dp": 4, "step_time_s": 9.0, "scenario": "other setup"},  # another scenario
    )
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    message = str(caught.value)
    assert "2 problem(s)" in message
    assert (
        "conflict.csv, lines 2 and 3: the same job and layout measured 1 s and 3 s per step, "
        "more than 10% apart"
    ) in message
    assert (
        "conflict.csv, lines 5 and 4: the same job and layout ran (status ok) and ran out of "
        "memory (status oom)"
    ) in message


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda lines: [lines[0], lines[1].replace("toy", '"toy')],
            "not a CSV table: unexpected end of data (line 2)",
        ),
        (lambda lines: [], "no data rows"),
        (lambda lines: [lines[0]], "no data rows"),
    ],
)
def test_a_file_that_is_not_a_table_is_one_clean_error(
    tmp_path: Path, edit: Any, expected: str
) -> None:
    path = write(tmp_path / "broken.csv", {}, {"tp": 4, "dp": 2})
    path.write_text("\n".join(edit(_lines(path))))
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    assert str(caught.value).startswith(f"{path}: ") and expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_row_of_another_width_is_one_problem_naming_its_cells(tmp_path: Path) -> None:
    path = write(tmp_path / "ragged.csv", {}, {"tp": 4, "dp": 2}, {"tp": 2, "dp": 4})
    header, first, second, third = _lines(path)
    short = ",".join(third.split(",")[:5])
    path.write_text(f"{header}\n{first},extra\n{second}\n{short}\n")
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    message = str(caught.value)
    assert "2 problem(s)" in message  # not one per empty cell of the short row
    assert "ragged.csv, line 2: 22 cells, the header has 21 columns" in message
    assert "ragged.csv, line 4: 5 cells, the header has 21 columns" in message


def test_header_problems_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "header.csv", {})
    header, row = _lines(path)
    path.write_text(f"{header},tp,\n{row},2,x\n")
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    message = str(caught.value)
    assert "header.csv, line 1: column 'tp' appears 2 times" in message
    assert "header.csv, line 1: column 23 has cells but no name" in message


def test_blank_lines_keep_line_numbers_and_a_trailing_comma_is_harmless(tmp_path: Path) -> None:
    path = write(tmp_path / "blank.csv", {}, {"tp": "x"})
    header, good, bad = _lines(path)
    path.write_text(f"{header},\n\n{good},\n{',' * header.count(',')},\n{bad},\n")
    with pytest.raises(DataFileError, match=r"blank\.csv, line 5, column tp: expected an integer"):
        dataset.load_measurements(path)
    path.write_text(f"{header},\n\n{good},\n")
    assert len(dataset.load_measurements(path)) == 1


def test_parquet_non_finite_values_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "inf.parquet"
    pd.DataFrame([{**BASE, "step_time_s": float("inf")}]).to_parquet(path)
    with pytest.raises(DataFileError, match="line 2, column step_time_s: .* got 'inf'"):
        dataset.load_measurements(path)
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(DataFileError, match="junk.parquet: cannot be read: "):
        dataset.load_measurements(tmp_path / "junk.parquet")


def test_a_binary_file_is_one_clean_error(tmp_path: Path) -> None:
    path = tmp_path / "binary.csv"
    path.write_bytes(b"\xff\xfe\x00\x01scenario,model\n")
    with pytest.raises(DataFileError, match=r"binary\.csv: cannot be read: not UTF-8 text"):
        dataset.load_measurements(path)
    path.write_bytes("scenario,model\ns\u00e9,x\n".encode("latin-1"))
    with pytest.raises(DataFileError, match=r"not UTF-8 text \(.*\); save it as UTF-8$"):
        dataset.load_measurements(path)


def test_a_folder_is_no_file(tmp_path: Path) -> None:
    (tmp_path / "runs.csv").mkdir()
    with pytest.raises(DataFileError, match=r"runs\.csv: a folder, not a file; give a \.csv"):
        dataset.load_measurements(tmp_path / "runs.csv")


def test_recompute_modules_load_as_the_layouts_spelling(tmp_path: Path) -> None:
    """A ``/``-separated list of modules, sorted and the default spelt empty, as the layout
    keeps them; an unknown module is refused naming the allowed ones."""
    rows = (
        {"recompute": "selective", "recompute_modules": "mlp/core_attn"},
        {"recompute": "selective", "recompute_modules": "core_attn", "scenario": "s2"},
    )
    table = dataset.load_measurements(write(tmp_path / "modules.csv", *rows))
    priced = dataset.priceable_rows(table)
    assert [layout.recompute_modules for _, layout in priced.specs] == [("core_attn", "mlp"), None]
    bad = write(tmp_path / "bad.csv", {"recompute": "selective", "recompute_modules": "ffn"})
    with pytest.raises(
        DataFileError, match="column recompute_modules: expected modules of core_attn"
    ):
        dataset.load_measurements(bad)


def test_an_unclosed_quote_is_refused_not_a_row_lost(tmp_path: Path) -> None:
    path = write(tmp_path / "quote.csv", {}, {"tp": 4, "dp": 2}, {"tp": 2, "dp": 4})
    header, first, second, third = _lines(path)
    # a stray quote opens in line 2's first cell and closes in line 4's: pandas reads one row
    path.write_text(f'{header}\n"{first}\n{second}\n{third.replace(",", chr(34) + ",", 1)}\n')
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    assert "quote.csv, line 2, column scenario: a cell spans lines" in str(caught.value)


def test_a_device_level_peak_at_the_devices_ceiling_is_read_as_no_peak(tmp_path: Path) -> None:
    """On an A100 80GB (1.25 GiB not given to the allocator): an ``nvidia-smi`` reading at
    78.75 GiB or more says only that the run fit; one under it, or the allocator's own
    figure at the ceiling, is a measured peak."""
    rows = [
        {"scenario": "full", "peak_memory_gib": 79.5, "peak_memory_measure": "device"},
        {"scenario": "under", "peak_memory_gib": 70.0, "peak_memory_measure": "device"},
        {"scenario": "tensors", "peak_memory_gib": 79.5, "peak_memory_measure": "allocated"},
    ]
    table = dataset.load_measurements(write(tmp_path / "peaks.csv", *rows))
    priced = dataset.priceable_rows(table)
    peaks = dict(zip(priced.table["scenario"], priced.table["peak_memory_gib"], strict=True))
    assert pd.isna(peaks["full"]) and (peaks["under"], peaks["tensors"]) == (70.0, 79.5)
    assert table["peak_memory_gib"].notna().all()  # the loaded table keeps what was read


def test_a_peak_says_whose_rank_it_is_the_fullest_unless_told(tmp_path: Path) -> None:
    rows = [
        {"scenario": "max", "peak_memory_gib": 50.0, "peak_memory_measure": "device"},
        {
            "scenario": "rank0",
            "peak_memory_gib": 40.0,
            "peak_memory_measure": "allocated",
            "peak_memory_rank": "first",
        },
    ]
    table = dataset.load_measurements(write(tmp_path / "ranks.csv", *rows))
    assert table["peak_memory_rank"].tolist() == ["fullest", "first"]
    assert dataset.peak_readings(table).tolist() == ["device", "allocated@first"]
    bad = write(tmp_path / "bad.csv", {"peak_memory_gib": 40.0, "peak_memory_rank": "last"})
    with pytest.raises(DataFileError, match="column peak_memory_rank: expected one of fullest"):
        dataset.load_measurements(bad)


def test_a_wrong_value_down_a_column_is_one_problem_naming_its_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path / "runs.csv",
        *[{"framework": "nanotron"}] * 3,  # lines 2-4
        {"tp": "eight"},  # line 5
        {"framework": "nanotron"},  # line 6
        {"framework": "other"},  # line 7: another value, another problem
    )
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    message = str(caught.value)
    assert "3 problem(s)" in message
    assert "runs.csv, lines 2-4, 6, column framework: expected one of " in message
    assert message.count("got 'nanotron'") == 1
    assert "runs.csv, line 5, column tp: expected an integer" in message
    assert "runs.csv, line 7, column framework:" in message and "got 'other'" in message


def test_each_row_keeps_its_file_and_line_through_concatenation_and_selection() -> None:
    table = dataset.load_public(["korthikanti", "dlperf"])
    places = dataset.row_places(table)
    assert places is not None and len(places) == len(table)
    assert (places.files[0], places.lines[0]) == ("korthikanti.csv", 2)
    last = len(table) - 1
    assert places.files[last] == "dlperf.csv"
    taken = dataset.take_rows(table, [last, 0])
    assert dataset.row_places(taken) == dataset.RowPlaces(
        ("dlperf.csv", "korthikanti.csv"), (places.lines[last], 2)
    )
    # pandas deep-copies a frame's attrs into every frame and column taken from it: the
    # places are shared, not copied per row each time
    assert dataset.row_places(table[["source"]]) is places
    assert dataset.row_places(table.assign(source="x")) is places


def test_many_wrong_values_down_a_column_and_many_problems_stay_a_short_message(
    tmp_path: Path,
) -> None:
    """A few different wrong values of a column are told one by one; more are one problem
    naming the lines and the first values; past 40 problems the rest are counted."""
    path = write(tmp_path / "runs.csv", *[{"step_time_s": -i} for i in range(1, 601)])
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    assert str(caught.value).splitlines()[1:] == [
        "  - runs.csv, lines 2-601, column step_time_s: expected a number from 0.001 to "
        "86,400, got '-1', '-2', '-3' and 597 other values"
    ]
    path = write(tmp_path / "long.csv", {"tp": "8" * 5000})  # a cell is quoted, not dumped
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    assert str(caught.value).splitlines()[1].endswith(f"got '{'8' * 37}...'")
    rows = [{"step_time_s": 1.0 + i, "tp": 1, "dp": 8, "micro_batch": i} for i in range(1, 61)]
    path = write(tmp_path / "dup.csv", *[row for row in rows for _ in (0, 1)])  # each twice
    with pytest.raises(DataFileError) as caught:
        dataset.load_measurements(path)
    lines = str(caught.value).splitlines()
    assert "60 problem(s)" in lines[0] and len(lines) == 1 + 40 + 1
    assert lines[-1] == "  - and 20 more problem(s)"


def test_a_parquet_file_named_csv_is_told_its_suffix(tmp_path: Path) -> None:
    pd.read_csv(write(tmp_path / "runs.csv", {})).to_parquet(tmp_path / "runs.parquet")
    misnamed = tmp_path / "misnamed.csv"
    misnamed.write_bytes((tmp_path / "runs.parquet").read_bytes())
    with pytest.raises(DataFileError, match=r"misnamed\.csv: a Parquet file named \.csv; give"):
        dataset.load_measurements(misnamed)
