"""One round of the search's probe loop: feed ``measured=`` back, pick, choose ``probes=``.

Every layout the search priced is a candidate. What the round knows of each is its belief
about the step time (:mod:`autotune.calibrate._residuals`: the search's prediction moved by
what the measured layouts say of this job and of the field values they share, with the
residual model of the job's simulator on the shipped rows as the prior) and its chance of
fitting (:mod:`autotune.calibrate._memory`: the job's memory margin read as a distribution,
moved by what the measured rows say of memory: an out-of-memory run, a measured peak, a run
within the device's memory). The pick and the next probes are
:mod:`autotune.calibrate._probe`'s; the next probes are chosen only while a probe is likely
to improve on the best measured, and the round says when it stops. The simulator is not run
again: the search's predictions are the round's.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from collections import ChainMap
from collections.abc import Sequence

import numpy as np

from autotune.calibrate._command import fit_settings
from autotune.calibrate._loop import ProbePlan
from autotune.calibrate._loop import ProbeRound
from autotune.calibrate._loop import probe_frame
from autotune.calibrate._memory import memory_belief
from autotune.calibrate._memory import observe
from autotune.calibrate._priors import given_widths
from autotune.calibrate._priors import shipped_priors
from autotune.calibrate._probe import Candidates
from autotune.calibrate._probe import Probed
from autotune.calibrate._probe import ProbeSettings
from autotune.calibrate._probe import next_probes
from autotune.calibrate._probe import outlook
from autotune.calibrate._probe import pick
from autotune.calibrate._residuals import layout_features
from autotune.calibrate._shares import step_shares
from autotune.catalog import PricedJob
from autotune.config import AutotuneConfig
from autotune.csv_files import write_csv
from autotune.report import launch_text
from autotune.report import layout_table
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import Prediction
from autotune.simulators import UserError
from autotune.simulators.calibrated import CalibratedSimulator
from autotune.simulators.files import write_failure

__all__ = ["probe_round"]

_WIDTH = 119  # the terminal output keeps within 120 columns


def _wrapped(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, width=_WIDTH, initial_indent=indent, subsequent_indent=indent * 2)


# size: one round in the order the user sees it: read, believe, pick, choose, write
def probe_round(
    config: AutotuneConfig,
    priced: PricedJob,
    ranked: Sequence[tuple[Layout, Prediction]],
    plan: ProbePlan,
) -> ProbeRound:
    """Feed ``measured=`` back (belief, pick) and choose up to ``probes=`` layouts.

    A CSV of the probes that cannot be written (a full disk) costs only the file: the round
    says why in ``problem``, and the command reports it after the result.

    Args:
        config: the search's config (``probes``, ``measured``, ``calibrate``).
        priced: the job, its simulator a :class:`CalibratedSimulator` (calibration and margin).
        ranked: every layout the search priced, best first, with its prediction.
        plan: the measured rows and where the probes go (:func:`plan_probes`).
    """
    job = priced.job
    assert isinstance(priced.simulator, CalibratedSimulator)
    simulator: CalibratedSimulator = priced.simulator
    priors = shipped_priors(simulator, given_widths(fit_settings(config.calibrate).prior))
    round_ = ProbeRound(model=priors.time, margin=simulator.memory_margin)
    predictions = dict(ranked)
    round_.measured, round_.notes = list(plan.measured), list(plan.notes)
    for lay, run in round_.measured:  # a measured layout the search did not price
        if lay not in predictions:
            predictions[lay] = simulator.simulate(*run.specs)
    seen = [
        observe(
            run,
            predictions[lay].memory_gib,
            predictions[lay].peak_gib(run.peak_memory_measure, run.peak_memory_rank),
            predictions[lay].device_memory_gib,
        )
        for lay, run in round_.measured
    ]
    round_.memory = memory_belief(simulator.memory_margin, priors.memory_common, seen)
    layouts = list(predictions)
    index = {lay: i for i, lay in enumerate(layouts)}
    chosen = [predictions[lay] for lay in layouts]
    # the shares are the search's simulator's own: a re-ranked layout's prediction is another's
    shares = step_shares(simulator, [(job, lay) for lay in layouts])
    candidates = Candidates(
        log_predicted=np.log([p.step_time_s for p in chosen]),
        features=layout_features(layouts, shares),
        memory_gib=np.array([p.memory_gib for p in chosen]),
        device_gib=np.array([p.device_memory_gib for p in chosen]),
        memory=round_.memory,
    )
    probed = Probed(
        {index[lay]: run.step_time_s for lay, run in round_.measured if run.ran},
        frozenset(index[lay] for lay, run in round_.measured if not run.ran),
    )
    view = outlook(priors.time, candidates, probed)
    round_.spread = math.sqrt(view.belief.scale / priors.time.scale(0.0, 0))
    margin = round_.memory.margin
    expected = [  # as the round believes it: the expected step time, the margin after it
        dataclasses.replace(
            p.retimed(float(t)),
            memory_capacity_gib=p.device_memory_gib / (1 + margin),
            detail=ChainMap({"memory_margin": margin}, p.detail),  # type: ignore[arg-type]
        )
        for p, t in zip(chosen, view.expected_s, strict=True)
    ]
    lines: list[str] = []
    if round_.measured:
        final = pick(view, candidates, probed)
        round_.final_pick = final
        round_.final = (layouts[final.index], expected[final.index])
        ruled_out = view.ruled_out
        round_.ranked = sorted(
            (
                (lay, expected[i])
                for i, lay in enumerate(layouts)
                if i not in probed.tried and not ruled_out[i]
            ),
            key=lambda item: (not item[1].fits, item[1].step_time_s),
        )
        round_.ruled_out = int(ruled_out.sum()) - len(probed.failed)
        lines += _fed_back_text(config, job, round_)
    if config.probes > 0:
        settings = ProbeSettings(
            stop_gain=config.calibrate.stop_gain,
            stop_probability=config.calibrate.stop_probability,
        )
        nxt = next_probes(priors.time, candidates, probed, config.probes, settings)
        round_.probes = [(layouts[i], expected[i]) for i in nxt.chosen]
        round_.values = [
            (float(view.fit_chance[i]), value)
            for i, value in zip(nxt.chosen, nxt.value_s, strict=True)
        ]
        round_.stop = nxt.stop
        if round_.probes:
            assert plan.csv is not None
            name = f"{job.model.name} on {job.cluster.num_devices} x {job.cluster.name}"
            frame = probe_frame(
                priced, [(lay, predictions[lay]) for lay, _ in round_.probes], name
            )
            try:
                round_.csv = write_csv(frame, plan.csv)
            except (OSError, UserError) as exc:
                round_.problem = write_failure(plan.csv, exc)
        lines += _probes_text(job, round_, plan.moved)
    round_.text = "\n".join(lines)
    return round_


def _as_expected(spread: float) -> str:
    if spread > 1.05:
        return "more than"
    return "less than" if spread < 0.95 else "about what"


def _fed_back_text(config: AutotuneConfig, job: Job, round_: ProbeRound) -> list[str]:
    assert round_.memory is not None and round_.final is not None
    assert round_.final_pick is not None and round_.model is not None
    ran = [run for _, run in round_.measured if run.ran]
    lines = [
        "",
        f"Measured probes ({config.measured}): {len(round_.measured)} row(s), {len(ran)} ran, "
        f"{len(round_.measured) - len(ran)} ran out of memory",
        *_wrapped(
            f"memory: the peaks are believed x{round_.memory.factor:.3f} the prediction, margin "
            f"{100 * (round_.margin or 0.0):.1f}% -> {100 * round_.memory.margin:.1f}% (what the "
            "measured rows say of memory)"
        ),
        *_wrapped(f"step-time model (prior): {round_.model.text()}"),
        *_wrapped(
            f"the probes miss their predictions by {_as_expected(round_.spread)} the model "
            f"expects: the job's scale, and every unmeasured layout's sd with it, "
            f"x{round_.spread:.2f}"
        ),
    ]
    if not ran:
        lines.append(
            "  every probe ran out of memory: the memory model was tightened (peaks believed "
            f"x{round_.memory.factor:.3f}) and the pick is the best layout it predicts to fit"
        )
    lines += [
        f"  measured {lay.describe()}: "
        + (f"{run.step_time_s:.3f} s" if run.ran else "out of memory")
        for lay, run in round_.measured
    ]
    if round_.ruled_out:
        lines += _wrapped(
            f"{round_.ruled_out} layout(s) predicted to need at least the memory of a probe that "
            "ran out of memory are taken not to fit and left out"
        )
    lines += [
        *_wrapped(
            "Unmeasured layouts re-ranked by expected step time (the prediction moved by what "
            "the probes say of this job, of the layout values they share and of their degrees):",
            indent="",
        ),
        layout_table(round_.ranked[: config.search.top_k]),
        f"Pick: {round_.final[0].describe()} ({round_.final_pick.reason})",
        launch_text(job, round_.final[0]),
    ]
    for note in round_.notes:
        lines += _wrapped(f"note: {note}")
    return lines


def _probes_text(job: Job, round_: ProbeRound, moved: str | None) -> list[str]:
    lines = [""]
    if round_.probes:
        lines += [
            f"{len(round_.probes)} layout(s) to measure (the most expected improvement over "
            "the best measured, times the chance to fit):",
            layout_table(round_.probes),
        ]
    for rank, ((layout, p), (chance, worth)) in enumerate(
        zip(round_.probes, round_.values, strict=True), start=1
    ):
        lines += [
            f"Probe {rank}: {layout.describe()} (expected {p.step_time_s:.4g} s, chance to "
            f"fit {chance:.0%}, expected improvement x chance {worth:.3g} s)",
            launch_text(job, layout),
        ]
    if round_.stop:
        lines += textwrap.wrap(f"Probes: {round_.stop}", width=_WIDTH)
    if round_.csv is None:  # none, or not written: the command says why after the result
        return lines
    if moved is not None:
        lines += textwrap.wrap(f"note: {moved}", width=_WIDTH)
    lines += textwrap.wrap(
        f"Fill in status (ok or oom), step_time_s and peak_memory_gib of {round_.csv}, then run "
        f"the same command with measured={round_.csv}",
        width=_WIDTH,
    )
    return lines
