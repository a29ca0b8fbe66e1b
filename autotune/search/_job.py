"""One search, end to end: space -> pricing or an Optuna study -> rerank -> output -> MLflow.

The mode is ``grid`` (price every valid layout: the answer is the simulator's optimum) when
that fits ``search.grid_budget_s`` (``search.sampler=auto``, the default) or is asked for.
Under ``auto``, a simulator too slow for the grid (the hierarchical one) gets ``screen``
instead where the analytical simulator can price every layout within the budget: it does, and
the chosen simulator re-prices the best ``search.rerank_top``, which finds the chosen
simulator's own optimum where an Optuna sampler of the same cost misses it by several percent
(``benchmarks/bench_autotune.py``). Otherwise an Optuna sampler drives the search, and every
valid layout is still priced beside it when the budget allows, so the answer is always the
best layout the tool knows of, and the sampler's own gap to it is reported (``Outcome.gap``).
With ``search.rerank``, a finer simulator re-prices the best ``search.rerank_top`` layouts in
``search.workers`` processes. SIGINT and SIGTERM stop the search after the trial or the layout
in flight: the best layout so far is printed and recorded, and the command exits 130 or 143 (a
second signal interrupts at once).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from optuna.storages import BaseStorage

from autotune import _signals
from autotune import catalog
from autotune.calibrate import calibrated_job
from autotune.calibrate import plan_probes
from autotune.calibrate import probe_round
from autotune.calibrate import record_round
from autotune.catalog import PricedJob
from autotune.catalog import priced_job_from_config
from autotune.cli import Output
from autotune.config import AutotuneConfig
from autotune.config import SearchConfig
from autotune.config import config_yaml
from autotune.config import fixed_layout_values
from autotune.progress import Progress
from autotune.progress import duration
from autotune.search._launch import check_launch_dir
from autotune.search._launch import write_search_config
from autotune.search._launch import write_top_launch_files
from autotune.search._outcome import Outcome
from autotune.search._outcome import Rerank
from autotune.search._outcome import Timings
from autotune.search._outcome import ranked
from autotune.search._outcome import sampler_gap
from autotune.search._output import emit_outcome
from autotune.search._price import Evaluator
from autotune.search._price import price_in_processes
from autotune.search._record import record_search
from autotune.search._space import SearchSpace
from autotune.search._space import build_space
from autotune.search._storage import check_storage
from autotune.search._storage import open_storage
from autotune.search._study import POLISHED
from autotune.search._study import SAMPLERS
from autotune.search._study import StopFlag
from autotune.search._study import add_priced_trials
from autotune.search._study import open_study
from autotune.search._study import optimize
from autotune.search._study import sample
from autotune.search._workers import StudyPlace
from autotune.search._workers import in_memory_copy
from autotune.search._workers import shared_study
from autotune.search._workers import start_workers
from autotune.search._workers import stop_workers
from autotune.simulators import UserError
from autotune.simulators.calibrated import calibrated
from autotune.simulators.registry import SIMULATOR_NAMES
from autotune.simulators.specs import CARD_FIELDS
from autotune.tracking import check_tracking

__all__ = ["MODES", "run_search_job", "search_job", "search_outputs"]

log = logging.getLogger("autotune")
MODES = ("auto", "grid", "screen", *SAMPLERS)
SCREENING = "analytical"  # the simulator that screens every layout for a slower one
_SAMPLE = 24  # layouts priced to measure the simulator's cost per layout


def search_outputs(config: AutotuneConfig) -> tuple[Output, ...]:
    """What a search writes that another job of a sweep could write too (``-m``)."""
    launch = (
        ()
        if config.launch_dir is None
        else (Output("launch_dir", config.launch_dir, True, files=("config.yaml",)),)
    )
    probes = (Output("probes_out", config.probes_out),) if config.probes > 0 else ()
    return launch + probes


def run_search_job(config: AutotuneConfig) -> None:
    """Search, print the table (or the JSON object), record in MLflow (a signal stops the
    search; ``run_command`` then exits 130/143)."""
    started = time.perf_counter()
    # Every check before any work and before anything is written: a refused search creates
    # nothing (the study's storage is created by search_job once the space is built).
    _check(config.search)
    check_tracking(config.tracking)
    check_storage(config.search.storage, config.tracking)
    check_launch_dir(config.launch_dir, config.search.top_k)
    priced, margin = calibrated_job(
        priced_job_from_config(config), config.calibration, config.search.memory_margin
    )
    plan = plan_probes(config, priced)
    stop = StopFlag()
    timings = Timings()

    def stopping(number: int) -> None:
        name = _signals.signal_name(number)
        log.warning(f"\n{name}: stopping after the layout in flight (another signal: at once)")
        stop.set(number)

    with _signals.deferred(stopping):
        outcome = search_job(config, priced, stop)
    log.info(margin.text())
    rounds = None
    if plan is not None and not outcome.stopped:
        rounds = probe_round(config, priced, outcome.ranked, plan)
    written, problem = write_top_launch_files(
        config.launch_dir, priced.job, outcome, config.search.top_k
    )
    # the config says what the launch files were made for: not written beside those of another
    config_file, unwritten = (
        write_search_config(config.launch_dir, config_yaml(config))
        if problem is None
        else (None, None)
    )
    problems = [
        p for p in (problem, unwritten, rounds.problem if rounds else None) if p is not None
    ]
    outcome = dataclasses.replace(
        outcome,
        launch_files=tuple(map(str, written)),
        config_file=None if config_file is None else str(config_file),
    )
    timings.search_s = time.perf_counter() - started
    recorded = record_search(config, priced, outcome, timings)
    if rounds is not None:
        record_round(config, priced, rounds)
    timings.record_s = recorded.seconds
    timings.total_s = time.perf_counter() - started
    emit_outcome(config, priced, outcome, timings, recorded, rounds)
    if outcome.stopped:  # run_command says which signal stopped it and exits 130/143
        for problem in problems:
            log.warning(f"warning: {problem}")
    elif problems:  # after the result: a file that could not be written does not lose it
        raise UserError("; ".join(problems))


def _screens(priced: PricedJob) -> bool:
    """Whether ``priced``'s simulator is the one that screens (the analytical)."""
    return priced.simulator.name == SCREENING


def _check(search: SearchConfig) -> None:
    """Refuse search settings that name nothing (before any work; the numbers are checked by
    ``SearchConfig.check``)."""
    if search.sampler not in MODES:
        raise UserError(f"unknown sampler {search.sampler!r}; available: {', '.join(MODES)}")
    if search.rerank is not None and search.rerank not in SIMULATOR_NAMES:
        raise UserError(
            f"unknown search.rerank simulator {search.rerank!r}; available: "
            f"{', '.join(SIMULATOR_NAMES)} (or null)"
        )


# size: the search's stages in order (space, study, re-rank, probes, outputs), each one call
def search_job(
    config: AutotuneConfig, priced: PricedJob, stop: StopFlag, storage: BaseStorage | None = None
) -> Outcome:
    """The search of ``config`` for ``priced`` (no output, no MLflow record), in ``storage``
    (when None: ``search.storage``, opened once the space is built, or in memory)."""
    job = priced.job
    search = config.search
    space = build_space(job, search, fixed_layout_values(config.parallel))
    evaluate = Evaluator(priced)
    sample = list(space.layouts[:: max(1, space.size // _SAMPLE)])
    # The analytical simulator's one-time work is a few schedule runs per pipeline pattern,
    # small next to the budget: its grid costs what a warm sample does, layout by layout.
    grid_s = evaluate.seconds_per_layout(sample, _screens(priced), stop.__bool__) * space.size
    mode = search.sampler
    screen = None
    if mode == "auto":
        mode = "grid" if grid_s <= search.grid_budget_s else "tpe"
        if mode == "tpe" and search.rerank is None and not _screens(priced):
            screen = Evaluator(_screening_job(priced))
            if screen.seconds_per_layout(sample, warm=True) * space.size <= search.grid_budget_s:
                mode = "screen"
    elif mode == "screen":
        screen = Evaluator(_screening_job(priced))
    log.info(
        f"{job.model.name} on {job.cluster.name} ({job.cluster.num_nodes} x "
        f"{job.cluster.devices_per_node} = {job.cluster.num_devices} devices), seq "
        f"{job.train.seq_len}, global batch {job.train.global_batch_size}\n"
        f"{job.train.describe()}\n{space.size} valid layouts; {priced.simulator.name} simulator, "
        + _mode_text(mode, search)
    )
    name = search.study_name or _study_name(priced, mode)
    fingerprint = _fingerprint(config, priced, space)
    parallel = mode not in ("grid", "screen") and search.workers > 1
    with shared_study(search.storage, parallel) as url:
        if storage is None and url is not None:  # made now, once every check has passed
            storage = open_storage(url)
        study = open_study(storage, name, mode, search.seed, fingerprint)
        place = StudyPlace(url, name, mode, fingerprint) if parallel and url else None
        screened = None
        if mode == "screen":
            assert screen is not None
            screened, stopped = _screen(config, priced, space, screen, study, stop)
            pairs, trials = screened.reranked, len(study.trials)
        else:
            pairs, trials, stopped = _run(
                mode, config, priced, space, evaluate, study, stop, place
            )
        if parallel and search.storage is None:
            study = in_memory_copy(study)
    sampled = list(pairs) if mode in SAMPLERS else []  # the sampler's own, for its gap
    # Exhaustive: a grid, or a sampler whose trials happened to price every layout.
    exhaustive = (mode == "grid" and not stopped) or len(dict(sampled)) == space.size
    if mode != "screen" and not exhaustive and not stopped and grid_s <= search.grid_budget_s:
        log.info(f"  pricing all {space.size} layouts beside the search (~{duration(grid_s)})")
        pairs += list(zip(space.layouts, evaluate.price(space.layouts), strict=True))
        exhaustive = True
    if not pairs:  # stopped before the first trial: nothing to show, the signal says why
        _signals.interrupt(stop.signal)
    gap = None
    if mode in SAMPLERS:
        if exhaustive:
            gap = sampler_gap(mode, sampled, pairs)
        else:
            gap = sampler_gap(mode, sampled, None, _gap_unknown(search, space, grid_s, stopped))
    outcome = Outcome(
        mode=mode,
        valid=space.size,
        evaluated=pairs,
        ranked=ranked(pairs),
        exhaustive=exhaustive,
        trials=trials,
        stopped=stopped,
        study=study,
        rerank=screened if screened is not None and not stopped else None,
        gap=gap,
    )
    if search.rerank and not stopped:
        rerank = _rerank(search, priced, outcome, stop)
        if rerank is None:
            log.warning(f"  stopped: the {search.rerank} simulator did not re-rank")
            return dataclasses.replace(outcome, stopped=True)
        rest = outcome.ranked[len(rerank.reranked) :]  # beyond the re-ranked: screening order
        outcome = dataclasses.replace(outcome, rerank=rerank, ranked=rerank.reranked + rest)
    return outcome


def _run(
    mode: str,
    config: AutotuneConfig,
    priced: PricedJob,
    space: SearchSpace,
    evaluate: Evaluator,
    study: Any,
    stop: StopFlag,
    place: StudyPlace | None,
) -> tuple[list[Any], int, bool]:
    """(layout, prediction) pairs evaluated, complete trials, whether a signal stopped it.

    With ``place``, ``search.workers - 1`` more processes sample the same study meanwhile.
    """
    search = config.search
    if mode == "grid":
        progress = Progress(f"{evaluate.simulator.name}", space.size, unit="layouts")
        pairs = evaluate.priced(
            space.layouts, lambda done, _: progress.update(done), stop.__bool__
        )
        if not study.trials and not stop:  # a resumed grid study already holds them
            add_priced_trials(study, space, ranked(pairs)[: search.n_trials], origin="grid")
        return pairs, len(study.trials), bool(stop)
    polish = search.polish if mode in POLISHED else 0.0
    workers = []
    sampled = search.n_trials - int(search.n_trials * polish)  # the rest polishes
    if place is not None:
        workers = start_workers(config, priced, place, search.workers - 1, sampled)
        log.info(f"  {search.workers} workers sample the study {place.study_name!r}")
    progress = Progress("trials", search.n_trials, unit="trials")

    def update(done: int, _: Any) -> None:
        progress.update(done)

    try:  # the polish starts once no worker has a trial in flight: it then spends exactly
        if workers:  # what is missing
            sample(
                study,
                space,
                evaluate,
                n_trials=sampled,
                polish_fraction=0.0,
                stop=stop,
                progress=update,
            )
    except BaseException:  # a second signal, or a bug: the workers stop too
        stop_workers(workers, stopped=True)
        raise
    stop_workers(workers, stopped=bool(stop))
    result = optimize(
        study,
        space,
        evaluate,
        n_trials=search.n_trials,
        polish_fraction=polish,
        stop=stop,
        progress=update,
    )
    pairs = [(layout, prediction) for _, layout, prediction in result.evaluated]
    return pairs, len(result.evaluated), bool(stop)


def _gap_unknown(search: SearchConfig, space: SearchSpace, grid_s: float, stopped: bool) -> str:
    """Why a sampler's gap to the exhaustive optimum is unknown, should not every layout be
    priced."""
    if stopped:
        return "the search was stopped before every layout was priced"
    return (
        f"pricing all {space.size} layouts would take ~{duration(grid_s)}, above "
        f"search.grid_budget_s={search.grid_budget_s:g} s"
    )


def _mode_text(mode: str, search: SearchConfig) -> str:
    if mode == "grid":
        return "every layout priced (grid)"
    if mode == "screen":
        return (
            f"every layout screened by the {SCREENING} simulator, the best "
            f"{search.rerank_top} priced again (screen)"
        )
    return f"{mode} sampler"


def _screening_job(priced: PricedJob) -> PricedJob:
    """``priced``'s job priced by the screening simulator, with the same memory margin (so that a
    layout fits the screen as it fits the search)."""
    margin = priced.simulator.memory_margin
    screening = calibrated(catalog.load_simulator(SCREENING), None, margin)
    return dataclasses.replace(priced, simulator=screening)


def _screen(
    config: AutotuneConfig,
    priced: PricedJob,
    space: SearchSpace,
    screen: Evaluator,
    study: Any,
    stop: StopFlag,
) -> tuple[Rerank, bool]:
    """Every layout priced by ``screen``, the best ``search.rerank_top`` by ``priced.simulator``
    (in ``search.workers`` processes); the re-priced layouts become the study's trials. A
    signal during the screen leaves its best layouts, by the screening simulator, as
    ``reranked`` (and says so)."""
    search = config.search
    progress = Progress(SCREENING, space.size, unit="layouts")
    pairs = screen.priced(space.layouts, lambda done, _: progress.update(done), stop.__bool__)
    screened = ranked(pairs)[: search.rerank_top]
    finer = None
    if not stop:
        log.info(
            f"  pricing the best {len(screened)} with the {priced.simulator.name} simulator in "
            f"{search.workers} process(es)"
        )
        finer = price_in_processes(
            priced, [lay for lay, _ in screened], search.workers, stop.__bool__
        )
    if finer is None:  # stopped
        log.warning(f"  stopped: the best layouts of the {SCREENING} screen, not re-priced")
        return Rerank(SCREENING, screened, screened), True
    reranked = ranked(zip((lay for lay, _ in screened), finer, strict=True))
    if not study.trials:  # a resumed screen study already holds them
        add_priced_trials(study, space, reranked, origin="screen")
    return Rerank(priced.simulator.name, screened, reranked), bool(stop)


def _rerank(
    search: SearchConfig, priced: PricedJob, outcome: Outcome, stop: StopFlag
) -> Rerank | None:
    """The screened best layouts priced again by ``search.rerank`` in parallel processes (None
    when a signal stopped it)."""
    assert search.rerank is not None
    screened = outcome.ranked[: search.rerank_top]
    finer = dataclasses.replace(priced, simulator=catalog.load_simulator(search.rerank))
    started = time.perf_counter()
    log.info(
        f"  re-ranking the best {len(screened)} layouts with the {search.rerank} simulator "
        f"in {search.workers} process(es)"
    )
    predictions = price_in_processes(
        finer, [lay for lay, _ in screened], search.workers, stop.__bool__
    )
    if predictions is None:
        return None
    log.info(f"  re-ranked in {duration(time.perf_counter() - started)}")
    reranked = ranked(zip((lay for lay, _ in screened), predictions, strict=True))
    return Rerank(simulator=search.rerank, screened=screened, reranked=reranked)


def _study_name(priced: PricedJob, mode: str) -> str:
    job = priced.job
    cluster = job.cluster
    return f"{job.model.name}-{cluster.name}-{cluster.num_nodes}n-{priced.simulator.name}-{mode}"


def _calibration_name(priced: PricedJob) -> str | None:
    calibration = priced.simulator.calibration
    return None if calibration is None or not calibration.factors else calibration.name


def _fingerprint(config: AutotuneConfig, priced: PricedJob, space: SearchSpace) -> dict[str, Any]:
    """What a stored study is bound to: the job, its simulator and the searched space."""
    job = priced.job
    return {
        "model": {  # what the simulators price: card facts change the launch files only
            key: value
            for key, value in dataclasses.asdict(job.model).items()
            if key not in CARD_FIELDS
        },
        "cluster": job.cluster.name,
        "devices": job.cluster.num_devices,
        "train": {  # every setting of the step: each changes what a layout costs
            field.name: getattr(job.train, field.name)
            for field in dataclasses.fields(job.train)
            if field.name != "framework"
        }
        | {"framework": job.train.framework.name, "release": job.train.framework.release},
        "simulator": priced.simulator.name,
        "calibration": _calibration_name(priced),
        "parallel": {k: str(v) for k, v in fixed_layout_values(config.parallel).items()},
        "valid_layouts": space.size,
    }
