"""The benchmark's metrics on hand-made cases with known answers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from autotune.benchmark._metrics import average_ranks
from autotune.benchmark._metrics import expected_random_regret
from autotune.benchmark._metrics import feasibility_rates
from autotune.benchmark._metrics import layout_regrets
from autotune.benchmark._metrics import pick_order
from autotune.benchmark._metrics import rank_correlations
from autotune.benchmark._metrics import regret_at_k
from autotune.benchmark._metrics import summarize

NAN = float("nan")
MEASURED = np.array([1.0, 1.2, 1.5, NAN])  # the last layout ran out of memory
OK = np.array([True, True, True, False])


def test_regret_of_each_pick() -> None:
    regrets = layout_regrets(MEASURED, OK, oom_penalty=1.0)
    np.testing.assert_allclose(regrets, [0.0, 0.2, 0.5, 1.0])


def test_regret_is_zero_when_the_pick_is_best() -> None:
    regrets = layout_regrets(MEASURED, OK, oom_penalty=1.0)
    order = pick_order(np.array([1.0, 2.0, 3.0, 4.0]), np.ones(4, dtype=bool))
    assert list(order) == [0, 1, 2, 3]
    assert regret_at_k(regrets, order, 1) == 0.0


def test_an_oom_pick_is_charged_the_penalty_and_top_k_recovers() -> None:
    regrets = layout_regrets(MEASURED, OK, oom_penalty=1.0)
    order = pick_order(np.array([4.0, 3.0, 2.0, 1.0]), np.ones(4, dtype=bool))
    assert order[0] == 3 and not OK[order[0]]  # a false-feasible pick
    assert regret_at_k(regrets, order, 1) == 1.0
    assert regret_at_k(regrets, order, 3) == pytest.approx(0.2)


def test_layouts_predicted_not_to_fit_and_unpredicted_rank_last() -> None:
    score = np.array([1.0, NAN, 3.0, 0.5])
    fits = np.array([True, True, True, False])
    assert list(pick_order(score, fits)) == [0, 2, 1, 3]


def test_expected_random_regret_is_exact() -> None:
    regrets = np.array([0.0, 0.2, 0.5, 1.0])
    assert expected_random_regret(regrets, 1) == pytest.approx(0.425)
    # best of 3 of 4: the smallest is in the draw with probability 3/4, else the second
    assert expected_random_regret(regrets, 3) == pytest.approx(0.25 * 0.2)
    assert expected_random_regret(regrets, 9) == 0.0  # k larger than n: every layout drawn
    three = np.array([0.0, 0.5, 1.0])
    assert expected_random_regret(three, 2) == pytest.approx((2 * 0.0 + 1 * 0.5) / 3)


def test_rank_correlations() -> None:
    measured = np.array([1.0, 2.0, 3.0, 4.0])
    assert rank_correlations(measured * 7, measured) == (1.0, 1.0)
    assert rank_correlations(-measured, measured) == (-1.0, -1.0)
    assert rank_correlations(np.array([1.0, 2.0]), np.array([5.0, 3.0])) == (-1.0, -1.0)
    tau, rho = rank_correlations(np.ones(4), measured)  # constant prediction
    assert np.isnan(tau) and np.isnan(rho)
    tau, _ = rank_correlations(np.array([1.0, NAN, 3.0]), np.array([1.0, 2.0, 3.0]))
    assert tau == 1.0  # unpredicted rows are left out


def test_feasibility_rates() -> None:
    fits = np.array([True, False, True, False])
    ok = np.array([True, True, False, False])
    assert feasibility_rates(fits, ok) == (0.5, 0.5)
    false_feasible, false_infeasible = feasibility_rates(np.ones(2, bool), np.ones(2, bool))
    assert np.isnan(false_feasible) and false_infeasible == 0.0


def test_summary_is_seeded_and_brackets_the_mean() -> None:
    values = np.array([0.0, 0.1, 0.2, 0.4, NAN])
    first = summarize(values, np.random.default_rng(0), 500)
    again = summarize(values, np.random.default_rng(0), 500)
    assert first == again
    assert (first.n, first.worst) == (4, 0.4)
    assert first.mean == pytest.approx(0.175) and first.median == pytest.approx(0.15)
    assert first.ci_low <= first.mean <= first.ci_high
    assert summarize(np.array([NAN]), np.random.default_rng(0), 10).n == 0


@pytest.mark.parametrize("n", [2, 3, 7, 40, 300, 2500])  # 2500: above the pairwise limit
def test_rank_correlations_match_scipy_with_ties(n: int) -> None:
    rng = np.random.default_rng(n)
    for levels in (3, 1000):  # many ties, few ties
        predicted = rng.integers(0, levels, n).astype(float)
        measured = predicted + rng.integers(0, levels, n)
        if np.ptp(predicted) == 0 or np.ptp(measured) == 0:
            continue
        tau, rho = rank_correlations(predicted, measured)
        assert tau == pytest.approx(stats.kendalltau(predicted, measured).statistic, abs=1e-12)
        expected_rho = stats.spearmanr(predicted, measured).statistic if n > 2 else tau
        assert rho == pytest.approx(expected_rho, abs=1e-12)
        np.testing.assert_allclose(average_ranks(measured), stats.rankdata(measured))
