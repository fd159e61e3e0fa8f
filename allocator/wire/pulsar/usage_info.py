"""A usage report as Pulsar writes it, `ResourceUsageInfo` (protobuf, proto2), and back: `encode_split`, `decode`.

A Pulsar broker (`ResourceUsageTopicTransportManager`) publishes one `ResourceUsageInfo` per interval on
`non-persistent://pulsar/system/resource-usage`: its own name, and per resource group (`owner`, the group's
name) the messages and bytes it published and dispatched during the period, as whole counts
(`ResourceGroup.rgFillResourceUsage` always fills both `publish` and `dispatch`). quotalab's rates per second
become counts per period, `round(rate * interval_s)`, and back `count / interval_s`: a rate is exact to one
message (or byte) per period, as Pulsar's are.

quotalab measures the dimensions its quotas name; a count of a dimension the run does not measure is written
as 0 (a Pulsar receiver reads it only against a quota it would then have, and a quotalab receiver never reads
it). Like `allocator.wire.codec`, decoding raises `ReportError` and nothing else, whatever the bytes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError, EncodeError

from allocator.wire.pulsar.ResourceUsage_pb2 import ResourceUsageInfo
from allocator.wire.report_fields import DIMENSIONS, ReportError
from allocator.wire.usage_report import UsageReport

TOPIC = "non-persistent://pulsar/system/resource-usage"  # where Pulsar's brokers publish and read these
# quotalab's dimension -> (the NetworkUsage of a ResourceUsage that holds it, its count), in DIMENSIONS order
COUNTS = {
    "publish_msgs_per_s": ("publish", "messagesPerPeriod"),
    "publish_bytes_per_s": ("publish", "bytesPerPeriod"),
    "dispatch_msgs_per_s": ("dispatch", "messagesPerPeriod"),
    "dispatch_bytes_per_s": ("dispatch", "bytesPerPeriod"),
}
UINT64_MAX = 2**64 - 1


@dataclass(frozen=True, eq=False)
class UsageInfo:
    """One `ResourceUsageInfo` as read: the broker's name, and per entry the group's name (`owners[i]`) and its
    counts in the period, `counts[i]` in `DIMENSIONS` order (NaN where the message has no `publish` or no
    `dispatch`)."""

    broker: str
    owners: list[str]
    counts: np.ndarray  # float64[N, 4]


def counts_per_period(rates: np.ndarray, interval_s: float) -> np.ndarray:
    """[N, D] whole counts in a period of `interval_s` of the rates per second `rates`, as uint64; `ReportError` for
    a rate that is negative, not finite or whose count is over 2**64 - 1."""
    counts = np.rint(np.asarray(rates, dtype=np.float64) * interval_s)
    if not np.isfinite(counts).all() or (counts < 0).any():
        raise ReportError("usage has a rate that is negative or not finite")
    if counts.size and counts.max() > UINT64_MAX:
        raise ReportError("usage has a count per period over 2**64 - 1")
    return counts.astype(np.uint64)


def encode_split(
    report: UsageReport, rows: np.ndarray, bounds: np.ndarray, names: Mapping[int, str], interval_s: float
) -> list[bytes]:
    """`report` as several `ResourceUsageInfo`: part i holds the entries `rows[bounds[i]:bounds[i + 1]]`, each
    group under its name in `names` (group id -> name), its usage as counts in a period of `interval_s`.

    What the format has no field for (incarnation, sequence number, publish time, demand, the dictionary) is
    left out. Raises `ReportError` for a group without a name or a rate that has no count (`counts_per_period`).
    """
    if not isinstance(report.broker, str) or not report.broker:
        raise ReportError("broker is not a non-empty str")
    counts = np.zeros((len(report.group_ids), len(DIMENSIONS)), dtype=np.uint64)
    columns = [DIMENSIONS.index(dimension) for dimension in report.dimensions]
    counts[:, columns] = counts_per_period(report.usage, interval_s)
    counts_by_row = counts.tolist()  # Python ints: what protobuf's setters take fastest
    group_ids = report.group_ids.tolist()
    payloads = []
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        info = ResourceUsageInfo(broker=report.broker)
        for row in rows[start:end].tolist():
            try:
                owner = names[group_ids[row]]
            except KeyError:
                raise ReportError(f"group id {group_ids[row]} has no name") from None
            published_msgs, published_bytes, dispatched_msgs, dispatched_bytes = counts_by_row[row]
            entry = info.usageMap.add(owner=owner)
            entry.publish.messagesPerPeriod, entry.publish.bytesPerPeriod = published_msgs, published_bytes
            entry.dispatch.messagesPerPeriod, entry.dispatch.bytesPerPeriod = dispatched_msgs, dispatched_bytes
        try:
            payloads.append(info.SerializeToString())
        except EncodeError as error:  # an empty owner is still a str: only a missing field fails here
            raise ReportError(f"cannot serialise: {error}") from None
    return payloads


def decode(data: bytes | bytearray | memoryview, max_bytes: int) -> UsageInfo:
    """Parse and check one `ResourceUsageInfo`; raises `ReportError` and nothing else for any bad input.

    Checked: the size (before parsing), protobuf's own checks (the wire format, every required field present),
    a broker and owners that are valid UTF-8 and not empty, no owner twice.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ReportError(f"report is {type(data).__name__}, not bytes")
    size = memoryview(data).nbytes
    if size > max_bytes:
        raise ReportError(f"report is {size} bytes, over the limit of {max_bytes}")
    try:
        info = ResourceUsageInfo.FromString(bytes(data))
    except DecodeError:
        raise ReportError("not a ResourceUsageInfo (bad wire format)") from None
    if not info.IsInitialized():  # protobuf parses a proto2 message without its required fields
        raise ReportError(f"required field missing: {info.FindInitializationErrors()[0]}")
    broker = info.broker
    if not isinstance(broker, str):  # proto2 strings are not checked: invalid UTF-8 comes back as bytes
        raise ReportError("broker is not valid UTF-8")
    if not broker:
        raise ReportError("broker is empty")
    owners: list[str] = []
    counts = np.full((len(info.usageMap), len(DIMENSIONS)), np.nan)
    for index, entry in enumerate(info.usageMap):
        owner = entry.owner
        if not isinstance(owner, str) or not owner:
            raise ReportError(f"usageMap[{index}].owner is {'empty' if owner == '' else 'not valid UTF-8'}")
        owners.append(owner)
        for column, (usage_field, count) in enumerate(COUNTS.values()):
            if entry.HasField(usage_field):
                counts[index, column] = getattr(getattr(entry, usage_field), count)
    if len(set(owners)) != len(owners):
        repeated = next(owner for owner, times in Counter(owners).items() if times > 1)
        raise ReportError(f"owner {repeated!r} appears more than once")
    return UsageInfo(broker, owners, counts)
