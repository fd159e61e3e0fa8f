"""A broker's lease on its registry session (`actors.drivers.leases`): three heartbeats per timeout, and the lease runs
out when two periods pass with none taken, one period before the registry may end the session."""

from __future__ import annotations

import pytest

from actors.drivers.leases import Leases
from actors.registry.membership import Membership


def test_the_lease_runs_out_two_heartbeat_periods_after_the_last_taken():
    leases = Leases(session_timeout_s=0.3)
    assert leases.heartbeat_period_s == pytest.approx(0.1) and leases.lease_s == pytest.approx(0.2)
    leases.taken([("b1", 0)], 1.0)
    assert leases.lapsed_for_s(("b1", 0), 1.19) is None
    assert leases.lapsed_for_s(("b1", 0), 1.2) == pytest.approx(0.2)
    leases.taken([("b1", 0)], 1.2)  # a heartbeat taken: the lease restarts
    assert leases.lapsed_for_s(("b1", 0), 1.3) is None


def test_each_incarnation_has_its_own_lease_and_an_unseen_one_is_fresh():
    leases = Leases(session_timeout_s=0.3)
    leases.taken([("b1", 0)], 0.0)
    assert leases.lapsed_for_s(("b1", 0), 5.0) == pytest.approx(5.0)
    assert leases.lapsed_for_s(("b1", 1), 5.0) is None


def test_a_lapsed_lease_comes_before_the_registry_ends_the_session():
    """The point of the lease: when it has not yet run out, the registry still holds the session."""
    timeout_s = 0.3
    leases, registry = Leases(timeout_s), Membership(timeout_s, ["b1"])
    registry.register("b1", 0, 0.0)
    leases.taken([("b1", 0)], 0.0)
    t_s = 0.0
    while leases.lapsed_for_s(("b1", 0), t_s) is None and t_s < timeout_s:
        t_s += 0.01
        registry.expire(t_s)
        assert registry.alive() == ["b1"]
    assert timeout_s - t_s >= leases.heartbeat_period_s - 0.01 - 1e-9
