"""End to end on the local backend, lockstep: ramped quotas (the shipped ramp-up scenario) and the fallbacks of
the shipped fallbacks scenario (every broker cut off, then a registry outage), read back from the telemetry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_runtime_events import SCENARIOS, Run, run_local

from allocator.node.broker_node import MIN_LIMIT
from experiments.scenario import load_scenario

MSGS = "publish_msgs_per_s"
SLOPE = 10.0  # ramp-up.yaml: 40 -> 240 over 20 s
GAP = range(14, 20)  # ramp-up-traffic.csv: no traffic in these rounds


@pytest.fixture(scope="module")
def ramp_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    scenario = load_scenario(SCENARIOS / "ramp-up.yaml", {"backend": "local", "rounds": 30})
    return run_local(tmp_path_factory.mktemp("ramp"), scenario)


def _pool(run: Run, group: str) -> np.ndarray:
    """The pool per round, checked to be the same at both brokers (they see the same reports)."""
    rows = run.rounds[run.rounds.group == group]
    per_broker = rows.pivot(index="round", columns="broker", values="pool")
    assert (per_broker["broker-1"] == per_broker["broker-2"]).all()
    return per_broker["broker-1"].to_numpy()


def test_a_scheduled_pool_climbs_one_slope_per_second_through_the_gap(ramp_run):
    rounds = np.arange(30)
    np.testing.assert_allclose(_pool(ramp_run, "scheduled"), np.minimum(40 + SLOPE * (rounds + 1), 240))


def test_a_relaxed_pool_pauses_in_the_gap_and_resumes(ramp_run):
    pool = _pool(ramp_run, "relaxed")
    assert len(set(pool[GAP.start - 1 : GAP.stop])) == 1  # the pool for the gap's epochs does not move
    assert pool[GAP.stop] == pool[GAP.start - 1] + SLOPE
    assert pool[GAP.start - 1] < 240


def test_a_go_back_n_pool_loses_a_slope_per_idle_epoch(ramp_run):
    pool = _pool(ramp_run, "go-back-n")  # pool[k] is the pool of epoch k + 1, set at the end of round k
    last_with_requests = pool[GAP.start - 2]  # epoch 13's, fully used: it earned a slope
    assert pool[GAP.start] == last_with_requests + SLOPE - SLOPE  # epoch 15: one idle epoch (14) behind it
    assert (np.diff(pool[GAP.start : GAP.stop]) == -SLOPE).all()


def test_only_if_used_stops_where_the_traffic_stops_using_80_percent(ramp_run):
    pool = _pool(ramp_run, "only-if-used")
    usage = ramp_run.total("usage", "only-if-used")
    # After the gap, 120 msgs/s in all: 120 >= 0.8 * 150 took it to 160, and 120 < 0.8 * 160 keeps it there.
    np.testing.assert_allclose(usage.loc[GAP.stop + 2 :], 120)
    assert (pool[GAP.stop + 2 :] == 160).all()
    assert (np.diff(pool[: GAP.start]) >= 0).all()


def test_the_limits_of_a_ramped_group_add_up_to_at_most_its_pool(ramp_run):
    rows = ramp_run.rounds
    sums = rows.groupby(["group", "round"]).agg(limit=("limit", "sum"), pool=("pool", "first"))
    served = rows.groupby(["group", "round"])["demand"].sum() > 0
    assert (sums.limit[served] <= sums.pool[served] + 1e-9).all()
    assert (sums.pool <= 240).all()


AFTER = 8  # fallbacks.yaml: fallback.after_rounds
PARTITION, HEALED, OUTAGE, RESTORED = 20, 45, 60, 75


@pytest.fixture(scope="module")
def closed_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    scenario = load_scenario(SCENARIOS / "fallbacks.yaml", {"backend": "local", "fallback.mode": "closed"})
    return run_local(tmp_path_factory.mktemp("fallback"), scenario)


def _first_fallback_round(run: Run, broker: str, after: int) -> int:
    limits = run.series("limit", broker, "tenant-a/ns-1")
    return int(limits[(limits.index >= after) & (limits == MIN_LIMIT)].index.min())


def _last_heard(run: Run, broker: str, before: int) -> int:
    """The last round before `before` in which another broker published a report (reports are suppressed while
    usage holds, so the silence a broker counts may start before the partition or the outage)."""
    rows = run.rounds
    return int(rows[(rows.broker != broker) & rows.reported & (rows["round"] < before)]["round"].max())


@pytest.mark.parametrize("broker", ["broker-1", "broker-2", "broker-3", "broker-4"])
def test_a_cut_off_broker_falls_back_after_after_rounds_without_a_report_and_recovers(closed_run, broker):
    last_heard = _last_heard(closed_run, broker, PARTITION)
    assert _first_fallback_round(closed_run, broker, PARTITION - 10) == last_heard + AFTER
    limits = closed_run.series("limit", broker, "tenant-a/ns-1")
    assert (limits.loc[last_heard + AFTER : HEALED - 1] == MIN_LIMIT).all()
    assert (limits.loc[HEALED + 6 : OUTAGE - 1] > MIN_LIMIT).all()  # reports came back: the policy again


@pytest.mark.parametrize("broker", ["broker-1", "broker-4"])
def test_a_registry_outage_counts_as_silence(closed_run, broker):
    # Counted from the last report heard (the outage hides the ones that come during it).
    first = _last_heard(closed_run, broker, OUTAGE) + AFTER
    assert OUTAGE <= first <= OUTAGE + AFTER - 1
    assert _first_fallback_round(closed_run, broker, OUTAGE - 10) == first
    limits = closed_run.series("limit", broker, "tenant-a/ns-1")
    assert (limits.loc[first : RESTORED - 1] == MIN_LIMIT).all()
    assert (limits.loc[RESTORED + 6 :] > MIN_LIMIT).all()
    kinds = closed_run.events.set_index("round")["kind"]
    assert kinds.loc[OUTAGE] == "registry_outage" and kinds.loc[RESTORED] == "registry_restored"


def test_no_fallback_limit_is_above_the_quota(tmp_path: Path):
    scenario = load_scenario(SCENARIOS / "fallbacks.yaml", {"backend": "local", "fallback.mode": "open"})
    run = run_local(tmp_path, scenario)
    assert (run.rounds.limit <= run.rounds.quota).all()
    silent = run.rounds[run.rounds["round"].between(OUTAGE + AFTER, RESTORED - 1)]
    assert (silent.limit == 200).all()  # open: every broker the whole quota
