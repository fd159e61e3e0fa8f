"""The quality benchmark's suite: every scenario parses (no run), the grid is complete, the losses are right."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the benchmarks import `common`

import bench_quality  # noqa: E402

from allocator.policies import POLICIES  # noqa: E402
from experiments.scenario import parse_scenario  # noqa: E402


def test_every_case_of_the_suite_parses_with_a_distinct_run_id():
    cases = bench_quality.suite()
    assert len(cases) == 11 * 4 * len(POLICIES) * 2
    assert len({case.run_id for case in cases}) == len(cases)
    for case in cases:
        scenario = parse_scenario(bench_quality.scenario_data(case), source=case.run_id)
        assert (scenario.backend, scenario.rounds, scenario.policy.name) == ("local", 50, case.policy)


def scenario_of(disturbance: str, loss: str = "0%"):
    return parse_scenario(bench_quality.scenario_data(bench_quality.Case(disturbance, loss, "fair-share", 1)))


def test_the_disturbances_are_what_they_say():
    join = scenario_of("join")
    assert [broker.join_at for broker in join.brokers] == [0, 0, 0, 0, 20]
    cut = scenario_of("quota-cut")
    assert cut.groups[0].quota == {"publish_msgs_per_s": 150.0}
    assert [(event.at, event.kind, event.params) for event in cut.events] == [
        (20, "quota", {"publish_msgs_per_s": 80.0})
    ]
    restart = scenario_of("restart")
    assert [(event.at, event.kind, event.target) for event in restart.events] == [
        (15, "crash", "broker-2"),
        (25, "restart", "broker-2"),
    ]
    many = scenario_of("many-groups")
    assert (len(many.groups), len(many.brokers)) == (40, 5)
    assert sum(len(broker.workload) for broker in many.brokers) == 40 * 3


def test_the_bursty_loss_averages_30_percent():
    channel = scenario_of("cold-start", "30% bursts").channel
    burst = channel.burst
    bad_share = burst.p_enter / (burst.p_enter + burst.p_exit)  # stationary share of the bad state
    assert (1 - bad_share) * channel.loss + bad_share * burst.loss_bad == pytest.approx(0.3)
    assert scenario_of("cold-start", "30%").channel.burst is None


def test_a_cell_is_marked_when_it_meets_the_goal_of_its_loss():
    assert bench_quality.cell("peak_overshoot", 0.08, "0%") == "8.0%"
    assert bench_quality.cell("peak_overshoot", 0.08, "30%") == "8.0% ✓"
    assert bench_quality.cell("starved", 0.0, "10%") == "0.0% ✓"
    assert bench_quality.cell("never_converged", 0.0, "0%") == "0%"  # no goal: never marked
    assert bench_quality.cell("jain", None, "0%") == "—"
    assert bench_quality.cell("utilization", 1.145, "30%") == "1.145"  # over the quota: no mark
    assert bench_quality.cell("utilization", 0.99, "30%") == "0.990 ✓"


def test_runs_are_pooled_into_one_cell():
    def run(peak, per_100, waits, jain, fair_share, starved):
        return {
            "peak_overshoot": peak,
            "rounds_over_quota_per_100_rounds": per_100,
            "waits": waits,
            "jain": jain,
            "utilization": 1.0,
            "fair_share_broker_rounds": fair_share,
            "starved_broker_rounds": starved,
        }

    cell = bench_quality.pooled([run(0.2, 4.0, [0, 3, None], 0.9, 30, 3), run(0.1, 0.0, [2], None, 10, 1)])
    assert cell == {
        "peak_overshoot": pytest.approx(0.15),  # the mean of the runs' peaks
        "rounds_over_quota_per_100_rounds": 2.0,
        "mean_rounds_to_converge": pytest.approx(5 / 3),  # 0, 3, 2; the one never converged apart
        "never_converged": 0.25,
        "jain": 0.9,  # an undefined Jain is left out
        "utilization": 1.0,
        "starved": 0.1,  # 4 of 40 broker-rounds
    }
