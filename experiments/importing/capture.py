"""Captures of Pulsar's resource-usage topic: records of (time, `ResourceUsageInfo`), written and read back.

The format is what a reader of `non-persistent://pulsar/system/resource-usage` can save (docs/pulsar.md has
one): per message, its publish time in seconds as an 8-byte big-endian float64, the payload's length as a
4-byte big-endian unsigned integer, then the payload. No header and no trailer: files concatenate.
"""

from __future__ import annotations

import math
import struct
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import BinaryIO

import numpy as np

from allocator.node.relay import MARK
from allocator.wire.codec import MAX_REPORT_BYTES, decode_report
from allocator.wire.pulsar import usage_info
from allocator.wire.report_fields import ReportError
from experiments.errors import UserError
from experiments.importing.usage import MAX_EXPORT_BYTES, ClusterUsage, filled, mean_sizes
from experiments.user_files import UnreadableFileError, read_capped

RECORD_HEADER = struct.Struct(">dI")  # publish time (s), payload length (bytes)
PUBLISH_MSGS, PUBLISH_BYTES = 0, 1  # columns of `UsageInfo.counts` (DIMENSIONS order)


def record(time_s: float, payload: bytes) -> bytes:
    """One record of the capture format."""
    return RECORD_HEADER.pack(time_s, len(payload)) + payload


class CaptureWriter:
    """What `quotalab run --capture FILE` writes: every report a lockstep run's brokers publish, one record each,
    at its round's time (seconds from the run's start).

    On `wire: pulsar` a payload is written as published. On `wire: quotalab` it is written as the
    `ResourceUsageInfo` a Pulsar broker would have published instead: decoded (its signature unchecked) and
    encoded again with the same broker, groups and usage counts per period; demand and quotalab's header have
    no place there. So a capture of any scenario reads back the same way."""

    def __init__(self, path: Path, wire: str, group_names: tuple[str, ...], interval_s: float) -> None:
        self.wire = wire
        self.path = Path(path)
        self.group_names = dict(enumerate(group_names))
        self.interval_s = interval_s
        self.records = 0
        self._file: BinaryIO = Path(path).open("wb")  # noqa: SIM115 (closed by close(), in the run's finally)

    def write_round(self, t_s: float, items: list[tuple[str, int, bytes]]) -> None:
        """The round's reports; a broker's copies of its peers' reports (`allocator.node.relay`) are left out: a
        Pulsar broker publishes only its own."""
        for _, _, payload in items:
            if self.wire != "pulsar" and payload[:1] == MARK:
                continue
            self._file.write(record(t_s, payload if self.wire == "pulsar" else self._as_pulsar(payload)))
            self.records += 1

    def close(self) -> None:
        self._file.close()

    def _as_pulsar(self, payload: bytes) -> bytes:
        report = decode_report(payload)
        bounds = np.array([0, len(report.group_ids)])
        rows = np.arange(len(report.group_ids))
        (converted,) = usage_info.encode_split(report, rows, bounds, self.group_names, self.interval_s)
        return converted


def read_records(path: Path) -> list[tuple[float, bytes]]:
    """Every (time, payload) of the capture at `path`; `UserError` naming the record and byte where it is cut
    short or holds what no record can."""
    try:
        data = read_capped(Path(path), MAX_EXPORT_BYTES)
    except UnreadableFileError as problem:
        raise UserError(f"{path}: {problem}") from None
    records, offset = [], 0
    while offset < len(data):
        where = f"{path}: record {len(records)} (byte {offset})"
        if len(data) - offset < RECORD_HEADER.size:
            raise UserError(f"{where}: cut short, {len(data) - offset} of the {RECORD_HEADER.size} bytes of its header")
        time_s, length = RECORD_HEADER.unpack_from(data, offset)
        if not math.isfinite(time_s):
            raise UserError(f"{where}: its time is {time_s}, not a number of seconds")
        if length > MAX_REPORT_BYTES:
            raise UserError(f"{where}: a payload of {length} bytes, over the limit of {MAX_REPORT_BYTES}")
        start = offset + RECORD_HEADER.size
        if len(data) - start < length:
            raise UserError(f"{where}: cut short, {len(data) - start} of its {length} payload bytes")
        records.append((time_s, data[start : start + length]))
        offset = start + length
    if not records:
        raise UserError(f"{path}: no records (an empty capture)")
    return records


def capture_usage(path: Path, interval_s: float | None = None) -> ClusterUsage:
    """The usage a capture tells: each record's publish counts per group at the round of its time (rounds of
    `interval_s`, or of the shortest time between two reports of one broker), held until the broker reports
    the group again."""
    infos = []
    for index, (time_s, payload) in enumerate(read_records(path)):
        try:
            infos.append((time_s, usage_info.decode(payload, MAX_REPORT_BYTES)))
        except ReportError as error:
            raise UserError(f"{path}: record {index}: not a valid ResourceUsageInfo: {error.reason}") from None
    interval_s = interval_s or _shortest_gap(path, infos)
    start_s = min(time_s for time_s, _ in infos)
    reported: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    totals: dict[tuple[str, str], np.ndarray] = defaultdict(lambda: np.zeros(2))
    reports: dict[str, int | None] = defaultdict(int)
    rounds = 0
    for time_s, info in sorted(infos, key=lambda item: item[0]):
        round_index = int(round((time_s - start_s) / interval_s))
        rounds = max(rounds, round_index + 1)
        reports[info.broker] += 1
        for owner, counts in zip(info.owners, info.counts, strict=True):
            if np.isnan(counts[PUBLISH_MSGS]):
                continue  # no publish usage: nothing to replay (Pulsar always fills it)
            reported[(info.broker, owner)][round_index] = counts[PUBLISH_MSGS] / interval_s
            totals[(info.broker, owner)] += np.nan_to_num(counts[[PUBLISH_MSGS, PUBLISH_BYTES]])
    if not reported:
        raise UserError(f"{path}: no record holds publish usage of any group")
    return ClusterUsage(
        interval_s=interval_s,
        rounds=rounds,
        msgs_per_s={key: filled(rounds, values) for key, values in sorted(reported.items())},
        msg_bytes=mean_sizes((key, *total) for key, total in totals.items()),
        reports=dict(reports),
    )


def _shortest_gap(path: Path, infos: list) -> float:
    """The shortest time between two consecutive reports of one broker: the reporting interval."""
    times: dict[str, set[float]] = defaultdict(set)
    for time_s, info in infos:
        times[info.broker].add(time_s)
    gaps = [later - earlier for broker_times in times.values() for earlier, later in pairwise(sorted(broker_times))]
    if not gaps:
        raise UserError(f"{path}: no broker reported twice, so the interval is unknown: give --interval-s")
    return min(gaps)
