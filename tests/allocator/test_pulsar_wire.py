"""Pulsar's ResourceUsageInfo on the wire: round trips through the protobuf classes, every rejection reason,
fuzzing that only ReportError escapes, the reader's stand-ins, and a broker pair on `wire: pulsar`."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from allocator.node.broker_node import BrokerNode
from allocator.node.node_settings import NodeSettings
from allocator.policies import bind
from allocator.wire.pulsar import usage_info
from allocator.wire.pulsar.reader import PulsarReader
from allocator.wire.pulsar.ResourceUsage_pb2 import ResourceUsageInfo
from allocator.wire.report_fields import DIMENSIONS, ReportError
from allocator.wire.usage_report import UsageReport

MAX_BYTES = 1 << 20
NAMES = {3: "tenant-a/ns-1", 7: "tenant-a/ns-2", 9: "tenant-b/ns-1"}
IDS = {name: group_id for group_id, name in NAMES.items()}


def report(usage: np.ndarray, dimensions: tuple[str, ...] = DIMENSIONS, broker: str = "broker-1") -> UsageReport:
    return UsageReport(
        broker=broker,
        incarnation=4,
        seq=12,
        sent_at_ms=1_000,
        interval_ms=1_000,
        dimensions=dimensions,
        group_ids=np.array(sorted(NAMES))[: len(usage)],
        usage=np.asarray(usage, dtype=np.float64),
    )


def encoded(usage: np.ndarray, dimensions: tuple[str, ...] = DIMENSIONS, interval_s: float = 1.0, **kw) -> bytes:
    rows = np.arange(len(usage))
    (payload,) = usage_info.encode_split(
        report(usage, dimensions, **kw), rows, np.array([0, len(rows)]), NAMES, interval_s
    )
    return payload


def reader(dimensions: tuple[str, ...] = DIMENSIONS, interval_s: float = 1.0, **kw) -> PulsarReader:
    return PulsarReader(dimensions, interval_s, IDS, max_bytes=MAX_BYTES, **kw)


rates = hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.just(4)), elements=st.floats(0, 1e9))


@settings(deadline=None)  # the first example pays for protobuf's first use
@given(usage=rates, interval_s=st.sampled_from([0.1, 1.0, 60.0]))
def test_round_trip_through_the_protobuf_classes_is_exact_to_one_count_per_period(
    usage: np.ndarray, interval_s: float
) -> None:
    payload = encoded(usage, interval_s=interval_s)
    info = ResourceUsageInfo.FromString(payload)  # the generated classes read what the codec wrote
    assert info.broker == "broker-1"
    assert [entry.owner for entry in info.usageMap] == [NAMES[g] for g in sorted(NAMES)][: len(usage)]
    counts = [
        [e.publish.messagesPerPeriod, e.publish.bytesPerPeriod, e.dispatch.messagesPerPeriod, e.dispatch.bytesPerPeriod]
        for e in info.usageMap
    ]
    np.testing.assert_array_equal(counts, np.rint(usage * interval_s))
    batch, rejected = reader(interval_s=interval_s).decode([payload], now_s=5.0)
    assert rejected == {}
    assert np.abs(batch.usage - usage).max() <= 0.5 / interval_s + 1e-9 * usage.max()
    np.testing.assert_array_equal(batch.group_ids, sorted(NAMES)[: len(usage)])


def test_a_dimension_the_run_does_not_measure_is_written_as_zero_and_never_read() -> None:
    payload = encoded(np.array([[12.0]]), dimensions=("publish_msgs_per_s",))
    entry = ResourceUsageInfo.FromString(payload).usageMap[0]
    assert (entry.publish.messagesPerPeriod, entry.publish.bytesPerPeriod) == (12, 0)
    assert entry.HasField("dispatch") and entry.dispatch.messagesPerPeriod == 0  # both filled, as Pulsar does
    batch, _ = reader(("publish_msgs_per_s",)).decode([payload], now_s=1.0)
    assert batch.usage.tolist() == [[12.0]]


def test_encode_split_writes_each_part_its_own_groups() -> None:
    usage = np.array([[1.0] * 4, [2.0] * 4, [3.0] * 4])
    parts = usage_info.encode_split(report(usage), np.array([0, 2, 1]), np.array([0, 2, 3]), NAMES, 1.0)
    owners = [[e.owner for e in ResourceUsageInfo.FromString(part).usageMap] for part in parts]
    assert owners == [["tenant-a/ns-1", "tenant-b/ns-1"], ["tenant-a/ns-2"]]


@pytest.mark.parametrize(
    ("usage", "names", "reason"),
    [
        ([[np.nan, 0, 0, 0]], NAMES, "negative or not finite"),
        ([[-1.0, 0, 0, 0]], NAMES, "negative or not finite"),
        ([[2.0**65, 0, 0, 0]], NAMES, "over 2\\*\\*64 - 1"),
        ([[1.0, 0, 0, 0]], {}, "group id 3 has no name"),
    ],
)
def test_encoder_refuses_what_has_no_count_or_no_name(usage: list, names: dict, reason: str) -> None:
    with pytest.raises(ReportError, match=reason):
        usage_info.encode_split(report(np.array(usage)), np.array([0]), np.array([0, 1]), names, 1.0)


def info_bytes(broker: object = "broker-1", owners: tuple = ("tenant-a/ns-1",), publish: bool = True) -> bytes:
    info = ResourceUsageInfo()
    if broker is not None:
        info.broker = broker
    for owner in owners:
        entry = info.usageMap.add(owner=owner)
        if publish:
            entry.publish.messagesPerPeriod, entry.publish.bytesPerPeriod = 5, 5000
    return info.SerializePartialToString()


def without_messages_count() -> bytes:
    info = ResourceUsageInfo(broker="broker-1")
    info.usageMap.add(owner="tenant-a/ns-1").publish.bytesPerPeriod = 5000
    return info.SerializePartialToString()


def invalid_utf8_broker() -> bytes:
    return b"\x0a\x02\xff\xfe"  # field 1 (broker), two bytes that are not UTF-8


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xff\xff\xff", "not a ResourceUsageInfo"),
        (info_bytes(broker=None), "required field missing: broker"),
        (info_bytes()[:-3], "not a ResourceUsageInfo"),  # truncated
        (without_messages_count(), r"required field missing: usageMap\[0\].publish.messagesPerPeriod"),
        (invalid_utf8_broker(), "broker is not valid UTF-8"),
        (info_bytes(broker=""), "broker is empty"),
        (info_bytes(owners=("",)), r"usageMap\[0\].owner is empty"),
        (info_bytes(owners=("tenant-a/ns-1", "tenant-a/ns-1")), "owner 'tenant-a/ns-1' appears more than once"),
        (info_bytes(publish=False), "group 'tenant-a/ns-1' has no publish usage"),
        (info_bytes(broker="stranger"), "unknown broker 'stranger'"),
        (b"\x0a\x01b" + b"\x00" * MAX_BYTES, f"over the limit of {MAX_BYTES}"),
        ("text", "report is str, not bytes"),
    ],
)
def test_each_bad_report_is_counted_with_its_reason(payload: bytes, reason: str) -> None:
    good = info_bytes()
    publish = ("publish_msgs_per_s", "publish_bytes_per_s")
    batch, rejected = reader(publish, known_brokers={"broker-1"}).decode([good, payload], now_s=1.0)
    assert list(rejected) == [1] and batch.brokers == ["broker-1"]
    assert re.search(reason, rejected[1].reason), rejected[1].reason


@settings(max_examples=300)
@given(data=st.binary(max_size=200))
def test_random_bytes_raise_only_report_error(data: bytes) -> None:
    batch, rejected = reader().decode([data], now_s=1.0)
    assert len(batch) + len(rejected) == 1


@settings(max_examples=200)
@given(cut=st.integers(0, 80), flip=st.integers(0, 80), bit=st.integers(0, 7))
def test_truncated_or_mutated_reports_raise_only_report_error(cut: int, flip: int, bit: int) -> None:
    payload = bytearray(encoded(np.array([[10.0, 1e4, 3.0, 3e3], [1.0, 2.0, 3.0, 4.0]]))[: max(cut, 1)])
    payload[flip % len(payload)] ^= 1 << bit
    batch, rejected = reader().decode([bytes(payload)], now_s=1.0)
    assert len(batch) + len(rejected) == 1


def test_owners_the_receiver_does_not_serve_are_skipped() -> None:
    payload = info_bytes(owners=("tenant-a/ns-2", "someone-else/ns", "tenant-a/ns-1"))
    batch, rejected = reader(("publish_msgs_per_s",)).decode([payload], now_s=1.0)
    assert rejected == {}
    assert batch.group_ids.tolist() == [3, 7]  # by id, the unknown owner left out
    assert batch.usage.tolist() == [[5.0], [5.0]]


def test_stand_ins_arrival_time_rounds_heard_and_the_registry_incarnation() -> None:
    pulsar_reader = reader(("publish_msgs_per_s",))
    first, _ = pulsar_reader.decode([info_bytes()], now_s=3.25, issued={"broker-1": 2})
    second, _ = pulsar_reader.decode([info_bytes(), info_bytes()], now_s=4.25)
    assert first.sent_at_ms == [3250] and first.incarnation == [2] and first.seq == [1]
    assert second.seq == [2, 2] and second.incarnation == [0, 0]  # one number a round; no registry: 0
    assert first.interval_ms == [1000] and not first.has_demand.any()


def test_within_a_round_the_report_that_arrived_last_wins_as_in_pulsar() -> None:
    settings = NodeSettings(dimensions=("publish_msgs_per_s",), policy=bind("pulsar"), wire="pulsar")
    node = BrokerNode("broker-2", np.array([3]), np.array([[100.0]]), settings, group_names={3: NAMES[3]})
    older, newer = (
        encoded(np.array([[rate, 0, 0, 0]]), broker="broker-1") for rate in (40.0, 25.0)
    )  # e.g. a delayed copy and the fresh one
    node.receive([older, newer], now_s=1.0)
    assert node.table.entries()[(3, "broker-1")].tolist() == [25.0]
    node.receive([newer, older], now_s=2.0)
    assert node.table.entries()[(3, "broker-1")].tolist() == [40.0]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"report_demand": True}, "not demand"),
        ({"policy": bind("fair-share-safe")}, "not demand"),
        ({"compress": True}, "plain protobuf"),
        ({"float32_rates": True}, "whole counts"),
        ({"hmac_key": b"k"}, "no signature"),
        ({"wire": "avro"}, "wire must be one of quotalab, pulsar"),
    ],
)
def test_settings_pulsar_cannot_carry_are_refused(changes: dict, reason: str) -> None:
    base = {"dimensions": ("publish_msgs_per_s",), "policy": bind("pulsar"), "wire": "pulsar"}
    with pytest.raises(ValueError, match=reason):
        NodeSettings(**(base | changes))


def test_a_broker_on_wire_pulsar_needs_group_names() -> None:
    settings = NodeSettings(dimensions=("publish_msgs_per_s",), policy=bind("pulsar"), wire="pulsar")
    with pytest.raises(ValueError, match="needs group_names"):
        BrokerNode("broker-1", np.array([3]), np.array([[100.0]]), settings)


def brokers_round(wire: str, demands: dict[str, list[float]], rounds: int = 4) -> tuple[np.ndarray, list[int]]:
    """Brokers exchanging reports for a few rounds (with one bad payload a round): each broker's limits, and
    the size of every payload."""
    settings = NodeSettings(
        dimensions=("publish_msgs_per_s", "publish_bytes_per_s"), policy=bind("pulsar"), wire=wire, force_every=1
    )
    quota = np.array([[100.0, 1e5], [60.0, 6e4], [30.0, 3e4]])
    nodes = [BrokerNode(name, np.array(sorted(NAMES)), quota, settings, group_names=NAMES) for name in demands]
    sizes = []
    for round_index in range(rounds):
        now_s = float(round_index)
        payloads = [b"\x00garbage"]
        for node, demand in zip(nodes, demands.values(), strict=True):
            traffic = node.admit(np.array(demand), np.full(3, 1000.0), now_s)
            payloads += [payload for _, payload in node.build_reports(traffic, now_s).payloads]
        sizes += [len(payload) for payload in payloads[1:]]
        for node in nodes:
            inbox = node.receive(payloads, now_s)
            assert inbox.rejected == 1 and inbox.accepted == len(nodes) - 1
            node.cleanup(now_s)
            node.allocate()
    return np.stack([node.limit for node in nodes]), sizes


def test_brokers_on_wire_pulsar_allocate_as_on_quotalab_wire_and_name_their_groups_every_round() -> None:
    """Same limits; Pulsar's reports name every group every round, quotalab's in a group's first report only
    (then ids): more bytes than Pulsar's in the first round, fewer after it."""
    demands = {"broker-1": [80.0, 10.0, 0.0], "broker-2": [40.0, 30.0, 20.0], "broker-3": [5.0, 60.0, 25.0]}
    pulsar_limits, pulsar_sizes = brokers_round("pulsar", demands)
    quotalab_limits, quotalab_sizes = brokers_round("quotalab", demands)
    np.testing.assert_array_equal(pulsar_limits, quotalab_limits)  # whole rates: the counts lose nothing
    assert (pulsar_limits[:, :2, 0] < [[100, 60]]).any()  # the policy did split the quotas
    first_round = len(demands)
    assert sum(quotalab_sizes[:first_round]) > sum(pulsar_sizes[:first_round])
    assert sum(quotalab_sizes[first_round:]) < sum(pulsar_sizes[first_round:])
