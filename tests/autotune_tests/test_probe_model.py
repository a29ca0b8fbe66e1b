"""The probe loop's model: the step-time residuals and their estimate, the memory belief, the
expected improvement, the next probes, the stop rule and the pick."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from statistics import NormalDist

import numpy as np
import pytest
from scipy import integrate
from scipy import stats

from autotune import catalog
from autotune.calibrate._memory import Observation
from autotune.calibrate._memory import memory_belief
from autotune.calibrate._priors import shipped_priors
from autotune.calibrate._probe import Candidates
from autotune.calibrate._probe import Probed
from autotune.calibrate._probe import ProbeSettings
from autotune.calibrate._probe import any_chance
from autotune.calibrate._probe import expected_improvement
from autotune.calibrate._probe import next_probes
from autotune.calibrate._probe import outlook
from autotune.calibrate._probe import pick
from autotune.calibrate._residuals import LayoutFeatures
from autotune.calibrate._residuals import ResidualModel
from autotune.calibrate._residuals import belief
from autotune.calibrate._residuals import estimate
from autotune.calibrate._residuals import log_density
from autotune.simulators.layout import LAYOUT_FIELDS

TP = LAYOUT_FIELDS.index("tp")
HOST = ("host_overhead",)  # the one share factor of the hand-made layouts
STOP = ProbeSettings(stop_gain=0.01, stop_probability=0.05)


def _model(level: float = 0.05, own: float = 0.03, tp: float = 0.15) -> ResidualModel:
    widths = tuple((name, tp if name == "tp" else 0.0) for name in LAYOUT_FIELDS)
    return ResidualModel(mean=0.2, level=level, own=own, widths=widths)


def _codes(tp: list[int]) -> LayoutFeatures:
    """Layouts that differ in their TP degree alone, for a model without slopes."""
    codes = np.zeros((len(tp), len(LAYOUT_FIELDS)), dtype=np.int64)
    codes[:, TP] = tp
    return LayoutFeatures(
        codes, np.zeros((len(tp), 0)), np.zeros((len(tp), 1)), LAYOUT_FIELDS, (), HOST
    )


def _stacked(jobs: list[LayoutFeatures]) -> LayoutFeatures:
    first = jobs[0]
    return LayoutFeatures(
        np.vstack([j.codes for j in jobs]),
        np.vstack([j.logs for j in jobs]),
        np.vstack([j.shares for j in jobs]),
        first.fields,
        first.slope_fields,
        first.share_factors,
    )


def _candidates(
    predicted: list[float], tp: list[int], memory: list[float] | None = None
) -> Candidates:
    n = len(predicted)
    return Candidates(
        log_predicted=np.log(predicted),
        features=_codes(tp),
        memory_gib=np.array(memory or [10.0] * n),
        device_gib=np.full(n, 80.0),
        memory=memory_belief(0.2, 0.5),
    )


def test_the_belief_is_gaussian_conditioning_on_the_measured_residuals() -> None:
    """Rebuilt by hand from the full covariance: a probe of tp 2 moves the other tp 2 layout
    most, a tp 4 layout only by the job's level."""
    model = _model()
    predicted = np.log([1.0, 1.1, 1.2, 1.3])
    codes = _codes([2, 2, 4, 8])
    found = belief(model, predicted, codes, {0: 1.5})
    same = codes.codes[:, TP, None] == codes.codes[None, :, TP]
    cov = model.level**2 + model.widths[TP][1] ** 2 * same
    cov = cov + model.own**2 * np.eye(4)
    r = math.log(1.5) - predicted[0] - model.mean
    mean = predicted + model.mean + cov[:, 0] / cov[0, 0] * r
    var = np.diag(cov) - cov[:, 0] ** 2 / cov[0, 0]
    assert found.mean[1:] == pytest.approx(mean[1:])
    assert found.var[1:] == pytest.approx(var[1:])
    assert (found.mean[0], found.var[0]) == (pytest.approx(math.log(1.5)), 0.0)
    moved = found.mean - (predicted + model.mean)
    assert moved[2] == pytest.approx(moved[3])  # the job's level alone
    assert moved[1] > moved[2] > 0  # the same tp moves most
    assert found.expected_s[2] == pytest.approx(math.exp(found.mean[2] + found.var[2] / 2))


def _drawn(
    truth: ResidualModel,
    layouts: Callable[[np.random.Generator], LayoutFeatures],
    rng: np.random.Generator,
    jobs: int,
    dof: float | None = None,
) -> tuple[np.ndarray, list[int], list[str], LayoutFeatures]:
    """The residuals of ``jobs`` jobs drawn from ``truth`` (``layouts`` draws each job's
    layouts; with ``dof``, each job's covariance divided by a Gamma(dof / 2, rate dof / 2)
    draw), over four sources: the arguments of :func:`estimate`."""
    residuals: list[float] = []
    names: list[int] = []
    sources: list[str] = []
    features = []
    for job in range(jobs):
        f = layouts(rng)
        cov = truth.covariance(f, f) + truth.own**2 * np.eye(len(f))
        if dof is not None:
            cov = cov / rng.gamma(dof / 2, 2 / dof)
        residuals += list(rng.multivariate_normal(np.full(len(f), truth.mean), cov))
        names += [job] * len(f)
        sources += [f"s{job % 4}"] * len(f)
        features.append(f)
    return np.array(residuals), names, sources, _stacked(features)


def _six_tp_codes(rng: np.random.Generator) -> LayoutFeatures:
    return _codes(list(rng.integers(0, 4, 6)))


def test_the_estimate_recovers_the_sds_it_was_drawn_with() -> None:
    truth = _model(level=0.08, own=0.04, tp=0.12)
    found = estimate(*_drawn(truth, _six_tp_codes, np.random.default_rng(0), 400))
    assert found.mean == pytest.approx(0.2, abs=0.02)
    assert found.own == pytest.approx(0.04, rel=0.1)
    assert dict(found.widths)["tp"] == pytest.approx(0.12, rel=0.15)
    total = found.level**2 + sum(w**2 for name, w in found.widths if name != "tp")
    assert math.sqrt(total) == pytest.approx(0.08, rel=0.15)  # fields constant in a job: its level
    assert (found.scenarios, found.sources) == (400, 4)


def _tp_features(tp: list[int]) -> LayoutFeatures:
    """Layouts that differ in their TP degree alone, with its log2 as the one slope field."""
    codes = _codes(tp).codes
    logs = np.log2(np.array(tp, float))[:, None]
    return LayoutFeatures(codes, logs, np.zeros((len(tp), 1)), LAYOUT_FIELDS, ("tp",), HOST)


def test_a_slope_carries_what_a_probe_says_to_the_higher_degrees() -> None:
    """A TP slope of sd 0.1 per doubling, anchored at TP 1: by hand, a probe at TP 2 that ran
    slower than predicted moves a layout by ``cov(layout, probe) / var(probe)`` times its
    residual, with ``cov = level^2 + s^2 log2(tp) log2(2)``: TP 8 most, TP 1 by the job's level
    alone; the prior variance grows with the degree."""
    model = dataclasses.replace(_model(tp=0.0), slopes=(("tp", 0.1),))
    tp = [1, 2, 4, 8]
    features = _tp_features(tp)
    predicted = np.zeros(4)
    found = belief(model, predicted, features, {1: math.exp(model.mean + 0.3)})
    var_probe = model.level**2 + 0.1**2 + model.own**2
    for i, degree in enumerate(tp):
        if i == 1:
            continue
        cov = model.level**2 + 0.1**2 * math.log2(degree)
        assert found.mean[i] - model.mean == pytest.approx(cov / var_probe * 0.3)
    assert found.mean[3] > found.mean[2] > found.mean[0] > model.mean
    prior = belief(model, predicted, features, {})
    assert prior.var == pytest.approx(model.level**2 + model.own**2 + 0.01 * np.log2(tp) ** 2)


def _host_features(host: list[float]) -> LayoutFeatures:
    """Layouts of one TP degree that differ in the share of their step the host paces."""
    codes = _codes([0] * len(host))
    return dataclasses.replace(codes, shares=np.array(host, float)[:, None])


def test_a_host_paced_probe_says_little_of_a_layout_the_device_paces() -> None:
    """The host part of sd 0.15, by hand: a probe whose step the host paces (share 1) and that
    ran 30% over its expectation moves a layout by ``cov(layout, probe) / var(probe)`` times
    its residual, ``cov = level^2 + 0.15^2 h``: a device-paced layout (h = 0) by the job's level
    alone, a half-paced one more, another host-paced one most."""
    model = dataclasses.replace(_model(tp=0.0), given=(("host_overhead", 0.15),))
    host = [1.0, 0.0, 0.5, 1.0]
    features = _host_features(host)
    found = belief(model, np.zeros(4), features, {0: math.exp(model.mean + 0.3)})
    var_probe = model.level**2 + 0.15**2 + model.own**2
    for i in (1, 2, 3):
        cov = model.level**2 + 0.15**2 * host[i]
        assert found.mean[i] - model.mean == pytest.approx(cov / var_probe * 0.3)
    assert found.mean[3] > found.mean[2] > found.mean[1] > model.mean
    prior = belief(model, np.zeros(4), features, {})
    assert prior.var == pytest.approx(model.level**2 + model.own**2 + 0.15**2 * np.square(host))


def test_the_estimate_takes_the_host_part_as_given() -> None:
    """Jobs drawn with a host part of sd 0.15 over shares from 0 to 1: given it, the estimate
    recovers the other sds; without it, the host's variance goes into them."""
    truth = dataclasses.replace(
        _model(level=0.05, own=0.04, tp=0.0), given=(("host_overhead", 0.15),)
    )

    def layouts(rng: np.random.Generator) -> LayoutFeatures:
        return _host_features(list(rng.choice([0.0, 1.0], 6)))

    drawn = _drawn(truth, layouts, np.random.default_rng(3), 400)
    found = estimate(*drawn, scales=False, given={"host_overhead": 0.15})
    assert found.given == (("host_overhead", 0.15),)
    assert found.own == pytest.approx(0.04, rel=0.15)
    total = found.level**2 + sum(w**2 for _, w in found.widths)  # every field: the job's
    assert math.sqrt(total) == pytest.approx(0.05, rel=0.3)
    blind = estimate(*drawn, scales=False)
    assert blind.given == () and blind.own > 0.06  # the host's part taken for the layouts' own


def test_the_estimate_recovers_a_slope_it_was_drawn_with() -> None:
    truth = dataclasses.replace(_model(level=0.08, own=0.04, tp=0.05), slopes=(("tp", 0.1),))

    def layouts(rng: np.random.Generator) -> LayoutFeatures:
        return _tp_features(list(2 ** rng.integers(0, 4, 6)))

    found = estimate(*_drawn(truth, layouts, np.random.default_rng(2), 400), scales=False)
    assert dict(found.slopes)["tp"] == pytest.approx(0.1, rel=0.2)
    assert dict(found.widths)["tp"] == pytest.approx(0.05, rel=0.3)
    assert found.own == pytest.approx(0.04, rel=0.15)


def test_the_estimate_finds_how_much_jobs_differ_in_scale() -> None:
    """Jobs drawn with a scale of their own (1 / tau^2 ~ Gamma(dof / 2, rate dof / 2), dof 4):
    the estimate's degrees of freedom are near 4, and its sds (at scale 1) near the drawn
    ones; drawn without (the test above), the estimate is all but Gaussian."""
    truth = _model(level=0.08, own=0.04, tp=0.12)
    found = estimate(*_drawn(truth, _six_tp_codes, np.random.default_rng(1), 600, dof=4.0))
    assert 3.0 < found.dof < 6.0
    assert found.own == pytest.approx(0.04, rel=0.2)
    assert dict(found.widths)["tp"] == pytest.approx(0.12, rel=0.25)


def test_probes_that_miss_by_more_than_expected_widen_every_belief() -> None:
    """The job's scale after the probes is (dof + q) / (dof + n - 2), q the probes' Mahalanobis
    distance squared (by hand for one probe: r^2 / its prior variance); before any probe,
    dof / (dof - 2), the variance of the t. The means are the Gaussian's."""
    heavy = dataclasses.replace(_model(), dof=4.0)
    predicted = np.log([1.0, 1.1, 1.2])
    codes = _codes([2, 2, 4])
    prior = belief(heavy, predicted, codes, {})
    assert prior.var == pytest.approx(np.full(3, heavy.sd**2 * 4.0 / 2.0))
    near = belief(heavy, predicted, codes, {0: math.exp(heavy.mean)})  # residual 0: q = 0
    far = belief(heavy, predicted, codes, {0: 2.0 * math.exp(heavy.mean)})
    q = math.log(2.0) ** 2 / heavy.sd**2
    assert (near.scale, far.scale) == (pytest.approx(4 / 3), pytest.approx((4 + q) / 3))
    assert all(far.var[1:] > near.var[1:])
    gaussian = belief(_model(), predicted, codes, {0: 2.0 * math.exp(heavy.mean)})
    assert gaussian.scale == 1.0 and far.mean == pytest.approx(gaussian.mean)
    assert far.var[1:] == pytest.approx(gaussian.var[1:] * far.scale)


def test_the_log_density_of_a_job_is_the_t_or_the_gaussian_it_stands_for() -> None:
    """One layout: a univariate t with scale sd (at scale 1) and dof degrees of freedom, or a
    normal; two layouts of the same TP degree under a Gaussian: their covariance by hand."""
    heavy = dataclasses.replace(_model(), dof=4.0)
    r = np.array([0.5])
    codes = _codes([2])
    by_hand = stats.t.logpdf(0.5, df=4.0, loc=heavy.mean, scale=heavy.sd)
    assert log_density(heavy, r, codes) == pytest.approx(by_hand)
    normal = stats.norm.logpdf(0.5, loc=heavy.mean, scale=heavy.sd)
    assert log_density(_model(), r, codes) == pytest.approx(normal)
    model = _model()
    cov = np.full((2, 2), model.level**2 + model.widths[TP][1] ** 2) + model.own**2 * np.eye(2)
    pair = np.array([0.1, 0.3])
    expected = stats.multivariate_normal.logpdf(pair, np.full(2, model.mean), cov)
    assert log_density(model, pair, _codes([2, 2])) == pytest.approx(expected)


def test_expected_improvement_is_the_integral_it_stands_for() -> None:
    mean, var, best = math.log(1.0), 0.04, 1.05
    sd = math.sqrt(var)
    density = NormalDist(mean, sd).pdf
    by_hand, _ = integrate.quad(lambda x: max(0.0, best - math.exp(x)) * density(x), -3, 3)
    found = expected_improvement(best, np.array([mean]), np.array([var]))[0]
    assert found == pytest.approx(by_hand, rel=1e-6)


def test_no_probe_means_fitting_with_the_margin_is_a_95_percent_chance() -> None:
    memory = memory_belief(0.2, 0.4)
    assert memory.margin == pytest.approx(0.2, rel=1e-3)
    assert memory.factor == pytest.approx(1.0)
    room = np.log([1.2, 1.3, 1.1])  # device / predicted peak
    sd = math.log(1.2) / NormalDist().inv_cdf(0.95)
    assert memory.fit_chance(room) == pytest.approx(
        [NormalDist(0, sd).cdf(r) for r in room], abs=1e-3
    )


def test_an_out_of_memory_probe_moves_the_memory_of_the_whole_job() -> None:
    before = memory_belief(0.2, 0.5)
    room = np.log([1.25, 1.1])
    after = memory_belief(0.2, 0.5, [Observation("oom", math.log(1.15))])
    assert after.factor > 1.0 and after.margin > before.margin
    assert all(after.fit_chance(room) < before.fit_chance(room))
    ran = memory_belief(0.2, 0.5, [Observation("ran", math.log(1.02))])
    assert ran.factor < 1.0 and all(ran.fit_chance(room) > before.fit_chance(room))
    peak = memory_belief(0.2, 0.5, [Observation("peak", 0.1)])
    assert 1.0 < peak.factor < math.exp(0.1)  # half the evidence is the layout's own
    assert memory_belief(0.2, 0.0, [Observation("peak", 0.1)]).factor == pytest.approx(1.0)


@pytest.mark.parametrize("room", [1.5, 3.2, 5.0])
def test_an_out_of_memory_probe_far_under_the_device_moves_the_memory_as_far_as_it_says(
    room: float,
) -> None:
    """A layout predicted at 1 / room of the device ran out of memory: the common part's
    posterior mean is that of a Gaussian given u + e > log(room), by hand the truncated
    normal's: common x sd x phi(x) / (1 - Phi(x)), x = log(room) / sd. At room 3.2 (predicted
    at 25 GiB of 80) the chance of the observation underflowed on the old grid, which stopped
    at 8 prior sds (x1.41), and the probe moved nothing."""
    margin, common = 0.131, 0.33
    after = memory_belief(margin, common, [Observation("oom", math.log(room))])
    sd = math.log1p(margin) / NormalDist().inv_cdf(0.95)
    x = math.log(room) / sd
    mills = stats.norm.pdf(x) / stats.norm.sf(x)
    assert after.factor == pytest.approx(math.exp(common * sd * mills), rel=1e-3)
    assert after.margin > margin


def test_a_layout_needing_the_memory_of_a_failed_probe_is_no_probe_and_no_pick() -> None:
    candidates = _candidates([1.0, 1.05, 1.2], [1, 2, 4], memory=[60.0, 62.0, 40.0])
    probed = Probed({}, frozenset({0}))
    view = outlook(_model(), candidates, probed)
    assert view.fit_chance[1] == 0.0 and not view.fits[1]
    chosen = next_probes(_model(), candidates, probed, 2, STOP).chosen
    assert chosen == [2]  # the other can only fail
    assert pick(view, candidates, probed).index == 2
    assert list(view.ruled_out) == [True, True, False]
    far = _candidates([1.0, 1.1], [1, 2], memory=[10.0, 4000.0])
    seen = outlook(_model(), far, Probed({0: 1.2}, frozenset()))
    assert seen.fit_chance[1] == 0.0 and not seen.ruled_out.any()  # no probe failed


def test_the_next_probe_is_worth_most_and_a_batch_spreads() -> None:
    model = _model()
    # three layouts of tp 1 a little faster than one of tp 8, after a tp 1 probe ran
    candidates = _candidates([1.0, 1.01, 1.02, 1.03], [1, 1, 1, 8])
    probed = Probed({0: 1.2}, frozenset())
    found = next_probes(model, candidates, probed, 2, STOP)
    view = outlook(model, candidates, probed)
    gains = expected_improvement(1.2, view.belief.mean, view.belief.var) * view.fit_chance
    assert found.chosen[0] == int(np.argmax(np.where([False, True, True, True], gains, -1)))
    assert found.chosen[0] == 3  # shares nothing with the probe: the most to learn
    assert len(set(found.chosen)) == 2 and found.value_s[0] == pytest.approx(gains[3])


def test_the_loop_stops_when_nothing_is_likely_to_beat_the_best_and_says_so() -> None:
    model = _model()
    candidates = _candidates([1.0, 2.0, 2.2], [1, 2, 4])
    found = next_probes(model, candidates, Probed({0: 1.2}, frozenset()), 2, STOP)
    assert found.chosen == []
    assert found.stop is not None and "stop probing" in found.stop
    assert "not above 5% (2 unmeasured layouts" in found.stop
    first = next_probes(model, candidates, Probed(), 3, STOP)  # nothing ran yet: never stops
    assert first.chosen[0] == 0


def test_the_stop_rule_weighs_the_chance_that_any_layout_beats_the_best() -> None:
    """Five layouts of five TP degrees, each with a chance of 3.6% (by hand from the belief)
    of beating the probe by more than 1%: none alone is likely, but that one of them does is
    1 - (1 - p)^5 = 17%, so the loop goes on; one such layout alone stops it."""
    model = _model()
    probed = Probed({0: 1.2}, frozenset())
    candidates = _candidates([1.0] + [1.3] * 5, [1, 2, 3, 4, 5, 6])
    view = outlook(model, candidates, probed)
    sd = np.sqrt(view.belief.var[1:])
    z = (math.log(1.2 * (1 - STOP.stop_gain)) - view.belief.mean[1:]) / sd
    chances = np.array([NormalDist().cdf(x) for x in z]) * view.fit_chance[1:]
    assert chances.max() < STOP.stop_probability < any_chance(chances)
    assert any_chance(chances) == pytest.approx(1 - (1 - chances[0]) ** 5)
    assert next_probes(model, candidates, probed, 1, STOP).stop is None
    alone = next_probes(model, _candidates([1.0, 1.3], [1, 2]), probed, 1, STOP)
    assert alone.chosen == [] and f"is {100 * chances[0]:.1f}%, not above 5%" in str(alone.stop)


def test_the_pick_is_the_least_expected_step_time_of_what_may_be_picked() -> None:
    model = _model()
    candidates = _candidates([1.0, 1.1, 0.5, 1.3], [1, 1, 2, 4], memory=[50, 50, 90, 10])
    probed = Probed({0: 1.2, 1: 1.4}, frozenset())
    view = outlook(model, candidates, probed)
    chosen = pick(view, candidates, probed)
    assert not candidates.fits[2]  # faster, but predicted not to fit: never the pick
    expected_3 = view.expected_s[3]
    assert (chosen.index, chosen.measured) == ((0, True) if 1.2 <= expected_3 else (3, False))
    slower = Probed({0: 2.5, 1: 2.8}, frozenset())
    chosen = pick(outlook(model, candidates, slower), candidates, slower)
    assert (chosen.index, chosen.measured) == (3, False)  # expected below the best probe
    failed = Probed({}, frozenset({0, 1}))
    chosen = pick(outlook(model, candidates, failed), candidates, failed)
    assert chosen.index == 3 and "no probe ran" in chosen.reason


def test_the_shipped_priors_leave_a_source_out() -> None:
    simulator = catalog.load_simulator("analytical")
    given = {"host_overhead": 0.15, "inter_node_efficiency": 0.1}
    every = shipped_priors(simulator, given)
    without = shipped_priors(simulator, given, leave_out="vtrain")
    assert every.time.sources == 13 and without.time.sources == 12
    assert without.time.scenarios < every.time.scenarios
    # 177 measured peaks, one of them at its device's ceiling: no point (0064)
    assert 0 < every.memory_common < 1 and every.memory_rows == 176
    assert dict(every.time.widths)["tp"] > every.time.own  # TP's error is shared most
    assert 2 < every.time.dof < 10  # jobs differ in how far off the simulator is (0057)
