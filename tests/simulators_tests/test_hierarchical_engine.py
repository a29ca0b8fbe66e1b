"""Inter-stage engine and collective costs of the hierarchical simulator."""

from __future__ import annotations

import pytest

from autotune.simulators import Layout
from autotune.simulators.hierarchical.cost import CommCost
from autotune.simulators.schedule import grad_sync
from autotune.simulators.schedule import run_pipeline
from autotune.simulators.schedule import schedule_order
from tests.simulators_tests._specs import ascend


def _run(schedule: str, p: int, m: int, v: int = 1, fwd: float = 1.0, bwd: float = 2.0):
    stages = p * v
    return run_pipeline(
        schedule,
        p,
        m,
        v,
        forward_s=[fwd / v] * stages,
        backward_s=[bwd / v] * stages,
        p2p_s=[0.0] * (stages - 1),
        activation_bytes=[1.0] * stages,
        transient_bytes=[0.0] * stages,
    )


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize(("p", "m"), [(1, 4), (2, 2), (4, 8), (4, 16), (8, 3), (8, 64)])
def test_bubble_matches_closed_form(schedule: str, p: int, m: int) -> None:
    run = _run(schedule, p, m)
    step = max(run.finish_s)
    assert (step - 3.0 * m) / step == pytest.approx((p - 1) / (m + p - 1))
    assert run.bubble_s[0] == pytest.approx(step - 3.0 * m)
    assert run.pp_comm_s == (0.0,) * p


@pytest.mark.parametrize(("p", "m", "v"), [(2, 4, 2), (4, 8, 2), (4, 16, 4), (8, 16, 2)])
def test_interleaving_divides_the_bubble_by_v(p: int, m: int, v: int) -> None:
    step = max(_run("interleaved", p, m, v).finish_s)
    assert step - 3.0 * m == pytest.approx(3.0 * (p - 1) / v)


def test_interleaved_runs_when_microbatches_are_not_a_multiple_of_pp() -> None:
    run = _run("interleaved", 4, 6, 2)
    assert max(run.finish_s) >= 3.0 * 6
    assert all(busy == pytest.approx(18.0) for busy in run.busy_s)


def test_in_flight_activations_follow_the_schedule() -> None:
    assert _run("1f1b", 4, 8).peak_activation_bytes == (4.0, 3.0, 2.0, 1.0)
    assert _run("gpipe", 4, 8).peak_activation_bytes == (8.0,) * 4
    # interleaved first rank: p * (1 + (p-1)/(p*v)) stages of activations (docs/reference.md 3.3)
    assert _run("interleaved", 4, 8, 2).peak_activation_bytes[0] / 2 == pytest.approx(
        4 * (1 + 3 / 8)
    )


def test_schedule_orders_hold_every_block_once() -> None:
    for schedule, v in (("1f1b", 1), ("gpipe", 1), ("interleaved", 3)):
        order = schedule_order(schedule, 1, 4, 8, v)
        assert sorted(order) == sorted(
            (f, c, i) for f in (False, True) for c in range(v) for i in range(8)
        )


def test_p2p_wait_is_told_apart_from_the_bubble() -> None:
    run = run_pipeline("1f1b", 2, 4, 1, [1.0, 1.0], [2.0, 2.0], [0.5], [1.0, 1.0], [0.0, 0.0])
    assert run.pp_comm_s[1] >= 0.5  # the first forward waits for the transfer at least
    for r in range(2):
        assert run.finish_s[r] == pytest.approx(run.busy_s[r] + run.bubble_s[r] + run.pp_comm_s[r])


def test_a_blocking_send_holds_its_sender_too() -> None:
    """1F1B without overlap: a rank waits for its own send before its next block.

    p 2, m 4, forward 1 s, backward 2 s, a 0.5 s link. Rank 0: F0 0-1 (send to 1.5), F1
    1.5-2.5 (to 3.0), B0 5.0-7.0 (rank 1's B0 ran 2.5-4.5, its send to 5.0), F2 7-8 (to 8.5),
    B1 8.5-10.5, F3 10.5-11.5 (to 12), B2 12-14, B3 15.5-17.5. Without blocking the sends only
    delay their receivers: 17.0.
    """
    args = ("1f1b", 2, 4, 1, [1.0, 1.0], [2.0, 2.0], [0.5], [1.0, 1.0], [0.0, 0.0])
    blocking = run_pipeline(*args, blocking=True)
    assert blocking.finish_s == pytest.approx((17.5, 15.5))
    # Its 4 sends, and the link before B0 and B3 (it was idle when their inputs left).
    assert blocking.pp_comm_s[0] == pytest.approx(3.0)
    assert max(run_pipeline(*args).finish_s) == pytest.approx(17.0)
    for r in range(2):
        assert blocking.finish_s[r] == pytest.approx(
            blocking.busy_s[r] + blocking.bubble_s[r] + blocking.pp_comm_s[r]
        )


def test_grad_buckets_overlap_the_last_backward() -> None:
    timeline: list[float] = []
    hidden = grad_sync(0, [(10.0, 14.0)], [[1.0] * 4], 14.0, True, timeline)
    exposed = grad_sync(0, [(10.0, 14.0)], [[1.0] * 4], 14.0, False, timeline)
    assert hidden == pytest.approx(15.0)  # last bucket ready at 14, one second of comm
    assert exposed == pytest.approx(18.0)
    assert len(timeline) == 8 * 7


def test_collectives_follow_the_alpha_beta_models() -> None:
    """latency_us is one cost per collective call and level (conf/cluster/*.yaml)."""
    cluster = ascend(2)
    comm = CommCost(cluster=cluster, layout=Layout(tp=8, dp=2))
    n = 1e9
    # 8 NPUs of one node: full mesh, 7 links of 28 GB/s at 70%
    beta = 1 / (7 * 28.0 * 0.7 * 1e9)
    assert comm.time_s("all_reduce", n, "tp") == pytest.approx(10e-6 + 2 * 7 / 8 * n * beta)
    assert comm.time_s("all_gather", n, "tp") == pytest.approx(10e-6 + 7 / 8 * n * beta)
    # DP group of 2 across nodes (stride 8): one device per node, inter-node ring
    inter = 1 / (25.0 * 0.7 * 1e9)
    assert comm.time_s("all_reduce", n, "dp") == pytest.approx(11.5e-6 + n * inter)


def test_hierarchical_all_reduce_splits_intra_and_inter_node() -> None:
    comm = CommCost(cluster=ascend(4), layout=Layout(tp=2, dp=16))
    n = 1e9
    # dp: 16 ranks of stride 2 -> 4 per node (3 mesh links), 4 nodes
    b1 = 1 / (3 * 28.0 * 0.7 * 1e9)
    b2 = 1 / (25.0 * 0.7 * 1e9)
    expected = (10e-6 + 2 * 3 / 4 * n * b1) + (11.5e-6 + 2 * 3 / 4 * n / 4 * b2)
    assert comm.time_s("all_reduce", n, "dp") == pytest.approx(expected)
    # TP=2 on the full mesh gets one 28 GB/s link (docs/reference.md 1.5), not the node's aggregate
    tp_beta = 1 / (28.0 * 0.7 * 1e9)
    assert comm.time_s("all_reduce", n, "tp") == pytest.approx(10e-6 + n * tp_beta)


def test_p2p_placement_by_node() -> None:
    comm = CommCost(cluster=ascend(2), layout=Layout(tp=4, pp=4))
    same, other = comm.p2p_s(1e6, 0, 1, "pp"), comm.p2p_s(1e6, 1, 2, "pp")
    assert same < other  # ranks 0 and 4 share node 0; rank 8 is on node 1


def test_the_analytical_in_flight_count_is_the_schedule_s_on_every_rank() -> None:
    """What each rank holds at its peak, in whole stages: the most forwards the hierarchical
    schedule has run and not yet backed, over v, equals the analytical simulator's count, on
    every rank (the last rank of an interleaved pipeline holds nearly as much as the first)."""
    from autotune.simulators.analytical.stages import FLOATS
    from autotune.simulators.analytical.stages import in_flight

    for p, m, v in ((4, 8, 1), (4, 8, 2), (2, 32, 24), (8, 16, 5), (4, 2, 1), (3, 3, 2)):
        schedule = "interleaved" if v > 1 else "1f1b"
        for rank in range(p):
            held = peak = 0
            for forward, _, _ in schedule_order(schedule, rank, p, m, v):
                held += 1 if forward else -1
                peak = max(peak, held)
            assert in_flight(m, p, v, rank, FLOATS) == pytest.approx(peak / v), (p, m, v, rank)
