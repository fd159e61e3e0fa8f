"""Usage reports to bytes and back: `encode_report`, `encode_split`, `decode_report`, `decode_batch`.

The layout on the wire and why it is so: docs/design.md, "Wire format". The envelope (version, flags, zlib,
signature) is `allocator.wire.envelope`, the report types `allocator.wire.usage_report`, each field's checks
`allocator.wire.report_fields`.

Decoding trusts nothing: every failure, whatever the input, is a `ReportError` with a short reason, so a
broker can count and drop a bad report without ever failing because of one. A key that is not non-empty bytes
is the caller's configuration mistake, not a bad report: a `TypeError` before any payload is read, so a
misconfigured broker fails at once instead of counting every report as bad.

A broker publishes one small report per topic and receives one per peer every round (~100 at PIP-82's scale),
so the per-report cost matters more than the per-entry cost: `encode_split` checks a round's entries once and
packs each part from slices of the same columns, and `decode_batch` parses each report's envelope and header
in Python but turns the columns of all of them into one `ReportBatch` of arrays, checked in one pass
(`allocator.wire.batch_decoding`).
"""

from __future__ import annotations

import hmac
from collections.abc import Container, Iterable, Sequence
from typing import Any

import msgpack
import numpy as np

from allocator.wire.batch_decoding import ParsedBody, checked_batch
from allocator.wire.envelope import (
    COMPRESSED,
    ED25519,
    FLOAT32,
    FORMAT_VERSION,
    check_key,
    decompress_body,
    envelope_flags,
    hmac_signature,
    parse_envelope,
    seal,
    signed_message,
)
from allocator.wire.report_fields import (
    ID_DTYPES,
    ReportError,
    as_int,
    check_columns,
    check_header,
    check_rate_bytes,
    dimension_codes,
    dimension_names,
    id_column,
    ids_array,
    pack_dictionary,
    pack_ids,
    packed_dictionary,
    rates_array,
    type_name,
    unpack_dictionary,
)
from allocator.wire.signing import PublicKeys, Signer
from allocator.wire.usage_report import ReportBatch, UsageReport

__all__ = [  # ReportError lives in allocator.wire.report_fields; named here as what decode_report raises (README)
    "MAX_REPORT_BYTES",
    "ReportError",
    "decode_batch",
    "decode_report",
    "encode_report",
    "encode_split",
]

MAX_REPORT_BYTES = 8 * 1024 * 1024
"""Default size limit, on the bytes received and again on the decompressed body.

A report of 5,000 groups x 4 dimensions with demand (at most 72 bytes a group) and a dictionary of 80-byte
names (~85 bytes a group) is under 1 MiB; the limit leaves room for a broker hosting several times that.
"""

_RATE_DTYPES = {False: np.dtype("<f8"), True: np.dtype("<f4")}  # by the FLOAT32 flag
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_BODY_ITEMS = 10
_MSGPACK_ERRORS = (ValueError, TypeError, msgpack.UnpackException)


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
    flags = envelope_flags(compress=compress, float32=float32, signer=signer)
    header, group_ids, usage, demand = _checked_columns(report, flags)
    dictionary = None if report.dictionary is None else pack_dictionary(report.dictionary)
    packer = msgpack.Packer(use_bin_type=True)
    body = packer.pack(
        [*header, pack_ids(group_ids), usage.tobytes(), None if demand is None else demand.tobytes(), dictionary]
    )
    return seal(packer, body, key=key, signer=signer, flags=flags)


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
    flags = envelope_flags(compress=compress, float32=float32, signer=signer)
    header, group_ids, usage, demand = _checked_columns(report, flags)
    rows, bounds = np.asarray(rows), np.asarray(bounds)
    if rows.size and (rows.min() < 0 or rows.max() >= len(group_ids)):
        raise ReportError("a row is out of range")
    steps = np.diff(rows) > 0
    steps[bounds[1:-1][(bounds[1:-1] > 0) & (bounds[1:-1] < len(rows))] - 1] = True  # a new part may start anywhere
    if not steps.all():
        raise ReportError("rows do not increase within a part")
    # np.take, not usage[rows]: ~2x faster for rows of a few rates (a forced report takes each row once per topic)
    width, id_bytes = pack_ids(np.take(group_ids, rows))
    usage_bytes = np.take(usage, rows, axis=0).tobytes()
    demand_bytes = None if demand is None else np.take(demand, rows, axis=0).tobytes()
    row_bytes = usage.shape[1] * usage.itemsize
    names = None if report.dictionary is None else _names_by_row(report.dictionary, group_ids)
    packer = msgpack.Packer(use_bin_type=True)  # one for every part: `packb` builds a new one each call (2x slower)
    payloads = []
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        dictionary = None
        if names is not None:  # the part's own groups' entries, in its order (a part may have none)
            name_of_row, named_row = names
            named = rows[start:end][named_row[rows[start:end]]]
            dictionary = packed_dictionary(group_ids[named], name_of_row[named].tolist())
        body = packer.pack(
            [
                *header,
                [width, id_bytes[start * width : end * width]],
                usage_bytes[start * row_bytes : end * row_bytes],
                None if demand_bytes is None else demand_bytes[start * row_bytes : end * row_bytes],
                dictionary,
            ]
        )
        payloads.append(seal(packer, body, key=key, signer=signer, flags=flags))
    return payloads


def _names_by_row(dictionary: dict[int, str], group_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(object[G], bool[G]) the name `dictionary` gives each row's group id, and whether it gives one, after
    checking the whole dictionary once as `pack_dictionary` does: every part's dictionary is a subset of it, so it
    passes the same checks (a broker's start sends its 5,000 names in a hundred parts)."""
    pack_dictionary(dictionary)
    name_of_row = np.array([dictionary.get(group_id, "") for group_id in group_ids.tolist()], dtype=object)
    return name_of_row, name_of_row != ""  # no name is empty (`check_dictionary`)


def _checked_columns(report: UsageReport, flags: int) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray | None]:
    """The header items (the dimensions as their codes), ids and little-endian rates of `report` (in the width
    `flags` says), checked as the decoder would; a rate too large for float32 is refused rather than sent as inf."""
    header = [
        report.broker,
        *(as_int(getattr(report, name)) for name in ("incarnation", "seq", "sent_at_ms", "interval_ms")),
    ]
    check_header(*header)
    if not isinstance(report.dimensions, tuple | list):
        raise ReportError(f"dimensions is {type_name(report.dimensions)}, not a tuple")
    dimensions = list(report.dimensions)
    codes = dimension_codes(dimensions)
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
    return [*header, codes], group_ids, usage, demand


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
    body = _parse(data, key, public_keys, known_brokers, max_bytes, expected=None)
    batch, rejected = checked_batch([body], body.dimensions)
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
    try:
        expected = (dimension_codes(list(dimensions)), dimensions)  # as a body holds them, and as they decode
    except ReportError as error:
        raise ValueError(f"dimensions: {error.reason}") from None
    bodies: list[ParsedBody] = []
    positions: list[int] = []
    rejected: dict[int, ReportError] = {}
    for position, data in enumerate(payloads):
        try:
            body = _parse(data, key, public_keys, known_brokers, max_bytes, expected=expected)
            if body.dimensions != dimensions:  # its columns would land in the wrong dimensions, or not fit at all
                raise ReportError(f"dimensions {list(body.dimensions)} are not {list(dimensions)}")
        except ReportError as error:
            rejected[position] = error
            continue
        bodies.append(body)
        positions.append(position)
    batch, bad_values = checked_batch(bodies, dimensions)
    rejected |= {positions[index]: error for index, error in bad_values.items()}
    return batch, dict(sorted(rejected.items()))


def _parse(
    data: bytes,
    key: bytes | None,
    public_keys: PublicKeys | None,
    known_brokers: Container[str] | None,
    max_bytes: int,
    *,
    expected: tuple[list[int], tuple[str, ...]] | None,
) -> ParsedBody:
    """Everything `decode_report` checks but the values in the columns (`checked_batch`). Dimension codes equal
    to those of `expected` (codes and names, checked by the caller) take its names without another check."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ReportError(f"report is {type(data).__name__}, not bytes")
    size = len(data) if isinstance(data, bytes) else memoryview(data).nbytes
    if size > max_bytes:
        raise ReportError(f"report is {size} bytes, over the limit of {max_bytes}")

    flags, sent_body, signature = parse_envelope(_unpack(data, "envelope"))
    if key is not None or public_keys is not None:
        if signature is None:
            raise ReportError("report is not signed")
        if bool(flags & ED25519) != (public_keys is not None):
            raise ReportError(f"report is signed with {'Ed25519' if flags & ED25519 else 'HMAC'}, not the key expected")
    if key is not None and not hmac.compare_digest(signature, hmac_signature(key, FORMAT_VERSION, flags, sent_body)):
        raise ReportError("bad signature")
    body = decompress_body(sent_body, max_bytes) if flags & COMPRESSED else sent_body
    parsed = _parse_body(_unpack(body, "body"), expected, _RATE_DTYPES[bool(flags & FLOAT32)])
    if known_brokers is not None and parsed.broker not in known_brokers:
        raise ReportError(f"unknown broker {parsed.broker!r}")
    if public_keys is not None and not public_keys.verify(
        parsed.broker, signature, signed_message(FORMAT_VERSION, flags, sent_body)
    ):
        raise ReportError(f"bad signature for broker {parsed.broker!r}")
    return parsed


def _unpack(data: bytes | bytearray | memoryview, what: str) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except _MSGPACK_ERRORS as error:
        raise ReportError(f"{what} is not valid msgpack") from error


def _parse_body(fields: Any, expected: tuple[list[int], tuple[str, ...]] | None, rate_dtype: np.dtype) -> ParsedBody:
    if not isinstance(fields, list):
        raise ReportError(f"body is {type_name(fields)}, not an array")
    if len(fields) != _BODY_ITEMS:
        raise ReportError(f"body has {len(fields)} items, not {_BODY_ITEMS}")
    broker, incarnation, seq, sent_at_ms, interval_ms, codes, ids, usage, demand, dictionary = fields
    check_header(broker, incarnation, seq, sent_at_ms, interval_ms)
    if expected is not None and codes == expected[0] and all(type(code) is int for code in codes):  # not 1.0, True
        dimensions = expected[1]
    else:
        dimensions = dimension_names(codes)
    id_width, id_bytes = id_column(ids, "group ids")
    n_entries = len(id_bytes) // id_width
    check_rate_bytes(usage, n_entries, len(dimensions), rate_dtype, "usage")
    if demand is not None:
        check_rate_bytes(demand, n_entries, len(dimensions), rate_dtype, "demand")
    return ParsedBody(
        broker,
        incarnation,
        seq,
        sent_at_ms,
        interval_ms,
        dimensions,
        ID_DTYPES[id_width],
        id_bytes,
        rate_dtype,
        usage,
        demand,
        None if dictionary is None else unpack_dictionary(dictionary),
        n_entries,
    )
