"""Calibration: the fit on rows the simulator made itself, the command, and bad input."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from autotune import catalog
from autotune import dataset
from autotune.calibrate import FitSettings
from autotune.calibrate import Run
from autotune.calibrate import calibrated_job
from autotune.calibrate import fit
from autotune.calibrate._command import _selected_rows
from autotune.calibrate._command import fit_settings
from autotune.config import CalibrateConfig
from autotune.config import load_config
from autotune.simulators import UserError
from autotune.simulators.calibrated import calibrated
from autotune.simulators.calibration import Calibration
from tests.autotune_tests.test_cli import run
from tests.dataset_tests._tables import write

TRUTH = {
    "matmul_efficiency": 0.7,
    "memory_efficiency": 0.8,
    "host_overhead": 1.6,
    "memory_factor": 1.08,
    "memory_constant_gib": 3.0,
}


def _settings() -> FitSettings:
    settings = fit_settings(load_config(CalibrateConfig, ["data=x", "name=y"]).calibrate)
    return FitSettings(**{**_fields(settings), "bootstrap_samples": 0})


def _analytical(model: str, cluster: str, *overrides: str) -> catalog.PricedJob:
    """The catalog job ``model`` on ``cluster``, priced by the analytical simulator."""
    job = catalog.load_job(model, cluster, list(overrides))
    return catalog.PricedJob(job=job, simulator=catalog.load_simulator("analytical"))


def _fields(settings: FitSettings) -> dict[str, object]:
    return {k: getattr(settings, k) for k in settings.__dataclass_fields__}


@pytest.fixture(scope="module")
def synthetic() -> list[Run]:
    """Rows priced by the analytical simulator itself with perturbed constants."""
    table = dataset.load_public(["vtrain", "simumax"])
    specs = dataset.table_specs(table)
    picked = np.random.default_rng(0).choice(len(specs), 48, replace=False)
    truth = calibrated(
        catalog.load_simulator("analytical"), Calibration(simulator="analytical", factors=TRUTH)
    )
    runs = []
    for i in picked:
        p = truth.simulate(*specs[i])
        runs.append(
            Run(
                specs=specs[i],
                status="ok",
                step_time_s=p.step_time_s,
                peak_memory_gib=p.peak_gib("device"),
                peak_memory_measure="device",  # the whole prediction, reserved memory and all
                group=str(table["scenario"][i]),
            )
        )
    return runs


@pytest.mark.slow
def test_the_fit_recovers_known_factors(synthetic: list[Run]) -> None:
    result = fit(catalog.load_simulator("analytical"), synthetic, _settings())
    factors = result.calibration.factors
    for name in ("matmul_efficiency", "host_overhead", "memory_factor"):
        assert factors[name] == pytest.approx(TRUTH[name], rel=0.05), name
    # Memory-bound kernels are a small share of these rows' time (GEMMs, attention and the host
    # floor set it), so the prior toward 1 keeps this factor a little above the truth: 0.84
    # with the exact solver too (relinearize=0).
    assert factors["memory_efficiency"] == pytest.approx(TRUTH["memory_efficiency"], rel=0.07)
    assert factors["memory_constant_gib"] == pytest.approx(3.0, abs=0.1)
    assert result.rms_after < 0.03 < 0.2 < result.rms_before
    assert result.calibration.memory_margin == pytest.approx(0.0, abs=0.01)


def test_one_row_moves_the_factors_a_little(synthetic: list[Run]) -> None:
    settings = _settings()
    result = fit(catalog.load_simulator("analytical"), synthetic[:1], settings)
    assert result.rms_after > 0.4 * result.rms_before  # the prior holds: the row stays off
    for name, value in result.calibration.factors.items():
        if name.endswith("_overlap"):
            assert value <= 2 * settings.prior[name]
        elif name != "memory_constant_gib":
            assert abs(math.log(value)) <= 2 * settings.prior[name], name
    assert any("priors keep the factors" in note for note in result.notes)


def test_intervals_bracket_the_fit(synthetic: list[Run]) -> None:
    settings = FitSettings(**{**_fields(_settings()), "bootstrap_samples": 20})
    result = fit(catalog.load_simulator("analytical"), synthetic[:12], settings)
    for name, (low, high) in result.intervals.items():
        value = result.calibration.factors[name]
        assert low * (1 - 1e-3) - 1e-6 <= value <= high * (1 + 1e-3) + 1e-6, name


def test_a_peak_is_compared_with_what_its_measure_counts(synthetic: list[Run]) -> None:
    # the allocator's reserved peak: the tensors with fragmentation and the cached blocks,
    # not the runtime's part; read as the tensors alone, it would move the memory factor
    truth = calibrated(
        catalog.load_simulator("analytical"), Calibration(simulator="analytical", factors=TRUTH)
    )
    runs = [
        dataclasses.replace(
            run,
            peak_memory_gib=truth.simulate(*run.specs).peak_gib("reserved"),
            peak_memory_measure="reserved",
        )
        for run in synthetic[:12]
    ]
    simulator = catalog.load_simulator("analytical")
    reserved = fit(simulator, runs, _settings()).calibration.factors["memory_factor"]
    assert reserved == pytest.approx(TRUTH["memory_factor"], rel=0.02)
    misread = [dataclasses.replace(run, peak_memory_measure="allocated") for run in runs]
    allocated = fit(simulator, misread, _settings()).calibration.factors["memory_factor"]
    assert allocated > TRUTH["memory_factor"] * 1.03


def test_out_of_memory_rows_tighten_the_memory_model(synthetic: list[Run]) -> None:
    run = synthetic[0]
    predicted = catalog.load_simulator("analytical").simulate(*run.specs).memory_gib
    cluster = run.specs[0].cluster
    small = cluster.__class__(
        **{
            **{f: getattr(cluster, f) for f in cluster.__dataclass_fields__},
            "device": cluster.device.__class__(
                **{
                    **{f: getattr(cluster.device, f) for f in cluster.device.__dataclass_fields__},
                    "memory_gib": predicted * 1.05,
                }
            ),
        }
    )
    job, layout = run.specs
    oom = Run(specs=(dataclasses.replace(job, cluster=small), layout), status="oom")
    result = fit(catalog.load_simulator("analytical"), [oom], _settings())
    assert result.calibration.factors["memory_factor"] > 1.0
    assert any("no row ran" in note for note in result.notes)


def _csv(tmp_path: Path, *rows: dict[str, object]) -> Path:
    return write(tmp_path / "runs.csv", *rows)


def _layouts() -> list[dict[str, object]]:
    return [
        {"scenario": "s1", "tp": 8, "dp": 1, "step_time_s": 1.2},
        {"scenario": "s1", "tp": 4, "dp": 2, "step_time_s": 1.0},
        {"scenario": "s1", "tp": 2, "dp": 4, "step_time_s": 0.9, "peak_memory_gib": 30.0},
    ]


def test_without_a_bootstrap_no_interval_is_told(tmp_path: Path) -> None:
    """``calibrate.bootstrap_samples=0`` resamples nothing: no zero-width interval is shown
    or written as if it were one."""
    data = _csv(tmp_path, *_layouts())
    out = tmp_path / "cal.yaml"
    args = [f"data={data}", "name=toy", f"out={out}", "calibrate.bootstrap_samples=0"]
    proc = run("autotune.calibrate", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.splitlines()
    assert table[1].endswith("value   no interval (bootstrap_samples=0)")
    assert not any("[" in line for line in table[2:9])
    assert "intervals: {}" in out.read_text()


def test_calibrate_writes_a_file_that_loads_and_applies(tmp_path: Path) -> None:
    data = _csv(tmp_path, *_layouts())
    out = tmp_path / "cal.yaml"
    proc = run(
        "autotune.calibrate",
        f"data={data}",
        "name=toy",
        f"out={out}",
        "output=json",
        "calibrate.bootstrap_samples=5",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["cluster"] == "a100" and payload["simulator"] == "analytical"
    assert [r["row"] for r in payload["rows"]] == ["runs line 2", "runs line 3", "runs line 4"]
    assert "priors keep the factors" in proc.stderr  # 3 rows for 7 factors: said so
    loaded = catalog.load_calibration(str(out))
    assert loaded.factors == pytest.approx(payload["factors"], rel=1e-5)
    assert loaded.cluster == "a100" and loaded.name == "toy"
    # the three layouts of the one job, each remembered (decision 0065), read back as written
    ((job, remembered),) = loaded.layouts.items()
    assert remembered == payload["layouts"][job] and len(remembered) == 3
    assert sum(remembered.values()) == pytest.approx(0.0, abs=1e-5)  # against the job's mean
    calibrated_, margin = calibrated_job(
        _analytical("llama2_7b", "a100", "cluster.num_nodes=1"), str(out), None
    )
    assert calibrated_.simulator.calibration.name == "toy"
    # One measured peak is no 95th percentile: the file has no margin, the stack's applies.
    assert loaded.memory_margin is None and payload["memory_margin"] is None
    assert "1 row(s) with a measured peak or an out-of-memory run, fewer than the 20" in (
        proc.stderr
    )
    assert "megatron_core runs" in margin.source


def test_a_calibrations_own_margin_says_the_share_of_the_device_it_keeps_free() -> None:
    own = Calibration(simulator="analytical", cluster="a100", name="mine", memory_margin=0.25)
    _, margin = calibrated_job(_analytical("llama2_7b", "a100"), own, None)
    assert margin.value == 0.25  # a layout fits up to 80 / 1.25 = 64 GiB: 16 GiB, 20%, free
    assert margin.text() == (
        "memory margin 25.0% (20.0% of the device free: 95th percentile on calibration 'mine')"
    )


def test_rows_of_another_cluster_are_refused_by_line(tmp_path: Path) -> None:
    data = _csv(tmp_path, *_layouts(), {"scenario": "s2", "cluster": "h100", "step_time_s": 0.5})
    proc = run("autotune.calibrate", f"data={data}", "name=x", "rows.cluster=a100", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: " + str(data) + ": 1 row(s) of another cluster than a100 (h100): runs line 5; "
        "keep only rows of cluster a100"
    )
    proc = run("autotune.calibrate", f"data={data}", "name=x", cwd=tmp_path)
    assert proc.returncode == 2 and "rows of 2 clusters: a100 (runs line 2" in proc.stderr


def test_rows_of_another_model_are_refused(tmp_path: Path) -> None:
    data = _csv(tmp_path, *_layouts(), {"scenario": "s2", "model": "other", "step_time_s": 0.5})
    proc = run("autotune.calibrate", f"data={data}", "name=x", "rows.model=toy", cwd=tmp_path)
    assert proc.returncode == 2 and "another model than toy (other): runs line 5" in proc.stderr


def _history(data: Path, *overrides: str) -> list[tuple[str, str]]:
    """(cluster, model) of each row ``rows.*`` keeps of ``data``."""
    config = load_config(CalibrateConfig, [f"data={data}", "name=x", *overrides])
    table = _selected_rows(config, dataset.load_data(config.data))
    return list(zip(table["cluster"], table["model"], strict=True))


def test_a_clusters_history_without_the_planned_model_is_what_is_fitted(tmp_path: Path) -> None:
    data = _csv(
        tmp_path,
        *_layouts(),
        {"scenario": "s2", "model": "other", "step_time_s": 0.5},
        {"scenario": "s3", "model": "other", "cluster": "h100", "step_time_s": 0.4},
    )
    assert _history(data, "rows.hardware=a100", "rows.exclude_model=toy") == [("a100", "other")]
    assert len(_history(data, "rows.exclude_model=[other]")) == 3  # the toy rows on a100
    assert _history(data, "rows.hardware=h100") == [("h100", "other")]
    with pytest.raises(UserError, match="cluster h200 not in .*; there: a100, h100"):
        _history(data, "rows.hardware=h200")
    with pytest.raises(UserError, match="rows.exclude_model: no row of .* is of nope; there: oth"):
        _history(data, "rows.exclude_model=nope")
    with pytest.raises(UserError, match="no row of another model \\(other\\): nothing to fit on"):
        _history(data, "rows.hardware=h100", "rows.exclude_model=other")
    with pytest.raises(UserError, match="names toy more than once"):
        _history(data, "rows.exclude_model=[toy,toy]")


def test_only_failed_rows_is_an_error_and_only_oom_rows_a_note(tmp_path: Path) -> None:
    data = _csv(tmp_path, {"status": "error", "step_time_s": None})
    proc = run("autotune.calibrate", f"data={data}", "name=x", cwd=tmp_path)
    assert proc.returncode == 2 and "no row to calibrate on" in proc.stderr
    data = _csv(tmp_path, {"status": "oom", "step_time_s": None})
    out = tmp_path / "oom.yaml"
    proc = run("autotune.calibrate", f"data={data}", "name=x", f"out={out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "no row ran: the step-time factors stay at their prior" in proc.stderr


def test_a_calibration_for_another_simulator_or_cluster_is_one_error_line(tmp_path: Path) -> None:
    out = tmp_path / "cal.yaml"
    out.write_text("simulator: analytical\ncluster: a100\nfactors: {host_overhead: 1.2}\n")
    proc = run(
        "autotune.simulate",
        "model=llama2_7b",
        "cluster=a100",
        "cluster.num_nodes=1",
        "simulator=hierarchical",
        f"calibration={out}",
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: calibration 'cal' is for the analytical simulator; this job uses hierarchical "
        "(simulator=analytical, or calibrate hierarchical)"
    ]
    with pytest.raises(UserError, match="is for cluster a100; this job runs on h100"):
        calibrated_job(_analytical("llama2_7b", "h100"), str(out), None)
    out.write_text("simulator: analytical\nfactors: {speed: 2}\n")
    with pytest.raises(UserError, match="unknown factor"):
        catalog.load_calibration(str(out))
    # a misspelt key would leave the factors out of the calibration; the record of a fit stays
    out.write_text("simulator: analytical\nfactorz: {host_overhead: 1.2}\n")
    with pytest.raises(UserError, match="unknown key\\(s\\) 'factorz'; a calibration holds"):
        catalog.load_calibration(str(out))
    out.write_text("simulator: analytical\nfactors: {}\noverrides: {x: 1}\nfit: {rows: 3}\n")
    assert catalog.load_calibration(str(out)).factors == {}
    # what a history remembered must be a mapping of jobs to layouts to log factors in range
    for layouts, said in [
        ("[1, 2]", "layouts must map job keys to mappings of layouts"),
        ("{job: 0.1}", "layouts\\['job'\\]=0.1"),
        ("{job: {dp8 tp1: 9.0}}", "a layout's log factor within"),
    ]:
        out.write_text(f"simulator: analytical\nlayouts: {layouts}\n")
        with pytest.raises(UserError, match=said):
            catalog.load_calibration(str(out))


def test_a_step_time_in_milliseconds_is_refused_against_its_prediction(tmp_path: Path) -> None:
    """Within the bounds of a step (1 ms to a day), but a thousand times its prediction."""
    rows = _layouts()
    rows[1] = {**rows[1], "step_time_s": 1000.0}  # line 3: 1 s written in milliseconds
    data = _csv(tmp_path, *rows)
    proc = run("autotune.calibrate", f"data={data}", "name=x", "out=x.yaml", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert "1 measured step time(s) more than 30 times from the analytical" in line
    assert "runs line 3: 1000 s measured" in line
    assert not (tmp_path / "x.yaml").exists()


def test_rows_fitted_are_drawn_from_every_scenario_not_the_first_ones() -> None:
    """With more scenarios than ``max_rows``, each fitted row comes from its own scenario,
    drawn from the whole table: the first ``max_rows`` scenarios of the table are not the
    sample (they were, and the benchmark's leave-one-source-out fits then saw only the sources
    that come first by name)."""
    from autotune.calibrate import row_runs
    from autotune.calibrate._fit import _even_subsample

    table = dataset.load_public(["vtrain"])
    runs = [r for r in row_runs(table, dataset.table_specs(table)) if r is not None]
    order = list(dict.fromkeys(r.group for r in runs))  # scenarios in table order
    chosen = _even_subsample(runs, 20, seed=0)
    groups = [runs[i].group for i in chosen]
    assert len(set(groups)) == 20
    assert max(order.index(g) for g in groups) >= 74  # not only the first 20 of 148
    assert _even_subsample(runs, 20, seed=0) == chosen  # the seed decides
    # more rows than scenarios: every scenario gives one before any gives two
    chosen = _even_subsample(runs, 200, seed=0)
    assert {runs[i].group for i in chosen} == set(order)
    assert _even_subsample(runs, len(runs), seed=0) == list(range(len(runs)))


def test_a_fit_remembers_each_layout_against_the_other_layouts_of_its_job(
    tmp_path: Path,
) -> None:
    """Decision 0065, by hand: each layout's log(measured / calibrated prediction) less its
    job's mean, averaged over the jobs of the same key (two models that differ in depth alone);
    a job of one layout says nothing of how layouts differ and is left out."""
    from autotune.calibrate import row_runs
    from autotune.simulators.calibrated import CalibratedSimulator
    from autotune.simulators.calibrated import job_key

    rows = [
        {"scenario": "a", "model": "toy_a", "tp": 8, "dp": 1, "step_time_s": 1.4},
        {"scenario": "a", "model": "toy_a", "tp": 4, "dp": 2, "step_time_s": 1.1},
        {
            "scenario": "b",
            "model": "toy_b",
            "num_layers": 12,
            "tp": 8,
            "dp": 1,
            "step_time_s": 2.0,
        },
        {
            "scenario": "b",
            "model": "toy_b",
            "num_layers": 12,
            "tp": 4,
            "dp": 2,
            "step_time_s": 1.7,
        },
        {"scenario": "c", "model": "toy_c", "hidden_size": 2048, "step_time_s": 1.0},
    ]
    table = dataset.load_data(str(_csv(tmp_path, *rows)))
    runs = [r for r in row_runs(table, dataset.table_specs(table)) if r is not None]
    simulator = catalog.load_simulator("analytical")
    calibration = fit(simulator, runs, _settings(), layouts=True).calibration
    factors_only = CalibratedSimulator(simulator, calibration.with_layouts({}))

    def within(group: str) -> list[float]:
        residuals = [
            math.log(r.step_time_s / factors_only.simulate(*r.specs).step_time_s)
            for r in runs
            if r.group.endswith(group)
        ]
        return [value - sum(residuals) / len(residuals) for value in residuals]

    (key,) = calibration.layouts  # toy_a and toy_b share theirs; toy_c's job had one layout
    assert key == job_key(runs[0].specs[0]) == job_key(runs[2].specs[0])
    tp8, tp4 = (runs[i].specs[1].describe() for i in (0, 1))
    twins = np.mean([within("/a"), within("/b")], axis=0)
    assert calibration.layouts[key] == pytest.approx({tp8: twins[0], tp4: twins[1]}, rel=1e-9)
    assert job_key(runs[4].specs[0]) != key


def test_simulate_says_when_the_calibrations_history_priced_the_layout(tmp_path: Path) -> None:
    """A layout the history measured at this job's key is priced with what it ran, and the
    text says so; another layout of the job is not."""
    from autotune.catalog import priced_job_from_config
    from autotune.config import AutotuneConfig
    from autotune.config import fixed_layout_values
    from autotune.simulators import Layout
    from autotune.simulators.calibrated import job_key

    overrides = ["model=llama2_7b", "cluster=a100", "cluster.num_nodes=1", "parallel.tp=2"]
    config = load_config(AutotuneConfig, overrides)
    job = priced_job_from_config(config).job
    layout = Layout.resolve(job.cluster.num_devices, **fixed_layout_values(config.parallel))
    out = tmp_path / "cal.yaml"
    out.write_text(
        f"simulator: analytical\nlayouts:\n  '{job_key(job)}': {{'{layout.describe()}': 0.1}}\n"
    )
    said = []
    for tp in (2, 4):
        proc = run(
            "autotune.simulate",
            *overrides[:-1],
            f"parallel.tp={tp}",
            f"calibration={out}",
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        said.append("the calibration's history: this layout ran 1.105x" in proc.stdout)
    assert said == [True, False]
