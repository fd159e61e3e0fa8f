"""A key holder cannot remove another broker in realtime runs either: each realtime broker checks the reports it
fetches against the incarnations the membership registry issued (its heartbeat brings them), its own clock plus
the skew allowance, and the sequence window.

The forger holds the cluster key (`forge:` with `signed: true` under `hmac_key_file`) and sends zeros in b2's name
at round 6, with one extreme header field at a time (the others plausible: the victim's incarnation 0, its clock,
a sequence number 8, newer than any b2 can have sent by round 6 and within the window), or all three. Were a field
believed, b2 would leave every view (for good with the incarnation or the sequence number, for a round or two with
the time).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from actors.hosts import adversary
from experiments.run import run_scenario
from experiments.scenario import parse_scenario

ROUNDS, FORGED_AT = 14, 6
BROKERS = ("b1", "b2", "b3")
PLAUSIBLE = {"FORGED_INCARNATION": 0, "FORGED_SEQ": 8, "FORGED_AHEAD_MS": 0}  # b2's incarnation, clock, a seq in range


def run_with_a_forgery(tmp_path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    (tmp_path / "cluster.key").write_text("a-cluster-key-the-forger-stole\n")
    (tmp_path / "cluster.key").chmod(0o600)  # a key others may read is refused
    data = {
        "name": "realtime-forgery",
        "seed": 3,
        "rounds": ROUNDS,
        "interval_s": 0.1,
        "mode": "realtime",
        "backend": "local",
        "policy": {"name": "fair-share-safe"},
        "reporting": {"threshold_pct": 10, "force_every": 2, "hmac_key_file": "cluster.key"},
        # generous timeouts: a timer late on a busy machine must not take a broker out of a view by itself
        "cleanup": {"stale_after_rounds": 20, "session_timeout_rounds": 20, "membership": True},
        "groups": [{"name": "g", "quota": {"publish_msgs_per_s": 90}}],
        "brokers": [{"name": name, "workload": [{"group": "g", "msgs_per_s": 40}]} for name in BROKERS],
        "events": [{"at": FORGED_AT, "forge": {"as": "b2", "signed": True, "report": "zero"}}],
    }
    run_dir = run_scenario(parse_scenario(data, str(tmp_path / "scenario.yaml")), tmp_path / "run", progress=False)
    return pd.read_parquet(run_dir / "rounds"), pd.read_parquet(run_dir / "messages")


def assert_b2_stays_in_every_view(rounds: pd.DataFrame) -> None:
    """Every broker heard all three before the forgery, and from then on never lost one."""
    for broker in BROKERS:
        views = rounds[rounds["broker"] == broker].groupby("round")["view_brokers"].max()
        assert views.loc[: FORGED_AT - 1].max() == len(BROKERS), (broker, views.to_dict())
        heard_all = views.index[views == len(BROKERS)].min()
        assert (views.loc[heard_all:] == len(BROKERS)).all(), (broker, views.to_dict())


@pytest.mark.parametrize(
    "extreme",
    [
        ("FORGED_INCARNATION",),  # only the registry check stops it
        ("FORGED_INCARNATION", "FORGED_SEQ", "FORGED_AHEAD_MS"),  # the forge event as shipped
    ],
)
def test_an_incarnation_the_registry_did_not_issue_is_refused_in_realtime(tmp_path, monkeypatch, extreme):
    for name, value in PLAUSIBLE.items():
        if name not in extreme:
            monkeypatch.setattr(adversary, name, value)
    rounds, messages = run_with_a_forgery(tmp_path)
    assert_b2_stays_in_every_view(rounds)
    # refused by the registry check (counted as rejected), by each of the two others: not merely discarded
    rejected = messages.groupby("broker")["reports_rejected"].sum()
    assert rejected.get("b1", 0) == 1 and rejected.get("b3", 0) == 1, rejected.to_dict()


@pytest.mark.parametrize("extreme", ["FORGED_AHEAD_MS", "FORGED_SEQ"])
def test_the_receivers_clock_and_the_sequence_window_hold_in_realtime(tmp_path, monkeypatch, extreme):
    """The incarnation is b2's own: the registry has nothing to object; the time ten years ahead (beyond the
    receiver's clock plus the skew allowance) or the sequence number at the end of the range gets it discarded."""
    for name, value in PLAUSIBLE.items():
        if name != extreme:
            monkeypatch.setattr(adversary, name, value)
    rounds, messages = run_with_a_forgery(tmp_path)
    assert_b2_stays_in_every_view(rounds)
    assert messages["reports_rejected"].sum() == 0  # discarded for its time or sequence, not rejected
