"""ReportSuppressor: which groups go into a round's report (threshold, forced liveness, zeros on stop)."""

import numpy as np
import pytest

from allocator.policies.report_suppressor import ReportSuppressor, Selection


def rows(*values: float) -> np.ndarray:
    """[G, 1] usage of one dimension per group."""
    return np.array(values, dtype=np.float64)[:, None]


def step(suppressor: ReportSuppressor, usage: np.ndarray, serving: np.ndarray | None = None) -> Selection:
    """One round: select and commit (as the broker does once the report is published)."""
    serving = np.ones(len(usage), dtype=bool) if serving is None else serving
    selection = suppressor.select(usage, serving)
    suppressor.commit(selection, usage)
    return selection


@pytest.mark.parametrize("threshold_pct, force_every", [(-1.0, 5), (10.0, 0), (10.0, -3)])
def test_bad_settings_fail_at_construction(threshold_pct, force_every):
    with pytest.raises(ValueError):
        ReportSuppressor(1, 1, threshold_pct, force_every)


def test_a_new_group_is_reported_at_once():
    suppressor = ReportSuppressor(2, 1, threshold_pct=10.0, force_every=5)
    selection = step(suppressor, rows(100.0, 0.0))
    np.testing.assert_array_equal(selection.report, [True, False])
    np.testing.assert_array_equal(selection.zeros, [False, False])  # never active: nothing to take back
    assert selection.suppressed == 0


def test_threshold_is_in_percent_of_the_last_reported_usage():
    suppressor = ReportSuppressor(1, 1, threshold_pct=10.0, force_every=100)
    assert step(suppressor, rows(100.0)).report[0]
    five = step(suppressor, rows(105.0))
    assert not five.report[0] and five.suppressed == 1
    # 109 is 9% above what was last *reported* (100), though only ~4% above the last measured value
    assert not step(suppressor, rows(109.0)).report[0]
    assert step(suppressor, rows(115.0)).report[0]  # 15% over 100
    # now 115 is the reference: a slow drift is compared against it, not against the previous round
    assert not step(suppressor, rows(105.0)).report[0]  # -8.7%
    assert step(suppressor, rows(103.0)).report[0]  # -10.4%
    assert step(suppressor, rows(89.0)).report[0]  # -13.6%


def test_a_change_in_any_dimension_is_enough():
    suppressor = ReportSuppressor(1, 2, threshold_pct=10.0, force_every=100)
    step(suppressor, np.array([[100.0, 100_000.0]]))
    assert not step(suppressor, np.array([[101.0, 109_000.0]])).report[0]
    assert step(suppressor, np.array([[100.0, 115_000.0]])).report[0]


def test_threshold_zero_reports_every_change_and_nothing_else():
    suppressor = ReportSuppressor(1, 1, threshold_pct=0.0, force_every=100)
    step(suppressor, rows(50.0))
    assert not step(suppressor, rows(50.0)).report[0]
    assert step(suppressor, rows(50.001)).report[0]


@pytest.mark.parametrize("force_every", [1, 3, 5])
def test_a_group_is_reported_every_force_every_rounds_without_a_change(force_every):
    suppressor = ReportSuppressor(1, 1, threshold_pct=10.0, force_every=force_every)
    reported = [bool(step(suppressor, rows(42.0)).report[0]) for _ in range(16)]
    assert [index for index, sent in enumerate(reported) if sent] == list(range(0, 16, force_every))


def test_a_change_restarts_the_force_count():
    suppressor = ReportSuppressor(1, 1, threshold_pct=10.0, force_every=3)
    usage = [10.0, 10.0, 20.0, 20.0, 20.0, 20.0]  # round 2 is a change; forced again at round 5
    reported = [bool(step(suppressor, rows(value)).report[0]) for value in usage]
    assert reported == [True, False, True, False, False, True]


def test_traffic_that_stops_is_reported_once_as_zeros_then_silent():
    suppressor = ReportSuppressor(2, 1, threshold_pct=10.0, force_every=2)
    step(suppressor, rows(30.0, 40.0))
    stop = step(suppressor, rows(0.0, 40.0))
    np.testing.assert_array_equal(stop.report, [True, False])
    np.testing.assert_array_equal(stop.zeros, [True, False])
    for _ in range(5):  # silent for good, even past force_every, and not counted as suppressed
        later = step(suppressor, rows(0.0, 40.0))
        assert not later.report[0] and not later.zeros[0]
        assert later.suppressed == int(not later.report[1])  # only group 1 can be suppressed
    restart = step(suppressor, rows(5.0, 40.0))  # back: a new group again, reported at once
    assert restart.report[0] and not restart.zeros[0]


def test_a_group_no_longer_served_counts_as_stopped_even_with_usage_left():
    suppressor = ReportSuppressor(1, 1, threshold_pct=10.0, force_every=5)
    step(suppressor, rows(30.0))
    selection = step(suppressor, rows(30.0), serving=np.array([False]))
    assert selection.report[0] and selection.zeros[0]


def test_leave_reports_zeros_for_every_group_still_standing():
    suppressor = ReportSuppressor(4, 1, threshold_pct=10.0, force_every=5)
    step(suppressor, rows(10.0, 20.0, 30.0, 0.0))  # group 3 never active
    step(suppressor, rows(10.0, 0.0, 30.0, 0.0))  # group 1 stopped (its zeros are out already)
    step(suppressor, rows(10.5, 0.0, 30.0, 0.0))  # group 0 suppressed this round: still standing
    leave = suppressor.leave()
    np.testing.assert_array_equal(leave.report, [True, False, True, False])
    np.testing.assert_array_equal(leave.zeros, leave.report)
    assert leave.suppressed == 0
    suppressor.commit(leave, np.zeros((4, 1)))
    assert not suppressor.leave().report.any()  # nothing left standing after the zeros went out


def test_suppressed_counts_the_active_groups_left_out():
    suppressor = ReportSuppressor(5, 1, threshold_pct=10.0, force_every=10)
    step(suppressor, rows(100.0, 100.0, 100.0, 100.0, 0.0))
    selection = step(suppressor, rows(101.0, 99.0, 150.0, 0.0, 0.0))
    np.testing.assert_array_equal(selection.report, [False, False, True, True, False])
    np.testing.assert_array_equal(selection.zeros, [False, False, False, True, False])
    assert selection.suppressed == 2


def test_select_alone_changes_nothing():
    suppressor = ReportSuppressor(1, 1, threshold_pct=10.0, force_every=5)
    first = suppressor.select(rows(7.0), np.array([True]))
    again = suppressor.select(rows(7.0), np.array([True]))
    np.testing.assert_array_equal(first.report, again.report)
    assert first.report[0]  # still new: the first selection was never committed
