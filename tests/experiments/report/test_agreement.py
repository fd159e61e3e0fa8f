"""Rounds to agree on the pool size after membership events (experiments.report.agreement, the pandas half)."""

from __future__ import annotations

import pandas as pd

from experiments.report.agreement import rounds_to_agree


def per_round(run_id: str, agreed: list[bool]) -> pd.DataFrame:
    return pd.DataFrame({"run_id": run_id, "round": range(len(agreed)), "agreed": agreed})


def test_rounds_from_each_membership_event_to_the_first_agreed_round():
    rounds = per_round("r", [False, True, True, False, False, True, True, False, False])
    events = pd.DataFrame(
        {
            "run_id": ["r", "r", "r", "r", "other"],
            "round": [1, 3, 4, 7, 0],
            "kind": ["join", "leave", "quota", "crash", "join"],
            "target": ["b4", "b1", "g", "b2", "b1"],
        }
    )
    table = rounds_to_agree(rounds, events)
    assert table[["round", "kind", "rounds_to_agree"]].astype(object).values.tolist() == [
        [1, "join", 0],  # already agreed in its round
        [3, "leave", 2],
        [7, "crash", pd.NA],  # never agreed again
    ]  # the quota event is no membership event; the other run has no pool-size consensus
