"""The usage report on the wire: msgpack, versioned, optionally compressed and signed.

Wire layout, version 1. The outer envelope is a msgpack array::

    [version: int, flags: int, body: bin]                    unsigned
    [version: int, flags: int, body: bin, signature: bin]    signed (HMAC-SHA256, 32 bytes; Ed25519, 64 bytes)

`flags` bit 0 (`COMPRESSED`) says `body` is a zlib stream; bit 1 (`FLOAT32`) says its rates are float32
rather than float64; bit 2 (`ED25519`) says the signature is the Ed25519 signature of the broker the body
names (`allocator.signing`: a per-broker key), not an HMAC of the cluster key; any other bit is refused. The
signature covers a domain tag, the version, the flags and the body bytes as sent (Ed25519: their SHA-256
digest, see `_signed_message`). An HMAC is checked before
anything is decompressed; an Ed25519 signature after the body is decompressed (within `max_bytes`) and its
header parsed, since the key to check it with is the one of the broker the body names. The body, once decompressed, is a
msgpack array of ten items::

    [broker: str, incarnation: int, seq: int, sent_at_ms: int, interval_ms: int,
     dimensions: [str, ...],                    D of DIMENSIONS, in the sender's order
     group_ids: ids,                            n ids
     usage: bin,                                n x D rates, little-endian, row-major: float64, or float32
                                                with the FLOAT32 flag
     demand: bin | nil,                         n x D rates, as usage
     dictionary: [ids, names: bin] | nil]       m ids and their names: UTF-8, separated by NUL

    ids = [width: 1 | 2 | 4 | 8, bin]           little-endian integers of `width` bytes (unsigned below 8)

Columns travel as raw bytes rather than msgpack lists or maps, which Python builds one object at a time:
5,000 ids as a list cost ~250 us to pack, as bytes ~3 us; a 5,000-name map costs ~2.5 ms to unpack and
check, a NUL-joined blob a fraction of that. Ids take the fewest bytes that hold the largest (4 for a
catalogue of 100,000 namespaces). Rates are float64 by default, so a round trip is exact; `float32=True`
sends them in half the bytes (8 instead of 12 bytes an entry with one dimension and 4-byte ids) at a relative
error under 6e-8, plenty for allocating, and refuses a rate above float32's largest (~3.4e38) rather than
send inf. Decoded rates are float64 either way, and a batch may mix reports of both widths.

Decoding trusts nothing: every failure, whatever the input, is a `ReportError` with a short reason, so a
broker can count and drop a bad report without ever failing because of one. A key that is not non-empty bytes
is the caller's configuration mistake, not a bad report: a `TypeError` before any payload is read, so a
misconfigured broker fails at once instead of counting every report as bad.

A broker publishes one small report per topic and receives one per peer every round (~100 at PIP-82's scale),
so the per-report cost matters more than the per-entry cost: `encode_split` checks a round's entries once and
packs each part from slices of the same columns, and `decode_batch` parses each report's envelope and header
in Python but turns the columns of all of them into one `ReportBatch` of arrays, checked in one pass (looking
at a report alone only when that pass finds a fault in it).
"""

from __future__ import annotations

import hashlib
import hmac
import zlib
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack
import numpy as np

from allocator.report_fields import (
    DIMENSIONS,
    ID_DTYPES,
    ReportError,
    as_int,
    check_columns,
    check_dimensions,
    check_header,
    check_rate_bytes,
    check_values,
    id_column,
    ids_array,
    int_field,
    pack_dictionary,
    pack_ids,
    rates_array,
    same_optional_array,
    type_name,
    unpack_dictionary,
)
from allocator.signing import SIGNATURE_BYTES as ED25519_SIGNATURE_BYTES
from allocator.signing import PublicKeys, Signer

__all__ = [  # DIMENSIONS and ReportError live in allocator.report_fields, with the checks of each field
    "COMPRESSED",
    "DIMENSIONS",
    "ED25519",
    "FLOAT32",
    "FORMAT_VERSION",
    "MAX_REPORT_BYTES",
    "ReportBatch",
    "ReportError",
    "UsageReport",
    "check_key",
    "decode_batch",
    "decode_report",
    "encode_report",
    "encode_split",
]

FORMAT_VERSION = 1
MAX_REPORT_BYTES = 8 * 1024 * 1024
"""Default size limit, on the bytes received and again on the decompressed body.

A report of 5,000 groups x 4 dimensions with demand (at most 72 bytes a group) and a dictionary of 80-byte
names (~85 bytes a group) is under 1 MiB; the limit leaves room for a broker hosting several times that.
"""

COMPRESSED = 0x1
FLOAT32 = 0x2
ED25519 = 0x4
SIGNATURE_BYTES = hashlib.sha256().digest_size

_KNOWN_FLAGS = COMPRESSED | FLOAT32 | ED25519
_MAC_TAG = b"quotalab/usage-report"
_ZLIB_LEVEL = 1  # level 6 is 3-7x slower here for ~25% fewer bytes on rates; random floats barely compress
_RATE_DTYPES = {False: np.dtype("<f8"), True: np.dtype("<f4")}  # by the FLOAT32 flag
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_BODY_ITEMS = 10
_MSGPACK_ERRORS = (ValueError, TypeError, msgpack.UnpackException)


@dataclass(frozen=True, eq=False)
class UsageReport:
    """One broker's usage report for one round.

    `usage` and `demand` are per-second rates, one row per entry of `group_ids` and one column per entry of
    `dimensions`; a row of zeros says the sender's traffic for that group stopped. Decoded arrays may be
    read-only views on the received bytes. Equality compares the arrays element by element.
    """

    broker: str
    incarnation: int
    seq: int
    sent_at_ms: int
    interval_ms: int
    dimensions: tuple[str, ...]
    group_ids: np.ndarray
    usage: np.ndarray
    demand: np.ndarray | None = None
    dictionary: dict[int, str] | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, UsageReport):
            return NotImplemented
        return (
            (self.broker, self.incarnation, self.seq, self.sent_at_ms, self.interval_ms)
            == (other.broker, other.incarnation, other.seq, other.sent_at_ms, other.interval_ms)
            and tuple(self.dimensions) == tuple(other.dimensions)
            and np.array_equal(self.group_ids, other.group_ids)
            and np.array_equal(self.usage, other.usage)
            and same_optional_array(self.demand, other.demand)
            and self.dictionary == other.dictionary
        )


@dataclass(frozen=True, eq=False)
class ReportBatch:
    """Valid reports in the same dimensions, received together, held as columns (what a broker merges at once).

    Report i is sent by `brokers[i]` (with `incarnation[i]`, `seq[i]`, `sent_at_ms[i]`, `interval_ms[i]`,
    `dictionaries[i]`) and holds the entries `offsets[i]:offsets[i + 1]` of `group_ids`, `usage` and `demand`;
    `demand` rows are 0 for a report without demand (`has_demand[i]` False).
    """

    dimensions: tuple[str, ...]
    brokers: list[str]
    incarnation: list[int]
    seq: list[int]
    sent_at_ms: list[int]
    interval_ms: list[int]
    dictionaries: list[dict[int, str] | None]
    has_demand: np.ndarray  # bool[R]
    offsets: np.ndarray  # int64[R + 1]
    group_ids: np.ndarray  # int64[N]
    usage: np.ndarray  # float64[N, D]
    demand: np.ndarray  # float64[N, D]

    def __len__(self) -> int:
        return len(self.brokers)

    @classmethod
    def of(cls, reports: Sequence[UsageReport], dimensions: Sequence[str]) -> ReportBatch:
        """Reports already decoded (or built), all in `dimensions`; ValueError if one is not."""
        if any(tuple(report.dimensions) != tuple(dimensions) for report in reports):
            raise ValueError(f"every report must be in the dimensions {list(dimensions)}")
        no_rates = np.zeros((0, len(dimensions)))
        return cls(
            dimensions=tuple(dimensions),
            brokers=[report.broker for report in reports],
            incarnation=[int(report.incarnation) for report in reports],
            seq=[int(report.seq) for report in reports],
            sent_at_ms=[int(report.sent_at_ms) for report in reports],
            interval_ms=[int(report.interval_ms) for report in reports],
            dictionaries=[report.dictionary for report in reports],
            has_demand=np.array([report.demand is not None for report in reports], dtype=bool),
            offsets=np.cumsum([0, *(len(report.group_ids) for report in reports)], dtype=np.int64),
            group_ids=np.concatenate([np.zeros(0, np.int64), *(report.group_ids for report in reports)]),
            usage=np.concatenate([no_rates, *(report.usage for report in reports)]),
            demand=np.concatenate(
                [no_rates, *(np.zeros_like(r.usage) if r.demand is None else r.demand for r in reports)]
            ),
        )

    def report(self, index: int) -> UsageReport:
        start, end = self.offsets[index], self.offsets[index + 1]
        return UsageReport(
            broker=self.brokers[index],
            incarnation=self.incarnation[index],
            seq=self.seq[index],
            sent_at_ms=self.sent_at_ms[index],
            interval_ms=self.interval_ms[index],
            dimensions=self.dimensions,
            group_ids=self.group_ids[start:end],
            usage=self.usage[start:end],
            demand=self.demand[start:end] if self.has_demand[index] else None,
            dictionary=self.dictionaries[index],
        )

    def select(self, reports: np.ndarray) -> ReportBatch:
        """The batch of the reports where `reports` (bool[R]) is True."""
        keep = reports.tolist()
        entries = np.repeat(reports, np.diff(self.offsets))

        def chosen(items: list[Any]) -> list[Any]:
            return [item for item, kept in zip(items, keep, strict=True) if kept]

        return ReportBatch(
            dimensions=self.dimensions,
            brokers=chosen(self.brokers),
            incarnation=chosen(self.incarnation),
            seq=chosen(self.seq),
            sent_at_ms=chosen(self.sent_at_ms),
            interval_ms=chosen(self.interval_ms),
            dictionaries=chosen(self.dictionaries),
            has_demand=self.has_demand[reports],
            offsets=np.concatenate([[0], np.cumsum(np.diff(self.offsets)[reports])]).astype(np.int64),
            group_ids=self.group_ids[entries],
            usage=self.usage[entries],
            demand=self.demand[entries],
        )


def encode_report(
    report: UsageReport,
    *,
    key: bytes | None = None,
    signer: Signer | None = None,
    compress: bool = False,
    float32: bool = False,
) -> bytes:
    """Serialise `report`, signed with the cluster `key` (HMAC) or the broker's own `signer` (Ed25519), or
    neither; raises `ReportError` if it would not pass `decode_report`'s checks, or if `float32` and a rate
    is above float32's largest.

    Numpy integers are accepted wherever an int is expected (header fields, dictionary keys).
    """
    check_key(key, signer)
    flags = _flags(compress=compress, float32=float32, signer=signer)
    header, group_ids, usage, demand = _checked_columns(report, flags)
    dictionary = None if report.dictionary is None else pack_dictionary(report.dictionary)
    packer = msgpack.Packer(use_bin_type=True)
    body = packer.pack(
        [*header, pack_ids(group_ids), usage.tobytes(), None if demand is None else demand.tobytes(), dictionary]
    )
    return _seal(packer, body, key=key, signer=signer, flags=flags)


def encode_split(
    report: UsageReport,
    rows: np.ndarray,
    bounds: np.ndarray,
    *,
    key: bytes | None = None,
    signer: Signer | None = None,
    compress: bool = False,
    float32: bool = False,
) -> list[bytes]:
    """Serialise `report` as several reports with its header: part i holds its entries `rows[bounds[i]:bounds[i+1]]`.

    Rows must increase within each part (so no part repeats a group); a part carries the entries of
    `report.dictionary` for its own groups only. Ids take the fewest bytes that hold the largest id sent.
    Raises `ReportError` like `encode_report`.
    """
    check_key(key, signer)
    flags = _flags(compress=compress, float32=float32, signer=signer)
    header, group_ids, usage, demand = _checked_columns(report, flags)
    rows, bounds = np.asarray(rows), np.asarray(bounds)
    if rows.size and (rows.min() < 0 or rows.max() >= len(group_ids)):
        raise ReportError("a row is out of range")
    steps = np.diff(rows) > 0
    steps[bounds[1:-1][(bounds[1:-1] > 0) & (bounds[1:-1] < len(rows))] - 1] = True  # a new part may start anywhere
    if not steps.all():
        raise ReportError("rows do not increase within a part")
    width, id_bytes = pack_ids(group_ids[rows])
    usage_bytes = usage[rows].tobytes()
    demand_bytes = None if demand is None else demand[rows].tobytes()
    row_bytes = usage.shape[1] * usage.itemsize
    packer = msgpack.Packer(use_bin_type=True)  # one for every part: `packb` builds a new one each call (2x slower)
    payloads = []
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        dictionary = None
        if report.dictionary is not None:
            ids = group_ids[rows[start:end]].tolist()
            dictionary = pack_dictionary({g: report.dictionary[g] for g in ids if g in report.dictionary})
        body = packer.pack(
            [
                *header,
                [width, id_bytes[start * width : end * width]],
                usage_bytes[start * row_bytes : end * row_bytes],
                None if demand_bytes is None else demand_bytes[start * row_bytes : end * row_bytes],
                dictionary,
            ]
        )
        payloads.append(_seal(packer, body, key=key, signer=signer, flags=flags))
    return payloads


def _flags(*, compress: bool, float32: bool, signer: Signer | None) -> int:
    return (COMPRESSED if compress else 0) | (FLOAT32 if float32 else 0) | (ED25519 if signer is not None else 0)


def _checked_columns(report: UsageReport, flags: int) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray | None]:
    """The header items, ids and little-endian rates of `report` (in the width `flags` says), checked as the
    decoder would; a rate too large for float32 is refused rather than sent as inf."""
    header = [
        report.broker,
        *(as_int(getattr(report, name)) for name in ("incarnation", "seq", "sent_at_ms", "interval_ms")),
    ]
    check_header(*header)
    if not isinstance(report.dimensions, tuple | list):
        raise ReportError(f"dimensions is {type_name(report.dimensions)}, not a tuple")
    dimensions = list(report.dimensions)
    check_dimensions(dimensions)
    group_ids = ids_array(report.group_ids, "group ids")
    usage = rates_array(report.usage, "usage")
    demand = None if report.demand is None else rates_array(report.demand, "demand")
    check_columns(group_ids, usage, demand, len(dimensions))
    rate_dtype = _RATE_DTYPES[bool(flags & FLOAT32)]
    for name, rates in (("usage", usage), ("demand", demand)):
        if flags & FLOAT32 and rates is not None and rates.size and rates.max() > _FLOAT32_MAX:
            raise ReportError(f"{name} has a rate over float32's largest, {_FLOAT32_MAX:.7g}")
    usage = usage.astype(rate_dtype, copy=False)
    demand = None if demand is None else demand.astype(rate_dtype, copy=False)
    return [*header, dimensions], group_ids, usage, demand


def _seal(
    packer: msgpack.Packer, body: bytes, *, key: bytes | None, signer: Signer | None, flags: int
) -> bytes:
    """The envelope around a packed body: compressed if `flags` say so, then signed with `key` or `signer`."""
    if flags & COMPRESSED:
        body = zlib.compress(body, _ZLIB_LEVEL)
    envelope: list[Any] = [FORMAT_VERSION, flags, body]
    if key is not None:
        envelope.append(_signature(key, FORMAT_VERSION, flags, body))
    elif signer is not None:
        envelope.append(signer.sign(_signed_message(FORMAT_VERSION, flags, body)))
    return packer.pack(envelope)


def decode_report(
    data: bytes,
    *,
    key: bytes | None = None,
    public_keys: PublicKeys | None = None,
    known_brokers: Container[str] | None = None,
    max_bytes: int = MAX_REPORT_BYTES,
) -> UsageReport:
    """Parse and validate one report; raises `ReportError` and nothing else for any bad input.

    With `key`, the report must carry a valid HMAC made with that key; with `public_keys`, a valid Ed25519
    signature of the broker it names (so a key signs only as its own broker); with neither, a signature is not
    checked. With `known_brokers`, the sender must be one of them. `max_bytes` bounds both the bytes
    received (checked before parsing) and the decompressed body (checked while decompressing).
    """
    check_key(key, public_keys=public_keys)
    body = _parse(data, key, public_keys, known_brokers, max_bytes, expected_dimensions=None)
    batch, rejected = _columns([body], body.dimensions)
    if rejected:
        raise rejected[0]
    return batch.report(0)


def decode_batch(
    payloads: Iterable[bytes],
    dimensions: Sequence[str],
    *,
    key: bytes | None = None,
    public_keys: PublicKeys | None = None,
    known_brokers: Container[str] | None = None,
    max_bytes: int = MAX_REPORT_BYTES,
) -> tuple[ReportBatch, dict[int, ReportError]]:
    """`decode_report` for many payloads, which must be in `dimensions` too: the valid reports as one batch,
    and the `ReportError` of each other one by its position in `payloads`. Unknown or repeated `dimensions`
    are the caller's mistake: `ValueError`."""
    check_key(key, public_keys=public_keys)
    dimensions = tuple(dimensions)
    expected = list(dimensions)  # as a body holds them
    try:
        check_dimensions(expected)
    except ReportError as error:
        raise ValueError(f"dimensions: {error.reason}") from None
    bodies: list[_Body] = []
    positions: list[int] = []
    rejected: dict[int, ReportError] = {}
    for position, data in enumerate(payloads):
        try:
            body = _parse(data, key, public_keys, known_brokers, max_bytes, expected_dimensions=expected)
            if body.dimensions != dimensions:  # its columns would land in the wrong dimensions, or not fit at all
                raise ReportError(f"dimensions {list(body.dimensions)} are not {list(dimensions)}")
        except ReportError as error:
            rejected[position] = error
            continue
        bodies.append(body)
        positions.append(position)
    batch, bad_values = _columns(bodies, dimensions)
    rejected |= {positions[index]: error for index, error in bad_values.items()}
    return batch, dict(sorted(rejected.items()))


class _Body(NamedTuple):
    """A report checked but for the values of its columns, which are still bytes (see `_columns`)."""

    broker: str
    incarnation: int
    seq: int
    sent_at_ms: int
    interval_ms: int
    dimensions: tuple[str, ...]
    id_dtype: np.dtype
    ids: bytes
    rate_dtype: np.dtype  # of usage and demand
    usage: bytes
    demand: bytes | None
    dictionary: dict[int, str] | None
    n_entries: int


def _parse(
    data: bytes,
    key: bytes | None,
    public_keys: PublicKeys | None,
    known_brokers: Container[str] | None,
    max_bytes: int,
    *,
    expected_dimensions: list[str] | None,
) -> _Body:
    """Everything `decode_report` checks but the values in the columns (`_columns`). Dimensions equal to
    `expected_dimensions` (checked by the caller) are not checked again: ~10% of the parse."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ReportError(f"report is {type(data).__name__}, not bytes")
    size = len(data) if isinstance(data, bytes) else memoryview(data).nbytes
    if size > max_bytes:
        raise ReportError(f"report is {size} bytes, over the limit of {max_bytes}")

    flags, sent_body, signature = _parse_envelope(_unpack(data, "envelope"))
    if key is not None or public_keys is not None:
        if signature is None:
            raise ReportError("report is not signed")
        if bool(flags & ED25519) != (public_keys is not None):
            raise ReportError(f"report is signed with {'Ed25519' if flags & ED25519 else 'HMAC'}, not the key expected")
    if key is not None and not hmac.compare_digest(signature, _signature(key, FORMAT_VERSION, flags, sent_body)):
        raise ReportError("bad signature")
    body = _decompress(sent_body, max_bytes) if flags & COMPRESSED else sent_body
    parsed = _parse_body(_unpack(body, "body"), expected_dimensions, _RATE_DTYPES[bool(flags & FLOAT32)])
    if known_brokers is not None and parsed.broker not in known_brokers:
        raise ReportError(f"unknown broker {parsed.broker!r}")
    if public_keys is not None and not public_keys.verify(
        parsed.broker, signature, _signed_message(FORMAT_VERSION, flags, sent_body)
    ):
        raise ReportError(f"bad signature for broker {parsed.broker!r}")
    return parsed


def _columns(bodies: list[_Body], dimensions: tuple[str, ...]) -> tuple[ReportBatch, dict[int, ReportError]]:
    """The reports as one batch of arrays (one `frombuffer` per column and dtype), with the values checked in one
    pass; returns the batch of the valid ones and the error of each other one by its index in `bodies`."""
    columns = list(zip(*bodies, strict=True)) or [()] * len(_Body._fields)  # one tuple per field of `_Body`
    (brokers, incarnation, seq, sent_at_ms, interval_ms, _, id_dtypes, ids, rate_dtypes, usage, demand, dictionaries,
     counts) = columns  # fmt: skip
    counts = np.array(counts, dtype=np.int64)
    n_entries, D = int(counts.sum()), len(dimensions)
    zeros = [bytes(len(rates)) if wanted is None else wanted for rates, wanted in zip(usage, demand, strict=True)]
    batch = ReportBatch(
        dimensions=dimensions,
        brokers=list(brokers),
        incarnation=list(incarnation),
        seq=list(seq),
        sent_at_ms=list(sent_at_ms),
        interval_ms=list(interval_ms),
        dictionaries=list(dictionaries),
        has_demand=np.array([wanted is not None for wanted in demand], dtype=bool),
        offsets=np.cumsum([0, *counts.tolist()], dtype=np.int64),
        group_ids=_joined(ids, id_dtypes, counts, np.empty(n_entries, dtype=np.int64)),
        usage=_joined(usage, rate_dtypes, counts, np.empty((n_entries, D))),
        demand=_joined(zeros, rate_dtypes, counts, np.empty((n_entries, D))),
    )
    rejected = {}
    for index in _suspects(batch):  # a report alone, for the reason (ids in another order may still be unique)
        try:
            report = batch.report(index)
            check_values(report.group_ids, report.usage, report.demand)
        except ReportError as error:
            rejected[index] = error
    if rejected:
        batch = batch.select(~np.isin(np.arange(len(bodies)), list(rejected)))
    return batch, rejected


def _joined(columns: Sequence[bytes], dtypes: Sequence[np.dtype], counts: np.ndarray, out: np.ndarray) -> np.ndarray:
    """`out` (one row per entry) filled with the column of every report, each read as its own dtype: one
    `frombuffer` per dtype, usually one (the reports of a cluster are sent alike, and then no mask is needed)."""
    for dtype in set(dtypes):
        chosen = [d == dtype for d in dtypes]
        joined = b"".join(column for column, kept in zip(columns, chosen, strict=True) if kept)
        rows = slice(None) if all(chosen) else np.repeat(chosen, counts)
        out[rows] = np.frombuffer(joined, dtype=dtype).reshape(-1, *out.shape[1:])
    return out


def _suspects(batch: ReportBatch) -> list[int]:
    """The reports with a rate that is negative or not finite, or an id that is negative or not greater than
    the one before it: one vectorised pass over every report of the batch."""
    ids, usage, demand = batch.group_ids, batch.usage, batch.demand
    if not ids.size:
        return []
    out_of_order = np.r_[False, ids[1:] <= ids[:-1]]  # against the entry before, in whichever report
    starts = batch.offsets[1:-1]
    out_of_order[starts[starts < len(ids)]] = False  # the first entry of a report has none before it
    if (
        usage.min() >= 0 and usage.max() < np.inf and demand.min() >= 0 and demand.max() < np.inf  # a NaN fails
        and ids.min() >= 0 and not out_of_order.any()
    ):  # fmt: skip
        return []
    rates_ok = ((usage >= 0) & (usage < np.inf)).all(axis=1) & ((demand >= 0) & (demand < np.inf)).all(axis=1)
    suspect = ~rates_ok | (ids < 0) | out_of_order
    of_entry = np.repeat(np.arange(len(batch)), np.diff(batch.offsets))
    return np.unique(of_entry[suspect]).tolist()


def _signature(key: bytes, version: int, flags: int, body: bytes) -> bytes:
    mac = hmac.new(key, _MAC_TAG, hashlib.sha256)
    mac.update(bytes((version, flags)))
    mac.update(body)
    return mac.digest()


def _signed_message(version: int, flags: int, body: bytes) -> bytes:
    """What an Ed25519 signature covers: the domain tag, version and flags, and the SHA-256 digest of the body.

    Ed25519 hashes its message twice to sign it (SHA-512) and once to check it; over a digest it does so on 65
    bytes, so the body is read once, by SHA-256, as for the HMAC (~4x less for a 340 kB report)."""
    return b"".join((_MAC_TAG, bytes((version, flags)), hashlib.sha256(body).digest()))


def check_key(key: bytes | None, signer: Signer | None = None, public_keys: PublicKeys | None = None) -> None:
    """A key of the wrong type, an empty one, or a cluster key together with a per-broker one, is the caller's
    configuration mistake: `TypeError`."""
    if key is not None and (not isinstance(key, bytes) or not key):
        raise TypeError(f"key must be non-empty bytes or None, got {type_name(key) if key else 'empty bytes'}")
    if signer is not None and not isinstance(signer, Signer):
        raise TypeError(f"signer must be an allocator.signing.Signer, got {type_name(signer)}")
    if public_keys is not None and not isinstance(public_keys, PublicKeys):
        raise TypeError(f"public_keys must be allocator.signing.PublicKeys, got {type_name(public_keys)}")
    if key is not None and (signer is not None or public_keys is not None):
        raise TypeError("give the cluster key (HMAC) or per-broker keys (Ed25519), not both")


def _unpack(data: bytes | bytearray | memoryview, what: str) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except _MSGPACK_ERRORS as error:
        raise ReportError(f"{what} is not valid msgpack") from error


def _parse_envelope(envelope: Any) -> tuple[int, bytes, bytes | None]:
    """Check the envelope; returns `(flags, body, signature or None)`. The version is checked first."""
    if not isinstance(envelope, list):
        raise ReportError(f"envelope is {type_name(envelope)}, not an array")
    if not envelope:
        raise ReportError("envelope is empty")
    version = int_field(envelope[0], "version")
    if version != FORMAT_VERSION:
        raise ReportError(f"version {version} not supported")
    if len(envelope) not in (3, 4):
        raise ReportError(f"envelope has {len(envelope)} items, not 3 or 4")
    flags = int_field(envelope[1], "flags")
    if flags & ~_KNOWN_FLAGS:
        raise ReportError(f"unknown flags {flags:#x}")
    body = envelope[2]
    if not isinstance(body, bytes):
        raise ReportError(f"body is {type_name(body)}, not bytes")
    signature = envelope[3] if len(envelope) == 4 else None
    if signature is not None:
        if not isinstance(signature, bytes):
            raise ReportError(f"signature is {type_name(signature)}, not bytes")
        expected = ED25519_SIGNATURE_BYTES if flags & ED25519 else SIGNATURE_BYTES
        if len(signature) != expected:
            raise ReportError(f"signature is {len(signature)} bytes, not {expected}")
    return flags, body, signature


def _decompress(body: bytes, max_bytes: int) -> bytes:
    """Inflate at most `max_bytes` (+1 to notice the excess), so a zip bomb costs no more than that."""
    inflater = zlib.decompressobj()
    try:
        plain = inflater.decompress(body, max_bytes + 1)
    except zlib.error as error:
        raise ReportError("body does not decompress") from error
    if len(plain) > max_bytes:
        raise ReportError(f"body decompresses to over {max_bytes} bytes")
    if not inflater.eof:
        raise ReportError("compressed body is truncated")
    if inflater.unused_data:
        raise ReportError("data after the compressed body")
    return plain


def _parse_body(fields: Any, expected_dimensions: list[str] | None, rate_dtype: np.dtype) -> _Body:
    if not isinstance(fields, list):
        raise ReportError(f"body is {type_name(fields)}, not an array")
    if len(fields) != _BODY_ITEMS:
        raise ReportError(f"body has {len(fields)} items, not {_BODY_ITEMS}")
    broker, incarnation, seq, sent_at_ms, interval_ms, dimensions, ids, usage, demand, dictionary = fields
    check_header(broker, incarnation, seq, sent_at_ms, interval_ms)
    if not isinstance(dimensions, list):
        raise ReportError(f"dimensions is {type_name(dimensions)}, not an array")
    if dimensions != expected_dimensions:
        check_dimensions(dimensions)
    id_width, id_bytes = id_column(ids, "group ids")
    n_entries = len(id_bytes) // id_width
    check_rate_bytes(usage, n_entries, len(dimensions), rate_dtype, "usage")
    if demand is not None:
        check_rate_bytes(demand, n_entries, len(dimensions), rate_dtype, "demand")
    return _Body(
        broker,
        incarnation,
        seq,
        sent_at_ms,
        interval_ms,
        tuple(dimensions),
        ID_DTYPES[id_width],
        id_bytes,
        rate_dtype,
        usage,
        demand,
        None if dictionary is None else unpack_dictionary(dictionary),
        n_entries,
    )
