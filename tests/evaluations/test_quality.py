"""The quality suite (evaluations/quality.py): every scenario parses (no run), the grid is complete, the losses are
right, and a cell gives the mean and the worst."""

from __future__ import annotations

import pytest

from allocator.policies import POLICIES
from evaluations import quality, quality_suite
from experiments.scenario import parse_scenario


def test_every_case_of_the_suite_parses_with_a_distinct_run_id():
    cases = quality_suite.suite()
    lockstep = len(quality_suite.DISTURBANCES) * 4 * len(POLICIES) * 5
    realtime = len(quality_suite.REALTIME_DISTURBANCES) * 4 * len(quality_suite.REALTIME_POLICIES) * 5
    assert len(cases) == lockstep + realtime
    assert len({case.run_id for case in cases}) == len(cases)
    for case in cases:
        scenario = parse_scenario(quality_suite.scenario_data(case), source=case.run_id)
        assert (scenario.backend, scenario.rounds, scenario.policy.name) == ("local", 50, case.policy)
        assert scenario.mode == case.mode


def scenario_of(disturbance: str, loss: str = "0%"):
    return parse_scenario(quality_suite.scenario_data(quality_suite.Case(disturbance, loss, "fair-share", 1)))


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
    five = scenario_of("five-groups")
    assert (len(five.groups), len(five.brokers)) == (5, 5)
    assert {event.kind for event in five.events} == {"demand", "crash", "restart", "quota"}
    assert [event.at for event in scenario_of("registry-outage").events] == [20]


def test_the_bursty_loss_averages_30_percent():
    channel = scenario_of("cold-start", "30% bursts").channel
    burst = channel.burst
    bad_share = burst.p_enter / (burst.p_enter + burst.p_exit)  # stationary share of the bad state
    assert (1 - bad_share) * channel.loss + bad_share * burst.loss_bad == pytest.approx(0.3)
    assert scenario_of("cold-start", "30%").channel.burst is None


def values(metric: str, mean: float | None, worst: float | None) -> dict[str, float | None]:
    return {metric: mean, f"{metric}_worst": worst}


def test_a_cell_shows_mean_and_worst_and_is_marked_on_the_statistic_its_goal_judges():
    assert quality.cell("peak_overshoot", values("peak_overshoot", 0.01, 0.08), "0%") == "1.0% / 8.0%"
    assert quality.cell("peak_overshoot", values("peak_overshoot", 0.01, 0.08), "30%") == "1.0% / 8.0% ✓"
    assert quality.cell("starved", values("starved", 0.0, 0.0), "10%") == "0.0% / 0.0% ✓"
    assert quality.cell("jain", values("jain", None, None), "0%") == "— / —"
    assert quality.cell("utilization", values("utilization", 1.145, 1.0), "30%") == "1.145 / 1.000"
    assert quality.cell("utilization", values("utilization", 0.99, 0.9), "30%") == "0.990 / 0.900 ✓"
    assert quality.cell("bytes_per_round", values("bytes_per_round", 812.4, 2000.0), "0%") == "812 / 2,000"


def group(peak, over, waits, jain, utilization, fair_share, starved):
    return {
        "peak_overshoot": peak,
        "rounds_over_quota": over,
        "events": [{"rounds_to_converge": wait} for wait in waits],
        "jain": jain,
        "utilization": utilization,
        "fair_share_broker_rounds": fair_share,
        "starved_broker_rounds": starved,
        "starved": starved / fair_share if fair_share else None,
    }


def test_runs_are_pooled_into_the_mean_and_the_worst():
    first = {"groups": [group(0.2, 0.04, [0, 3, None], 0.9, 1.0, 30, 3), group(0.0, 0.0, [1], 1.0, 0.8, 10, 0)]}
    first["bytes_per_round"] = 300.0
    second = {"groups": [group(0.1, 0.0, [2], None, 1.0, 10, 1)], "bytes_per_round": 500.0}
    cell = quality.pooled([first, second])
    assert cell == {
        "peak_overshoot": pytest.approx(0.15),  # the mean of the runs' worst groups
        "peak_overshoot_worst": 0.2,
        "over_quota_per_100": pytest.approx(1.0),  # run means 2 and 0
        "over_quota_per_100_worst": pytest.approx(4.0),  # the worst group of any run
        "rounds_to_converge": pytest.approx(1.5),  # 0, 3, 1, 2; the one never converged apart
        "rounds_to_converge_worst": 3,
        "never_converged": 0.2,
        "jain": pytest.approx(0.95),  # an undefined Jain is left out
        "jain_worst": 0.9,
        "utilization": pytest.approx(0.95),
        "utilization_worst": 0.8,
        "starved": 0.08,  # 4 of 50 broker-rounds
        "starved_worst": 0.1,
        "bytes_per_round": 400.0,
        "bytes_per_round_worst": 500.0,
    }


@pytest.mark.parametrize(
    ("text", "seeds"), [("1-5", (1, 2, 3, 4, 5)), ("7", (7,)), ("3-4, 9,1", (1, 3, 4, 9)), ("2-2", (2,))]
)
def test_seeds_are_ranges_and_numbers(text, seeds):
    assert quality._seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "x", "5-1", "1-", "-3", "1.5"])
def test_a_bad_seed_is_named(text):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="is not a number or a range like 1-100"):
        quality._seeds(text)


def test_other_seeds_make_a_subset_that_leaves_the_saved_results_alone():
    assert not quality_suite.Subset(seeds=(1, 2, 3, 4, 5)).whole
    assert quality_suite.Subset().whole


@pytest.mark.parametrize(
    ("seeds", "text"),
    [((1, 2, 3, 4, 5), "1, 2, 3, 4, 5"), (tuple(range(1, 101)), "1-100"), ((1, 2, 3, 4, 5, 6, 9, 10), "1-6, 9, 10")],
)
def test_a_long_run_of_seeds_is_written_as_a_range_that_reads_back(seeds, text):
    assert quality.seed_list(list(seeds)) == text
    assert quality._seeds(text) == seeds


def test_the_tail_is_the_recommended_policy_over_a_hundred_seeds_in_lockstep():
    from allocator.policies import RECOMMENDED

    cases = quality_suite.suite(quality_suite.TAIL.seeds, quality_suite.TAIL)
    assert len(cases) == 5 * 2 * 100 and {case.policy for case in cases} == {RECOMMENDED}
    assert {case.mode for case in cases} == {"lockstep"} and {case.seed for case in cases} == set(range(1, 101))
    assert set(quality_suite.TAIL.losses) <= set(quality_suite.LOSSES)


@pytest.mark.parametrize("other", [["--quick"], ["--seeds", "1-3"], ["--losses", "30%"]])
def test_the_tail_refuses_another_subset(other, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["quality", "--tail", *other])
    with pytest.raises(SystemExit) as exit_:
        quality.main()
    assert exit_.value.code == 2 and "--tail runs its own subset" in capsys.readouterr().err
