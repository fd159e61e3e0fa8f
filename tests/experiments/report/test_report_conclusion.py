"""The report's opening paragraph, written from the numbers (no Spark: the collected tables are given)."""

from __future__ import annotations

import pandas as pd

from experiments.report.conclusion import conclusion
from experiments.report.page import number, percent


def run(run_id: str, peak: float, per_100: float, bytes_per_round: float, converge: float, starved: float = 0.0):
    overall = {"peak_overshoot": peak, "rounds_over_quota_per_100_rounds": per_100, "starved": starved,
               "mean_rounds_to_converge": converge, "events_not_converged": 1, "events": 6}  # fmt: skip
    groups = [{"group": "ns-1", "peak_overshoot": peak / 2}, {"group": "ns-2", "peak_overshoot": peak}]
    return {"run_id": run_id, "policy": run_id, "bytes_published_per_round": bytes_per_round, "overall": overall,
            "groups": groups, "groups_total": 2_000}  # fmt: skip


def over(run_id: str, rounds: set[int], last: int = 40) -> pd.DataFrame:
    return pd.DataFrame({"run_id": run_id, "round": range(last), "over_quota": [r in rounds for r in range(last)]})


EVENTS = pd.DataFrame(
    {
        "run_id": ["safe", "pulsar", "pulsar", "pulsar"],
        "round": [0, 0, 12, 25],
        "kind": ["start", "start", "join", "crash"],
    }
)


def test_the_run_that_holds_the_quota_is_named_with_what_it_costs_and_when_the_others_go_over():
    runs = [run("pulsar", 0.40, 9.6, 300.0, 5.7), run("safe", 0.005, 0.0, 621.0, 2.5)]
    per_round = pd.concat([over("pulsar", {0, 12, 13, 14, 16, 26}), over("safe", set())])
    text = conclusion(runs, {"pulsar": "pulsar", "safe": "fair-share-safe"}, per_round, EVENTS)
    assert text.startswith('<p class="conclusion"><strong>fair-share-safe holds the quota on these runs</strong>')
    assert "(peak 0.5% over, in ns-2 of 2,000 groups)" in text  # the worst group named
    assert (
        "pulsar goes over: up to 40.0% over the quota, in ns-2 of 2,000 groups, 9.6 rounds in 100 more than 5% "
        "over: at the start" in text
    )
    assert (
        "at the start (round 0), after the join at round 12 (4 rounds from 12 to 16), after the crash at round 25 "
        in (text)
    )
    assert "it publishes 621 bytes of reports per round, converges in 2.5 rounds" in text
    assert "against pulsar: 300 bytes (fair-share-safe: 2.1x that), 5.7 rounds on average" in text
    assert "after an event (1 of 6 events never converged)" in text
    runs[1]["overall"]["events_not_converged"] = 0
    text = conclusion(runs, {"pulsar": "pulsar", "safe": "fair-share-safe"}, per_round, EVENTS)
    assert "after an event (every one of its 6 events)" in text and "never converged" not in text


def test_when_nobody_holds_it_the_closest_comes_first_and_a_single_run_speaks_for_itself():
    runs = [run("a", 0.4, 5.0, 10.0, 3.0), run("b", 0.2, 2.5, 10.0, 3.0)]
    per_round = pd.concat([over("a", {3, 4}), over("b", {3})])
    text = conclusion(runs, {"a": "a", "b": "b"}, per_round, EVENTS)
    assert "No policy holds the quota here</strong>; b comes closest: up to 20.0% over" in text
    assert text.index("b comes closest") < text.index("a goes over")
    alone = conclusion([runs[1]], {"b": "b"}, over("b", set()), EVENTS)
    assert "<strong>b holds the quota on this run</strong>" in alone and "b publishes 10 bytes" in alone


def test_numbers_are_printed_for_a_person():
    assert number(2.220446049250313e-16) == "0" and number(1234.4, 0) == "1,234"
    assert number(0.9660, 3) == "0.966" and number(None) == "—" and number(float("nan")) == "—"
    assert percent(0.368) == "36.8%" and percent(1e-17) == "0%"
