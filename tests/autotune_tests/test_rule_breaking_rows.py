"""Well-formed measured rows whose layout breaks a rule (issue 27, item 5).

Such a row is set apart by its file, line, layout and rule, counted per source and rule in the
benchmark's report, and left out of ``calibrate data=`` and the probe loop's ``measured=``; the
other rows are scored. Nothing a user's table holds that loads may end in a traceback.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from autotune import catalog
from autotune import dataset
from autotune.benchmark import HeuristicRule
from autotune.benchmark import run_benchmark
from autotune.benchmark._rankers import heuristic_ranking
from autotune.benchmark._rankers import simulate
from autotune.benchmark._report import console_tables
from autotune.benchmark._report import json_payload
from autotune.config import BenchmarkConfig
from autotune.config import load_config
from autotune.dataset._specs import MODEL_FIELDS
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators.layout import RULE_NAMES
from tests.autotune_tests.test_cli import SMALL
from tests.autotune_tests.test_cli import run
from tests.dataset_tests._tables import write

OFF = "tracking.enabled=false"
QWEN3 = catalog.load_model("qwen3_235b_a22b")  # 94 layers, 64 heads, 4 KV heads, 128 experts

# Qwen3-235B-A22B on 256 H100 (sequence 4096, global batch 2048) in the layouts of NVIDIA's
# Megatron-MoE model zoo (best_practice/Qwen3), as issue 27 quotes them: expert tensor
# parallelism 1 in every row. Without an etp column the experts take tp, and lines 2, 3 and 5
# then need an expert grid of 512 devices; line 4 ran with FSDP, which the schema does not hold
# (it reads as dp 128).
_ZOO = (
    {"dp": 16, "tp": 2, "pp": 8, "ep": 32, "vpp": 4, "step_time_s": 19.7},
    {"dp": 16, "tp": 2, "pp": 8, "ep": 32, "vpp": 4, "step_time_s": 17.6, "moe_a2a_overlap": True},
    {"dp": 128, "tp": 2, "ep": 8, "micro_batch": 4, "recompute": "full", "step_time_s": 17.6},
    {"dp": 4, "tp": 2, "pp": 32, "ep": 8, "vpp": 3, "step_time_s": 24.2, "moe_dispatcher": ""},
    {"dp": 8, "tp": 4, "pp": 8, "ep": 8, "vpp": 4, "step_time_s": 29.0},
)
_GRID = "expert grid etp({tp}) * ep({ep}) * pp({pp}) = 512 does not divide the world size 256"


def _moe_table(path: Path, rows: tuple[dict[str, Any], ...] = _ZOO) -> Path:
    job = {
        "scenario": "qwen3-235b 256 x h100",
        "model": QWEN3.name,
        **{key: getattr(QWEN3, key) for key in MODEL_FIELDS},
        "cluster": "h100",
        "num_devices": 256,
        "seq_len": 4096,
        "global_batch_size": 2048,
        "pp": 1,
        "cp": 1,
        "micro_batch": 1,
        "recompute": "none",
        "framework": "megatron_core",
        "moe_dispatcher": "deepep",
        "status": "ok",
    }
    pd.DataFrame([{**job, **row} for row in rows]).to_csv(path, index=False)
    return path


@pytest.mark.slow  # a benchmark process
def test_a_moe_table_of_layouts_it_cannot_express_is_scored_on_the_rest(tmp_path: Path) -> None:
    data = _moe_table(tmp_path / "qwen3.csv")
    proc = run("autotune.benchmark", f"data={data}", OFF, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "warning: 3 of 5 rows break a layout rule and are not scored" in proc.stderr
    out = proc.stdout
    assert max(len(line) for line in out.splitlines()) <= 120
    assert "qwen3: 3 row(s); rows per rule broken: experts 3" in out
    report = (tmp_path / "benchmark_report" / "benchmark.md").read_text()
    assert "| qwen3 | 3 | experts 3 |" in report
    for line, layout, degrees in (
        (2, "dp16 tp2 pp8 cp1 ep32 vpp4", {"tp": 2, "ep": 32, "pp": 8}),
        (3, "dp16 tp2 pp8 cp1 ep32 vpp4", {"tp": 2, "ep": 32, "pp": 8}),
        (5, "dp4 tp2 pp32 cp1 ep8 vpp3", {"tp": 2, "ep": 8, "pp": 32}),
    ):
        assert f"qwen3.csv, line {line}: layout {layout}" in out
        assert f"| qwen3.csv | {line} | qwen3 | {layout}" in report
        assert _GRID.format(**degrees) in report
    # the two layouts it can express are scored: one scenario of two, both rows predicted
    scored = pd.read_csv(tmp_path / "benchmark_report" / "predictions.csv")
    analytical = scored[scored["simulator"] == "analytical"]
    assert len(analytical) == 2 and analytical["predicted_step_time_s"].notna().all()
    assert (
        analytical["layout"].str.startswith(("dp128 tp2 pp1 cp1 ep8", "dp8 tp4 pp8 cp1 ep8")).all()
    )
    scenarios = pd.read_csv(tmp_path / "benchmark_report" / "scenarios.csv")
    assert set(scenarios["simulator"]) == {"analytical", "random", "heuristic"}
    assert scenarios["eligible"].all() and (scenarios["n_layouts"] == 2).all()


@pytest.mark.slow  # a benchmark process
def test_the_moe_table_with_its_expert_tp_is_scored_whole(tmp_path: Path) -> None:
    """The same table with the ETP column it ran with: every row keeps the layout rules and is
    priced (issue 27's first target)."""
    data = _moe_table(tmp_path / "qwen3.csv", tuple({**row, "etp": 1} for row in _ZOO))
    proc = run("autotune.benchmark", f"data={data}", OFF, cwd=tmp_path)
    assert proc.returncode == 0 and "break a layout rule" not in proc.stderr, proc.stderr
    scored = pd.read_csv(tmp_path / "benchmark_report" / "predictions.csv")
    analytical = scored[scored["simulator"] == "analytical"]
    assert len(analytical) == 5 and analytical["predicted_step_time_s"].notna().all()
    assert analytical["layout"].str.contains(" etp1 ").all()


def test_a_table_whose_every_row_breaks_a_rule_is_one_error_line(tmp_path: Path) -> None:
    data = _moe_table(tmp_path / "broken.csv", (_ZOO[0], _ZOO[3]))
    proc = run("autotune.benchmark", f"data={data}", OFF, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stdout == ""
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: {data}: nothing to score: every row's layout breaks a rule")
    assert "broken.csv, line 2: layout dp16 tp2 pp8" in error
    assert _GRID.format(tp=2, ep=32, pp=8) in error


_MOE = {"num_experts": 8, "moe_top_k": 2, "expert_ffn_hidden_size": 1024}
# One change of a valid toy row (``BASE``: 8 layers, 16 heads, 8 A100, sequence 2048, batch 64)
# per rule, and the rule's name and sentence.
_BROKEN = [
    ({"dp": 2, "tp": 8}, "world size", "dp(2) * tp(8) * pp(1) * cp(1) = 16 != 8 devices"),
    (
        {"num_attention_heads": 4, "num_kv_heads": 4},
        "heads",
        "tp=8 does not divide num_attention_heads=4",
    ),
    (
        {"dp": 4, "tp": 1, "pp": 2, "layer_split": "3/3"},
        "layers",
        "layer_split [3, 3] sums to 6, expected num_layers=8",
    ),
    ({"dp": 8, "tp": 1, "vpp": 2}, "virtual pipeline", "vpp=2 needs pp > 1"),
    (
        {"dp": 4, "tp": 1, "cp": 2, "framework": "megatron_lm"},
        "context parallel",
        "cp=2: megatron_lm has no context parallelism (use cp=1)",
    ),
    ({"dp": 8, "tp": 1, "ep": 2}, "experts", "ep=2 needs a mixture-of-experts model"),
    ({**_MOE, "dp": 8, "tp": 1, "ep": 3}, "experts", "ep=3 does not divide num_experts=8"),
    (
        {**_MOE, "dp": 4, "tp": 2, "ep": 8},
        "experts",
        "expert grid etp(2) * ep(8) * pp(1) = 16 does not divide the world size 8",
    ),
    (
        {"dp": 8, "tp": 1, "sequence_parallel": True},
        "sequence parallel",
        "sequence_parallel needs tp > 1",
    ),
    (
        {"seq_len": 2052},
        "sequence parallel",
        "sequence_parallel with tp=8 needs seq_len=2052 divisible by cp*tp=8",
    ),
    (
        {"dp": 8, "tp": 1, "micro_batch": 3},
        "batch",
        "micro_batch(3) * dp(8) = 24 does not divide global_batch_size=64",
    ),
    ({"recompute_layers": 1}, "recompute", "recompute_layers=1 needs recompute=full"),
    (
        {**_MOE, "dp": 8, "tp": 1, "moe_a2a_overlap": True},
        "expert overlap",
        "moe_a2a_overlap needs ep > 1",
    ),
]
_VALID = ({"dp": 8, "tp": 1, "step_time_s": 1.0}, {"dp": 4, "tp": 2, "step_time_s": 1.2}, {})


def _cfg(*overrides: str) -> BenchmarkConfig:
    return load_config(BenchmarkConfig, [OFF, "memory_margin=0", *overrides])


@pytest.mark.parametrize(("change", "rule", "sentence"), _BROKEN, ids=[b[1] for b in _BROKEN])
def test_each_rule_sets_its_row_apart_and_the_others_are_scored(
    tmp_path: Path, change: dict[str, Any], rule: str, sentence: str
) -> None:
    data = write(tmp_path / "runs.csv", *_VALID, {**change, "step_time_s": 0.9})
    result = run_benchmark(_cfg(f"data={data}"))  # analytical, random, heuristic, peers
    (skipped,) = result.skipped
    assert (skipped.place, skipped.source, skipped.rules[0]) == ("runs.csv, line 5", "runs", rule)
    assert rule in RULE_NAMES and any(r.startswith(sentence) for r in skipped.reasons)
    assert result.summaries["analytical"]["n_rows"] == 3  # every other row is predicted
    assert result.summaries["analytical"]["n_scenarios"] == 1
    assert result.summaries["heuristic"]["n_scenarios"] == 1
    assert (result.scenarios["n_layouts"] == 3).all()  # the skipped row is no candidate
    assert f"runs.csv, line 5: layout {skipped.layout}: {sentence}" in console_tables(
        result, 3
    ).replace("\n    ", " ")
    payload = json.loads(json.dumps(json_payload(result, {}), allow_nan=False))
    assert payload["skipped"]["by_source"] == {"runs": {"rows": 1, "rules": {rule: 1}}}
    assert payload["skipped"]["rows"][0]["line"] == 5


@pytest.mark.parametrize(
    "protocols", ["[zero_shot,leave_one_source_out,probe]", "[leave_one_source_out]"]
)
def test_the_calibration_protocols_see_only_the_rows_they_can_price(
    tmp_path: Path, protocols: str
) -> None:
    rows = [{**row, "source": source} for source in ("a", "b") for row in _VALID]
    broken = [{**change, "source": "b", "step_time_s": 0.9} for change, *_ in _BROKEN]
    data = write(tmp_path / "runs.csv", *rows, *broken)
    result = run_benchmark(_cfg(f"data={data}", f"protocols={protocols}", "probes=[1,2]"))
    assert len(result.skipped) == len(_BROKEN)
    assert {row.source for row in result.skipped} == {"b"}
    for name, summary in result.summaries.items():
        if summary["kind"] == "simulator":
            assert summary["n_scenarios"] == 2, name


def test_rows_kept_by_a_filter_are_named_by_their_own_lines(tmp_path: Path) -> None:
    rows = [{**row, "source": source} for source in ("a", "b") for row in _VALID]
    broken = {**_BROKEN[0][0], "source": "b", "step_time_s": 0.9}
    data = write(tmp_path / "runs.csv", *rows, broken)  # lines 2-4 a, 5-7 b, 8 broken
    result = run_benchmark(_cfg(f"data={data}", "source=[b]"))
    assert [row.place for row in result.skipped] == ["runs.csv, line 8"]
    assert set(result.rows["source"]) == {"b"}


_DEGREES = st.sampled_from([1, 2, 3, 4, 8])


@st.composite
def _rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rows of one toy job on 8 A100 with any degrees the schema takes (many break a rule),
    each layout once."""
    moe = _MOE if draw(st.booleans()) else {}
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for number in range(draw(st.integers(1, 6))):
        row = {
            "dp": draw(_DEGREES),
            "tp": draw(_DEGREES),
            "pp": draw(_DEGREES),
            "cp": draw(st.sampled_from([1, 2])),
            "ep": draw(st.sampled_from([1, 2, 4, 8])),
            "vpp": draw(st.sampled_from([1, 2, 3])),
            "micro_batch": draw(st.sampled_from([1, 2, 3, 4])),
            "recompute": draw(st.sampled_from(["none", "selective", "full"])),
            "framework": draw(st.sampled_from(list(catalog.options("framework")))),
        }
        row["moe_a2a_overlap"] = row["framework"] == "megatron_core" and draw(st.booleans())
        rows.setdefault(tuple(row.values()), {**moe, **row, "step_time_s": 1.0 + number / 10})
    return list(rows.values())


@pytest.mark.slow  # fuzzing
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_rows())
def test_every_row_is_either_priced_by_every_ranker_or_set_apart_by_its_rules(
    rows: list[dict[str, Any]],
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        table = dataset.load_measurements(write(Path(folder) / "rows.csv", *rows))
    priceable = dataset.priceable_rows(table)
    assert len(priceable.table) + len(priceable.skipped) == len(rows)
    every = dataset.table_specs(table)
    for skipped in priceable.skipped:
        job, layout = every[skipped.line - 2]
        assert skipped.place == f"rows.csv, line {skipped.line}"
        assert list(skipped.reasons) == layout.violations(job) != []
    priced = simulate(_ANALYTICAL, priceable.specs)
    assert all(math.isfinite(t) and t > 0 for t in priced.predicted_s)
    heuristic = heuristic_ranking(HeuristicRule(0.5), priceable.specs)
    assert len(heuristic.score) == len(priceable.specs)


_ANALYTICAL = catalog.load_simulator("analytical")


def test_calibrate_leaves_out_each_row_that_breaks_a_rule_naming_it(tmp_path: Path) -> None:
    data = write(tmp_path / "runs.csv", *_VALID, *[change for change, *_ in _BROKEN[:4]])
    out = tmp_path / "cal.yaml"
    proc = run(
        "autotune.calibrate", f"data={data}", "name=x", f"out={out}", "output=json", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    notes = json.loads(proc.stdout)["fit"]["notes"]
    assert notes[0] == (
        "4 row(s) left out: their layout breaks a rule (rows per rule: world size 1, heads 1, "
        "layers 1, virtual pipeline 1)"
    )
    for line, (_, _, sentence) in enumerate(_BROKEN[:4], start=5):
        (note,) = [n for n in notes if n.startswith(f"left out: runs.csv, line {line}: layout")]
        assert sentence in note
    assert [r["row"] for r in json.loads(proc.stdout)["rows"]] == [
        "runs line 2",
        "runs line 3",
        "runs line 4",
    ]
    assert "note: left out: runs.csv, line 5: layout dp2 tp8" in proc.stderr


def test_calibrate_with_no_row_it_can_price_is_one_error_line(tmp_path: Path) -> None:
    data = write(tmp_path / "runs.csv", _BROKEN[0][0], _BROKEN[-1][0])
    proc = run("autotune.calibrate", f"data={data}", "name=x", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: {data}: no row to calibrate on")
    assert "left out: runs.csv, line 3: layout dp8 tp1" in error
    assert "moe_a2a_overlap needs ep > 1" in error


def test_measured_rows_that_break_a_rule_are_left_out_of_the_probe_loop(tmp_path: Path) -> None:
    job = catalog.load_job("llama2_7b", "ascend", ["cluster.num_nodes=1"])  # as SMALL runs it
    row = {
        "scenario": "probes",
        "model": job.model.name,
        **{key: getattr(job.model, key) for key in MODEL_FIELDS},
        "cluster": "ascend",
        "num_devices": 8,
        "seq_len": job.train.seq_len,
        "global_batch_size": job.train.global_batch_size,
        "pp": 1,
        "cp": 1,
        "ep": 1,
        "micro_batch": 1,
        "recompute": "none",
        "status": "ok",
        "step_time_s": 10.0,
    }
    valid = [Layout(dp=8, tp=1), Layout(dp=4, tp=2, sequence_parallel=True)]
    measured = [
        {**row, **layout.as_dict(), "step_time_s": 1.2 * _seconds(job, layout)} for layout in valid
    ]
    broken = [{**row, "dp": 2, "tp": 8}, {**row, "dp": 8, "tp": 1, "micro_batch": 3}]
    pd.DataFrame([*measured, *broken]).to_csv(tmp_path / "m.csv", index=False)
    proc = run("autotune", *SMALL, OFF, "output=json", "measured=m.csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    round_ = json.loads(proc.stdout)["probe_round"]
    assert len(round_["measured"]) == 2
    assert round_["notes"][:3] == [
        "2 row(s) left out: their layout breaks a rule (rows per rule: world size 1, batch 1)",
        "left out: m.csv, line 4: layout dp2 tp8 pp1 cp1 ep1 vpp1 mbs1 rc=none sp do: dp(2) * "
        "tp(8) * pp(1) * cp(1) = 16 != 8 devices of cluster ascend",
        "left out: m.csv, line 5: layout dp8 tp1 pp1 cp1 ep1 vpp1 mbs3 rc=none do: "
        "micro_batch(3) * dp(8) = 24 does not divide global_batch_size=256",
    ]


def _seconds(job: Job, layout: Layout) -> float:
    return catalog.load_simulator("analytical").simulate(job, layout).step_time_s
