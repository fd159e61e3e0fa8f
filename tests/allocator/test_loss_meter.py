"""The loss a broker measures from its peers' sequence gaps, and the copies of a change it asks for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_broker_node import MSGS, T0, node

from allocator.node.loss_meter import LossMeter
from allocator.node.usage_table import SEQ_SLACK
from allocator.policies.fair_share_safe.reporting import copies_needed
from allocator.wire.codec import encode_report
from allocator.wire.usage_report import UsageReport


def rounds(meter: LossMeter, *received: list[tuple[str, int, int]]) -> float:
    """Observe one round per argument, each a list of (broker, incarnation, seq); the loss after the last."""
    for reports in received:
        meter.observe([b for b, _, _ in reports], [i for _, i, _ in reports], [s for _, _, s in reports])
    return meter.loss


@pytest.mark.parametrize(
    ("label", "received", "expected"),
    [
        ("no gap", [[("b", 0, 1)], [("b", 0, 2)], [("b", 0, 3)]], 0.0),
        # round 2: 1 * 0.5 + 1 received, 2 missed
        ("a gap of two", [[("b", 0, 1)], [("b", 0, 4)]], 2 / 3.5),
        ("a duplicate and an overtaken copy count for nothing", [[("b", 0, 2)], [("b", 0, 2), ("b", 0, 1)]], 0.0),
        ("its own reports count for nothing", [[("a", 0, 1)], [("a", 0, 9)]], 0.0),
        ("a new incarnation starts a new count", [[("b", 0, 7)], [("b", 1, 1)]], 0.0),
        ("an older incarnation counts for nothing", [[("b", 1, 3)], [("b", 0, 9)]], 0.0),
        # round 2: the gap 1 -> 3 seen however the copies are ordered: 1 missed, 0.5 + 2 received
        ("copies of a round in any order", [[("b", 0, 1)], [("c", 0, 1), ("b", 0, 3)]], 1 / 3.5),
        # round 3: the gap's weight halves, 1 * 0.5 missed, (1 * 0.5 + 1) * 0.5 + 1 received
        ("older gaps weigh less", [[("b", 0, 1)], [("b", 0, 3)], [("b", 0, 4)]], 0.5 / 2.25),
    ],
)
def test_loss_cases(label, received, expected):
    assert rounds(LossMeter("a", memory=0.5), *received) == pytest.approx(expected)


def test_a_bad_memory_is_refused():
    with pytest.raises(ValueError, match="memory must be in"):
        LossMeter("a", memory=1.0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 2), st.integers(1, 30)), max_size=6), max_size=8)
)
def test_the_loss_is_a_share_and_none_without_gaps(received):
    loss = rounds(LossMeter("a"), *received)
    assert 0.0 <= loss <= 1.0
    sent: dict[str, int] = {}
    in_order = []
    for reports in received:  # each round, one report of each broker that sent one, numbered on from its last
        in_order.append([(b, 0, sent.get(b, 0) + 1) for b in sorted({b for b, _, _ in reports})])
        sent.update({b: seq for b, _, seq in in_order[-1]})
    assert rounds(LossMeter("a"), *in_order) == 0.0  # every peer's numbers consecutive: nothing lost


@pytest.mark.parametrize(
    ("loss", "odds", "most", "copies"),
    [
        (0.0, 0.01, 5, 1),  # no loss: one copy
        (0.3, 1.0, 5, 1),  # the mechanism off
        (0.1, 0.02, 5, 2),  # 0.1 ** 2 = 0.01
        (0.3, 0.01, 5, 4),  # 0.3 ** 3 = 0.027, 0.3 ** 4 = 0.0081
        (0.6, 0.01, 5, 5),  # 10 wanted, at most force_every
        (1.0, 0.01, 5, 5),
    ],
)
def test_copies_needed(loss, odds, most, copies):
    assert copies_needed(lambda n: loss**n, odds, most) == copies


@settings(max_examples=300, deadline=None)
@given(loss=st.floats(0.0, 1.0), odds=st.floats(1e-6, 1.0), most=st.integers(1, 10))
def test_the_copies_needed_are_the_fewest_that_reach_the_odds(loss, odds, most):
    copies = copies_needed(lambda n: loss**n, odds, most)
    assert 1 <= copies <= most
    if copies < most:
        assert loss**copies <= odds
    if copies > 1:
        assert loss ** (copies - 1) > odds


def test_before_any_report_every_loss_is_possible():
    """A uniform prior: the chance that n copies are all lost is the mean of loss ** n over [0, 1]."""
    meter = LossMeter("a")
    assert [meter.chance_all_lost(n) for n in (1, 2, 4)] == pytest.approx([1 / 2, 1 / 3, 1 / 5])
    assert copies_needed(meter.chance_all_lost, 0.01, 5) == 5  # a change sent every round for a forced cycle


@pytest.mark.parametrize("loss", [0.0, 0.1, 0.3])
def test_with_many_reports_counted_the_chance_is_the_measured_loss_to_the_power(loss):
    """One peer numbering a report a round, every 1 / loss-th lost, for long enough that the counts hold about
    a thousand reports: the chance comes close to loss ** n, from above."""
    meter = LossMeter("a", memory=0.999)
    period = round(1 / loss) if loss else 0
    seqs = [seq for seq in range(1, 20_001) if not period or seq % period]
    rounds(meter, *[[("b", 0, seq)] for seq in seqs])
    for copies in (1, 2, 4):
        assert meter.loss**copies <= meter.chance_all_lost(copies) <= meter.loss**copies * 1.1 + 1e-3


def test_a_few_clean_rounds_ask_for_more_copies_than_many():
    """Luck over a few reports does not prove a channel lossless: 3 reports of a peer with no gap leave a
    loss of a third quite possible (2 copies or more); 300 do not (1 copy)."""
    few, many = LossMeter("a"), LossMeter("a", memory=0.999)
    rounds(few, *[[("b", 0, seq)] for seq in range(1, 4)])
    rounds(many, *[[("b", 0, seq)] for seq in range(1, 301)])
    assert few.loss == many.loss == 0.0
    assert copies_needed(few.chance_all_lost, 0.01, 5) > 1
    assert copies_needed(many.chance_all_lost, 0.01, 5) == 1


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.tuples(st.sampled_from("bc"), st.just(0), st.integers(1, 30)), max_size=4), max_size=10),
    st.integers(1, 8),
)
def test_the_chance_is_a_probability_that_falls_with_every_copy(received, copies):
    meter = LossMeter("a")
    rounds(meter, *received)
    assert 0.0 < meter.chance_all_lost(copies + 1) < meter.chance_all_lost(copies) <= 1.0


# -- what one report, accepted or not, can do to a broker's measure -----------------------------------------


def honest_round(receiver, sender, seq: int, now_s: float) -> None:
    """`receiver` hears report `seq` of `sender` (incarnation 0) for group 1, sent at `now_s`."""
    report = UsageReport(sender, 0, seq, int(now_s * 1000), 1000, ("publish_msgs_per_s",), np.array([1]),
                         np.array([[10.0]]), np.array([[10.0]]))  # fmt: skip
    receiver.receive([encode_report(report)], now_s)


def test_two_rounds_of_a_peer_received_together_are_no_loss():
    """On timers a peer's reports of two rounds often arrive in one batch; the later replaces every entry of the
    earlier, which was received all the same: no gap (before: one report in three counted missed)."""
    receiver = node("a", [100.0], policy="fair-share-safe")
    honest_round(receiver, "b", 1, T0 + 1)
    reports = [UsageReport("b", 0, seq, int((T0 + seq) * 1000), 1000, MSGS, np.array([1]), np.array([[10.0]]),
                           np.array([[10.0]])) for seq in (2, 3)]  # fmt: skip
    inbox = receiver.receive([encode_report(report) for report in reports], T0 + 3)
    assert (inbox.accepted, inbox.discarded) == (1, 1)  # the table keeps the later one
    assert receiver.loss_meter.loss == 0.0
    honest_round(receiver, "b", 5, T0 + 5)  # report 4 is lost: that gap is still seen
    assert receiver.loss_meter.loss > 0.0


@settings(max_examples=100, deadline=None)
@given(
    forged_incarnation=st.one_of(st.just(0), st.integers(0, 2**62)),
    forged_seq=st.one_of(st.integers(0, 40), st.just(2**63 - 1)),
    at_round=st.integers(1, 10),
)
def test_no_single_report_stalls_the_measure(forged_incarnation, forged_seq, at_round):
    """A sender's honest reports 1, 2, 3... with one report in its name slipped in (any incarnation, any
    sequence number, the current time): the loss the receiver measures moves at most by what the usage table
    lets a report claim (SEQ_SLACK missed reports and the rounds elapsed), and once the sender's honest
    numbers pass the forged one, the measure is the honest one again, not stuck (issue 22: a seq of 2**63 - 1
    left the loss at 1.0 for good)."""

    def run(forge: bool) -> list[float]:
        receiver = node("a", [100.0], policy="fair-share-safe")
        losses = []
        for round_index in range(1, 40):
            now_s = T0 + round_index
            if forge and round_index == at_round:
                forged = UsageReport("b", forged_incarnation, forged_seq, int(now_s * 1000), 1000, MSGS,
                                     np.array([1]), np.array([[0.0]]), np.array([[0.0]]))  # fmt: skip
                receiver.receive([encode_report(forged)], now_s)
            honest_round(receiver, "b", round_index, now_s)
            losses.append(receiver.loss_meter.loss)
        return losses

    honest, forged = run(False), run(True)
    assert honest[-1] == 0.0
    assert forged[-1] <= 0.05, forged  # the honest reports count again, and the old gap has faded
    assert max(forged) <= (SEQ_SLACK + at_round + 1) / (SEQ_SLACK + at_round + 2)
