"""A broker speaks only for itself: issue 11's forgery (a zero report in b2's name with incarnation 2**62,
sequence 2**63 - 1 and a far-future time) removes b2 from no view, whichever check stops it: the per-broker
signature, the receiver's clock, the sequence window, or the incarnations the membership registry issued."""

from __future__ import annotations

import os

import numpy as np
import pytest

from allocator import policies
from allocator.node.broker_node import BrokerNode
from allocator.node.node_settings import NodeSettings
from allocator.node.usage_table import SEQ_SLACK, Merge
from allocator.wire.codec import encode_report
from allocator.wire.signing import PublicKeys, Signer
from allocator.wire.usage_report import UsageReport

MSGS = ("publish_msgs_per_s",)
T0 = 1000.0
CLUSTER_KEY = b"stolen-cluster-key"
SIGNERS = {name: Signer(os.urandom(32)) for name in ("b1", "b2")}
PUBLIC = PublicKeys({name: signer.public_key() for name, signer in SIGNERS.items()})


def cluster(per_broker: bool) -> dict[str, BrokerNode]:
    keys = {"public_keys": PUBLIC} if per_broker else {"hmac_key": CLUSTER_KEY}
    settings = NodeSettings(dimensions=MSGS, policy=policies.bind("fair-share-safe"), threshold_pct=0.0, **keys)
    signers = SIGNERS if per_broker else {}
    return {
        name: BrokerNode(name, np.array([1]), np.array([[100.0]]), settings, signer=signers.get(name))
        for name in ("b1", "b2")
    }


def round_trip(nodes: dict[str, BrokerNode], now_s: float, rate: float = 40.0) -> None:
    """One round: b2 reports `rate` msgs/s (a change from its last report, so it is not suppressed); b1 hears it."""
    traffic = nodes["b2"].admit(np.array([rate]), np.array([100.0]), now_s)
    outbox = nodes["b2"].build_reports(traffic, now_s)
    assert nodes["b1"].receive([payload for _, payload in outbox.payloads], now_s, {"b1": 0, "b2": 0}).accepted == 1


def forged(now_s: float, **header: int) -> UsageReport:
    fields = {"incarnation": 2**62, "seq": 2**63 - 1, "sent_at_ms": int(now_s * 1000) + 10**12} | header
    return UsageReport(
        broker="b2", interval_ms=1000, dimensions=MSGS, group_ids=np.array([1]), usage=np.zeros((1, 1)), **fields
    )


def b2_in_view(node: BrokerNode) -> bool:
    return ("b2" in node.table.brokers) and (1, "b2") in node.table.entries()


def test_a_key_holder_cannot_sign_as_another_broker() -> None:
    nodes = cluster(per_broker=True)
    round_trip(nodes, T0)
    forgery = encode_report(forged(T0, incarnation=0, seq=2, sent_at_ms=int(T0 * 1000)), signer=SIGNERS["b1"])
    inbox = nodes["b1"].receive([forgery], T0 + 1)
    assert inbox.rejected == 1 and b2_in_view(nodes["b1"])


@pytest.mark.parametrize(
    ("header", "outcome"),
    [
        ({}, Merge.TOO_NEW),  # the time ten years ahead is enough
        ({"sent_at_ms": int((T0 + 1) * 1000), "incarnation": 0}, Merge.SEQ_JUMP),  # on time: the sequence jumps
        ({"sent_at_ms": int((T0 + 1) * 1000), "seq": 2, "incarnation": 0}, Merge.ACCEPTED),  # in range: believed
    ],
)
def test_with_the_cluster_key_the_receivers_clock_and_the_sequence_window_stop_the_extreme_forgery(header, outcome):
    nodes = cluster(per_broker=False)
    round_trip(nodes, T0)
    assert nodes["b1"].table.merge(forged(T0 + 1, **header), T0 + 1) is outcome
    assert b2_in_view(nodes["b1"]) is (outcome is not Merge.ACCEPTED)  # only a forgery within every bound counts


def test_the_sequence_window_grows_one_number_per_interval_of_silence() -> None:
    nodes = cluster(per_broker=False)
    round_trip(nodes, T0)  # seq 1 accepted at T0
    later = T0 + 30  # 30 intervals of loss: the real broker may be 30 reports further on
    on_time = {"incarnation": 0, "sent_at_ms": int(later * 1000)}
    assert nodes["b1"].table.merge(forged(later, seq=1 + SEQ_SLACK + 31, **on_time), later) is Merge.SEQ_JUMP
    assert nodes["b1"].table.merge(forged(later, seq=1 + SEQ_SLACK + 30, **on_time), later) is Merge.ACCEPTED


def test_an_incarnation_the_registry_did_not_issue_is_rejected() -> None:
    nodes = cluster(per_broker=False)
    round_trip(nodes, T0)
    report = forged(T0 + 1, incarnation=2**62, seq=2, sent_at_ms=int((T0 + 1) * 1000))
    inbox = nodes["b1"].receive([encode_report(report, key=CLUSTER_KEY)], T0 + 1, {"b1": 0, "b2": 0})
    assert inbox.rejected == 1 and b2_in_view(nodes["b1"])
    round_trip(nodes, T0 + 1, rate=30.0)  # b2's real reports are still believed


def test_without_the_registry_the_extreme_incarnation_would_void_the_real_broker() -> None:
    """What the registry check is for: a report of a higher incarnation voids what the lower one said."""
    nodes = cluster(per_broker=False)
    round_trip(nodes, T0)
    report = forged(T0 + 1, incarnation=2**62, seq=2, sent_at_ms=int((T0 + 1) * 1000))
    nodes["b1"].receive([encode_report(report, key=CLUSTER_KEY)], T0 + 1)  # no `issued`: nothing to check against
    assert not b2_in_view(nodes["b1"])
