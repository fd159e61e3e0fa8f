"""The usage-report codec: exact round trips (float32 ones within float32's precision), each rejection reason,
fuzzing that only ReportError escapes."""

from __future__ import annotations

import hashlib
import hmac
import re
import warnings
import zlib
from dataclasses import replace
from functools import partial
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from allocator.wire.codec import (
    MAX_REPORT_BYTES,
    ReportError,
    decode_batch,
    decode_report,
    encode_report,
    encode_split,
)
from allocator.wire.envelope import COMPRESSED, FLOAT32, FORMAT_VERSION
from allocator.wire.report_fields import DIMENSIONS
from allocator.wire.usage_report import ReportBatch, UsageReport

KEY = b"cluster-key"
OTHER_KEY = b"another-key"
TWO_DIMS = ("publish_msgs_per_s", "publish_bytes_per_s")
FLOAT32_MAX = float(np.finfo(np.float32).max)


def make_report(
    n: int = 3,
    dimensions: tuple[str, ...] = TWO_DIMS,
    *,
    demand: bool = False,
    dictionary: bool = False,
    broker: str = "broker-1",
) -> UsageReport:
    D = len(dimensions)
    usage = np.arange(n * D, dtype=np.float64).reshape(n, D) * 1.5
    return UsageReport(
        broker=broker,
        incarnation=2,
        seq=17,
        sent_at_ms=1_700_000_000_123,
        interval_ms=1000,
        dimensions=dimensions,
        group_ids=np.arange(10, 10 + n, dtype=np.int64) * 7,
        usage=usage,
        demand=usage * 2 + 0.25 if demand else None,
        dictionary={int(g): f"tenant-{g}/ns" for g in np.arange(10, 10 + n) * 7} if dictionary else None,
    )


def envelope(body: Any, *, version: Any = FORMAT_VERSION, flags: Any = 0, signature: Any = None) -> bytes:
    """Wrap a body by hand, bypassing the encoder's checks; `body` is a list (packed here) or bytes."""
    payload = body if isinstance(body, bytes) else msgpack.packb(body, use_bin_type=True)
    items = [version, flags, payload] + ([] if signature is None else [signature])
    return msgpack.packb(items, use_bin_type=True)


def ids_field(ids: list[int], width: int = 2) -> list[Any]:
    dtype = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<i8"}[width]
    return [width, np.array(ids, dtype=dtype).tobytes()]


def dictionary_field(ids: list[int], names: list[str], width: int = 2) -> list[Any]:
    return [ids_field(ids, width), "\0".join(names).encode()]


def body_fields(**changes: Any) -> list[Any]:
    """The ten body items of a valid 3-group, 2-dimension report, with some replaced."""
    fields = {
        "broker": "broker-1",
        "incarnation": 1,
        "seq": 5,
        "sent_at_ms": 1000,
        "interval_ms": 1000,
        "dimensions": [0, 1],  # TWO_DIMS' codes
        "group_ids": ids_field([1, 2, 3]),
        "usage": np.ones((3, 2), dtype="<f8").tobytes(),
        "demand": None,
        "dictionary": None,
    }
    unknown = set(changes) - set(fields)
    assert not unknown, unknown
    fields.update(changes)
    return list(fields.values())


def rates(*rows: list[float], dtype: str = "<f8") -> bytes:
    return np.array(rows, dtype=dtype).tobytes()


def as_float32(report: UsageReport) -> UsageReport:
    """`report` with its rates rounded to float32, as a float32 round trip gives it back."""

    def rounded(rates: Any) -> np.ndarray | None:
        return None if rates is None else np.asarray(rates, dtype=np.float32).astype(np.float64)

    return replace(report, usage=rounded(report.usage), demand=rounded(report.demand))


def mac(key: bytes, flags: int, body: bytes) -> bytes:
    digest = hmac.new(key, b"quotalab/usage-report", hashlib.sha256)
    digest.update(bytes((FORMAT_VERSION, flags)))
    digest.update(body)
    return digest.digest()


# ---------------------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("key", [None, KEY])
@pytest.mark.parametrize(
    "report",
    [
        make_report(),
        make_report(0),
        make_report(0, ("dispatch_bytes_per_s",), dictionary=True),
        make_report(5, DIMENSIONS, demand=True),
        make_report(4, ("dispatch_msgs_per_s",), dictionary=True),
        make_report(6, DIMENSIONS[::-1], demand=True, dictionary=True),
    ],
    ids=["plain", "empty", "empty-with-dictionary", "demand", "dictionary", "everything"],
)
@pytest.mark.parametrize("float32", [False, True])
def test_round_trip(report: UsageReport, key: bytes | None, compress: bool, float32: bool) -> None:
    """The rates of `make_report` are multiples of 0.25 that float32 holds exactly."""
    data = encode_report(report, key=key, compress=compress, float32=float32)
    assert msgpack.unpackb(data)[1] == (COMPRESSED if compress else 0) | (FLOAT32 if float32 else 0)
    decoded = decode_report(data, key=key)
    assert decoded == report
    assert decoded.group_ids.dtype == np.int64
    assert decoded.usage.dtype == np.float64
    assert decoded.usage.shape == (len(report.group_ids), len(report.dimensions))
    assert isinstance(decoded.dimensions, tuple)


@pytest.mark.parametrize("largest, width", [(0, 1), (255, 1), (256, 2), (65_535, 2), (65_536, 4),
                                            (2**32 - 1, 4), (2**32, 8), (2**63 - 1, 8)])  # fmt: skip
def test_group_ids_take_the_smallest_width_that_holds_them(largest: int, width: int) -> None:
    report = UsageReport("b", 0, 0, 0, 1, TWO_DIMS, np.array([largest], dtype=np.int64), np.zeros((1, 2)))
    data = encode_report(report)
    assert msgpack.unpackb(msgpack.unpackb(data)[2])[6][0] == width
    assert decode_report(data) == report


def test_dimensions_travel_as_their_codes_not_their_names() -> None:
    """A dimension is its position in DIMENSIONS on the wire: 1 byte a dimension, where its name took ~20 (which a
    report of a few entries to each of a thousand peers paid in every report)."""
    report = make_report(2, DIMENSIONS[::-1])
    data = encode_report(report)
    assert msgpack.unpackb(msgpack.unpackb(data)[2])[5] == [3, 2, 1, 0]
    assert b"_per_s" not in data
    assert decode_report(data).dimensions == DIMENSIONS[::-1]
    one = encode_report(make_report(0, ("dispatch_bytes_per_s",)))
    assert len(one) == len(encode_report(make_report(0, ("publish_msgs_per_s",))))  # whichever, a 2-byte array


def test_compression_sets_the_flag_and_shrinks_a_repetitive_report() -> None:
    report = make_report(500, DIMENSIONS, dictionary=True)
    plain, packed = encode_report(report), encode_report(report, compress=True)
    assert msgpack.unpackb(plain)[1] == 0
    assert msgpack.unpackb(packed)[1] == COMPRESSED
    assert len(packed) < len(plain) / 2


def test_float32_rates_take_4_bytes_instead_of_8() -> None:
    """8 bytes an entry instead of 12 with one dimension and 4-byte ids; 20 instead of 36 with four (what an
    entry adds to a report whose body and columns take 3-byte bin16 headers either way)."""
    for dimensions, float64_bytes, float32_bytes in ((("publish_msgs_per_s",), 12, 8), (DIMENSIONS, 36, 20)):
        one, two = (replace(make_report(n, dimensions), group_ids=np.arange(n) + 100_000) for n in (1000, 1500))
        for float32, entry_bytes in ((False, float64_bytes), (True, float32_bytes)):
            assert (
                len(encode_report(two, float32=float32)) - len(encode_report(one, float32=float32)) == 500 * entry_bytes
            )


def test_float32_refuses_a_rate_it_would_turn_into_inf() -> None:
    largest = make_report(1, ("publish_msgs_per_s",))
    largest = replace(largest, usage=np.array([[FLOAT32_MAX]]), demand=np.array([[FLOAT32_MAX]]))
    assert decode_report(encode_report(largest, float32=True)) == largest
    over = np.array([[FLOAT32_MAX * 1.000001]])
    for name in ("usage", "demand"):
        report = replace(largest, **{name: over})
        with pytest.raises(ValueError, match=f"{name} has a rate over float32's largest, 3.402823e\\+38"):
            encode_report(report, float32=True)
        with pytest.raises(ValueError, match="over float32's largest"):
            encode_split(report, np.array([0]), np.array([0, 1]), float32=True)
        assert decode_report(encode_report(report)) == report  # float64 holds it


def test_encoder_accepts_numpy_integers_and_lists() -> None:
    report = UsageReport(
        broker="b",
        incarnation=np.int64(3),
        seq=np.uint32(4),
        sent_at_ms=np.int64(5),
        interval_ms=np.int32(6),
        dimensions=("publish_msgs_per_s",),
        group_ids=[4, 2],  # type: ignore[arg-type]
        usage=[[1.0], [2]],  # type: ignore[arg-type]
        dictionary={np.int64(4): "four"},  # type: ignore[dict-item]
    )
    decoded = decode_report(encode_report(report))
    assert decoded == report
    assert type(decoded.seq) is int
    assert decoded.dictionary == {4: "four"}


def test_equality_compares_every_field() -> None:
    report = make_report(demand=True, dictionary=True)
    assert report == make_report(demand=True, dictionary=True)
    assert report != make_report(demand=False, dictionary=True)
    assert report != make_report(demand=True, dictionary=False)
    assert report != make_report(4, demand=True, dictionary=True)
    assert report != make_report(demand=True, dictionary=True, broker="broker-2")
    assert report != "not a report"


def test_known_broker_is_accepted() -> None:
    data = encode_report(make_report())
    assert decode_report(data, known_brokers={"broker-1", "broker-2"}).broker == "broker-1"


def test_signed_report_decodes_without_a_key() -> None:
    report = make_report()
    assert decode_report(encode_report(report, key=KEY)) == report


def test_signed_report_fails_with_a_different_key() -> None:
    with pytest.raises(ReportError, match="bad signature"):
        decode_report(encode_report(make_report(), key=KEY), key=OTHER_KEY)


def test_every_signed_byte_matters() -> None:
    data = bytearray(encode_report(make_report(demand=True), key=KEY, compress=True))
    for i in range(len(data)):
        mutated = bytearray(data)
        mutated[i] ^= 0x01
        with pytest.raises(ReportError):
            decode_report(bytes(mutated), key=KEY)


def test_report_over_max_bytes_fails_before_parsing() -> None:
    data = encode_report(make_report(100, DIMENSIONS))
    assert decode_report(data, max_bytes=len(data)) is not None
    with pytest.raises(ReportError, match=f"report is {len(data)} bytes, over the limit of {len(data) - 1}"):
        decode_report(data, max_bytes=len(data) - 1)
    with pytest.raises(ReportError, match="over the limit"):
        decode_report(b"\xff" * (MAX_REPORT_BYTES + 1))


def test_default_limit_holds_a_pip82_sized_report() -> None:
    """5,000 groups x 4 dimensions with demand and a dictionary of 80-byte names, as DESIGN.md sizes it."""
    n = 5000
    rng = np.random.default_rng(0)
    usage = rng.lognormal(5, 2, (n, 4))
    group_ids = rng.choice(100_000, n, replace=False).astype(np.int64)
    names = {int(g): f"tenant-{g:06d}/".ljust(80, "x") for g in group_ids}
    report = UsageReport("broker-1", 1, 1, 0, 60_000, DIMENSIONS, group_ids, usage, usage * 1.1, names)
    data = encode_report(report, key=KEY)
    assert len(data) < MAX_REPORT_BYTES / 4
    assert decode_report(data, key=KEY) == report


def test_zip_bomb_stops_at_the_limit() -> None:
    bomb = zlib.compress(b"\0" * (64 * 1024 * 1024), 9)
    assert len(bomb) < 100_000
    with pytest.raises(ReportError, match="decompresses to over 1000000 bytes"):
        decode_report(envelope(bomb, flags=COMPRESSED), max_bytes=1_000_000)


def test_a_key_of_the_wrong_type_or_empty_is_a_configuration_error_not_a_bad_report() -> None:
    """A broker catches `ReportError` to count bad reports: a misconfigured key must not hide among them."""
    with pytest.raises(TypeError, match="key must be non-empty bytes or None, got empty bytes"):
        encode_report(make_report(), key=b"")
    for key in ("text", bytearray(b"k"), 42):
        with pytest.raises(TypeError, match=f"key must be non-empty bytes or None, got {type(key).__name__}"):
            decode_report(encode_report(make_report(), key=KEY), key=key)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            decode_batch([b""], TWO_DIMS, key=key)  # type: ignore[arg-type]


def test_a_wrong_key_is_a_report_error() -> None:
    with pytest.raises(ReportError, match="bad signature"):
        decode_report(encode_report(make_report(), key=KEY), key=OTHER_KEY)


# ------------------------------------------------------------------------------------------------ rejections

ZLIB_OF_BODY = zlib.compress(msgpack.packb(body_fields(), use_bin_type=True))

REJECTED: list[tuple[str, Any, dict[str, Any], str]] = [
    # (case, data, decode kwargs, expected reason; matched as a regular expression)
    ("not bytes", "text", {}, "report is str, not bytes"),
    ("garbage", b"\xc1\xc1\xc1", {}, "envelope is not valid msgpack"),
    ("empty input", b"", {}, "envelope is not valid msgpack"),
    ("truncated", encode_report(make_report())[:-5], {}, "envelope is not valid msgpack"),
    ("trailing bytes", encode_report(make_report()) + b"\0", {}, "envelope is not valid msgpack"),
    ("envelope not an array", msgpack.packb({"v": 1}), {}, "envelope is dict, not an array"),
    ("envelope empty", msgpack.packb([]), {}, "envelope is empty"),
    ("version 7", envelope(body_fields(), version=7), {}, "version 7 not supported"),
    ("version 0", envelope(body_fields(), version=0), {}, "version 0 not supported"),
    ("version 1, dimensions by name", envelope(body_fields(dimensions=list(TWO_DIMS)), version=1), {},
     r"^version 1 not supported \(this broker reads version 2\)$"),
    ("version as text", envelope(body_fields(), version="1"), {}, "version is str, not int"),
    ("version as bool", envelope(body_fields(), version=True), {}, "version is bool, not int"),
    ("envelope too short", msgpack.packb([FORMAT_VERSION, 0]), {}, "envelope has 2 items, not 3 or 4"),
    ("envelope too long", msgpack.packb([FORMAT_VERSION, 0, b"", b"", b""]), {}, "envelope has 5 items, not 3 or 4"),
    ("unknown flags", envelope(body_fields(), flags=8), {}, "unknown flags 0x8"),
    ("unknown and known flags", envelope(body_fields(), flags=COMPRESSED | FLOAT32 | 8), {}, "unknown flags 0xb"),
    ("negative flags", envelope(body_fields(), flags=-1), {}, "flags is negative"),
    ("body as text", msgpack.packb([FORMAT_VERSION, 0, "body"]), {}, "body is str, not bytes"),
    ("body not msgpack", envelope(b"\xc1"), {}, "body is not valid msgpack"),
    ("body not an array", envelope(msgpack.packb({"a": 1})), {}, "body is dict, not an array"),
    ("body too short", envelope(body_fields()[:9]), {}, "body has 9 items, not 10"),
    ("body too long", envelope([*body_fields(), None]), {}, "body has 11 items, not 10"),
    ("not zlib", envelope(b"not zlib", flags=COMPRESSED), {}, "body does not decompress"),
    ("zlib truncated", envelope(ZLIB_OF_BODY[:-4], flags=COMPRESSED), {}, "compressed body is truncated"),
    ("zlib then junk", envelope(ZLIB_OF_BODY + b"junk", flags=COMPRESSED), {},
     "data after the compressed body"),
    ("zlib inside over max", envelope(ZLIB_OF_BODY, flags=COMPRESSED), {"max_bytes": 60},
     "body decompresses to over 60 bytes"),  # the envelope is 54 bytes, the body inside 83
    ("broker not text", envelope(body_fields(broker=7)), {}, "broker is int, not str"),
    ("broker empty", envelope(body_fields(broker="")), {}, "broker is empty"),
    ("incarnation negative", envelope(body_fields(incarnation=-1)), {}, "incarnation is negative: -1"),
    ("incarnation float", envelope(body_fields(incarnation=1.0)), {}, "incarnation is float, not int"),
    ("seq negative", envelope(body_fields(seq=-3)), {}, "seq is negative: -3"),
    ("seq over int64", envelope(body_fields(seq=2**63)), {}, r"seq is over 2\*\*63 - 1"),
    ("seq missing", envelope(body_fields(seq=None)), {}, "seq is NoneType, not int"),
    ("sent_at_ms negative", envelope(body_fields(sent_at_ms=-1)), {}, "sent_at_ms is negative"),
    ("interval_ms zero", envelope(body_fields(interval_ms=0)), {}, "interval_ms is 0"),
    ("interval_ms text", envelope(body_fields(interval_ms="1s")), {}, "interval_ms is str, not int"),
    ("dimensions not array", envelope(body_fields(dimensions=0)), {}, "dimensions is int, not an array"),
    ("dimensions as bytes", envelope(body_fields(dimensions=b"\0\1")), {}, "dimensions is bytes, not an array"),
    ("no dimensions", envelope(body_fields(dimensions=[], usage=b"")), {}, "no dimensions"),
    ("unknown dimension code", envelope(body_fields(dimensions=[0, 4])), {}, "unknown dimension code 4"),
    ("negative dimension code", envelope(body_fields(dimensions=[-1, 0])), {}, "unknown dimension code -1"),
    ("dimension by name", envelope(body_fields(dimensions=["publish_msgs_per_s", 1])), {},
     "unknown dimension code 'publish_msgs_per_s'"),
    ("dimension code float", envelope(body_fields(dimensions=[0, 1.0])), {}, "unknown dimension code 1.0"),
    ("dimension code bool", envelope(body_fields(dimensions=[0, True])), {}, "unknown dimension code True"),
    ("dimension repeats", envelope(body_fields(dimensions=[0, 0])), {}, "a dimension repeats"),
    ("ids not a pair", envelope(body_fields(group_ids=[1, 2, 3])), {},
     r"group ids are not a \[width, bytes\] pair"),
    ("id width 3", envelope(body_fields(group_ids=[3, b"abc"])), {}, "group ids width 3 not in 1, 2, 4, 8"),
    ("id width text", envelope(body_fields(group_ids=["2", b""])), {}, "group ids width '2' not in 1, 2, 4, 8"),
    ("id width bool", envelope(body_fields(group_ids=[True, b""])), {}, "group ids width True not in"),
    ("group ids as list", envelope(body_fields(group_ids=[2, [1, 2, 3]])), {}, "group ids are list, not bytes"),
    ("group ids ragged", envelope(body_fields(group_ids=[2, b"\1\0\2\0\3"])), {},
     "group ids are 5 bytes, not a multiple of 2"),
    ("usage as list", envelope(body_fields(usage=[1.0] * 6)), {}, "usage is list, not bytes"),
    ("usage ragged", envelope(body_fields(usage=b"\0" * 17)), {},
     "usage is 17 bytes, not whole rows of 2 float64"),
    ("fewer usage rows", envelope(body_fields(usage=rates([1, 2], [3, 4]))), {},
     "lengths differ: 3 group ids, 2 usage rows"),
    ("more usage rows", envelope(body_fields(usage=rates(*[[1, 2]] * 4))), {},
     "lengths differ: 3 group ids, 4 usage rows"),
    ("fewer demand rows", envelope(body_fields(demand=rates([1, 2]))), {},
     "lengths differ: 3 group ids, 1 demand rows"),
    ("demand ragged", envelope(body_fields(demand=b"\0" * 8)), {}, "demand is 8 bytes, not whole rows"),
    ("float32 usage ragged", envelope(body_fields(usage=b"\0" * 9), flags=FLOAT32), {},
     "usage is 9 bytes, not whole rows of 2 float32"),
    ("float64 usage, float32 flag", envelope(body_fields(), flags=FLOAT32), {},
     "lengths differ: 3 group ids, 6 usage rows"),
    ("float32 usage, no flag", envelope(body_fields(usage=rates([1, 2], [3, 4], [5, 6], dtype="<f4"))), {},
     "usage is 24 bytes, not whole rows of 2 float64"),
    ("float32 usage inf", envelope(body_fields(usage=rates([1, 2], [np.inf, 4], [5, 6], dtype="<f4")),
                                   flags=FLOAT32), {}, "usage has inf"),
    ("float32 demand NaN", envelope(body_fields(usage=rates([1, 2], [3, 4], [5, 6], dtype="<f4"),
                                                demand=rates([1, 2], [3, np.nan], [5, 6], dtype="<f4")),
                                    flags=FLOAT32), {}, "demand has NaN"),
    ("usage NaN", envelope(body_fields(usage=rates([1, 2], [np.nan, 4], [5, 6]))), {}, "usage has NaN"),
    ("usage inf", envelope(body_fields(usage=rates([1, 2], [np.inf, 4], [5, 6]))), {}, "usage has inf"),
    ("usage negative", envelope(body_fields(usage=rates([1, 2], [-1e-9, 4], [5, 6]))), {},
     "usage has negative values"),
    ("demand NaN", envelope(body_fields(demand=rates([1, 2], [3, 4], [5, np.nan]))), {}, "demand has NaN"),
    ("demand -inf", envelope(body_fields(demand=rates([1, 2], [3, 4], [5, -np.inf]))), {}, "demand has inf"),
    ("demand negative", envelope(body_fields(demand=rates([1, 2], [3, -4], [5, 6]))), {},
     "demand has negative values"),
    ("duplicate ids", envelope(body_fields(group_ids=ids_field([9, 4, 9]))), {}, "duplicate group ids: 9"),
    ("negative id", envelope(body_fields(group_ids=ids_field([1, -2, 3], 8))), {}, "negative group id -2"),
    ("dictionary as a map", envelope(body_fields(dictionary={1: "a"})), {},
     r"dictionary is not an \[ids, names\] pair"),
    ("dictionary ids width", envelope(body_fields(dictionary=[[3, b""], b""])), {},
     "dictionary ids width 3 not in"),
    ("dictionary names as list", envelope(body_fields(dictionary=[ids_field([1]), ["a"]])), {},
     "dictionary names are list, not bytes"),
    ("dictionary names not UTF-8", envelope(body_fields(dictionary=[ids_field([1]), b"\xff"])), {},
     "dictionary names are not UTF-8"),
    ("fewer dictionary names", envelope(body_fields(dictionary=dictionary_field([1, 2], ["a"]))), {},
     "lengths differ: 2 dictionary ids, 1 names"),
    ("more dictionary names", envelope(body_fields(dictionary=dictionary_field([], ["a"]))), {},
     "lengths differ: 0 dictionary ids, 1 names"),
    ("negative dictionary id", envelope(body_fields(dictionary=dictionary_field([-1], ["a"], 8))), {},
     "negative dictionary id -1"),
    ("duplicate dictionary ids", envelope(body_fields(dictionary=dictionary_field([1, 1], ["a", "b"]))), {},
     "duplicate dictionary ids: 1"),
    ("dictionary name empty", envelope(body_fields(dictionary=dictionary_field([1, 2], ["a", ""]))), {},
     "a dictionary name is empty"),
    ("dictionary names repeat", envelope(body_fields(dictionary=dictionary_field([1, 2], ["a", "a"]))), {},
     "dictionary names repeat"),
    ("over the size limit", encode_report(make_report(50)), {"max_bytes": 64}, "over the limit of 64"),
    ("unsigned, key required", encode_report(make_report()), {"key": KEY}, "report is not signed"),
    ("signed with another key", encode_report(make_report(), key=OTHER_KEY), {"key": KEY}, "bad signature"),
    ("signature zeroed", envelope(body_fields(), signature=bytes(32)), {"key": KEY}, "bad signature"),
    ("signature short", envelope(body_fields(), signature=b"12345"), {}, "signature is 5 bytes, not 32"),
    ("signature text", envelope(body_fields(), signature="sig"), {}, "signature is str, not bytes"),
    ("flags flipped under signature",
     envelope(ZLIB_OF_BODY, signature=mac(KEY, COMPRESSED, ZLIB_OF_BODY)), {"key": KEY}, "bad signature"),
    ("float32 flag set under signature", envelope(ZLIB_OF_BODY, flags=COMPRESSED | FLOAT32,
                                                  signature=mac(KEY, COMPRESSED, ZLIB_OF_BODY)), {"key": KEY},
     "bad signature"),
    ("unknown broker", encode_report(make_report()), {"known_brokers": {"broker-2"}},
     "unknown broker 'broker-1'"),
]  # fmt: skip


@pytest.mark.parametrize("data, kwargs, reason", [case[1:] for case in REJECTED], ids=[c[0] for c in REJECTED])
def test_rejected(data: Any, kwargs: dict[str, Any], reason: str) -> None:
    with pytest.raises(ReportError, match=reason) as caught:
        decode_report(data, **kwargs)
    assert caught.value.reason == str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_hand_built_envelope_is_accepted() -> None:
    """The table's helpers build valid reports when nothing is broken, so each case tests one fault."""
    body = msgpack.packb(body_fields(demand=rates([1, 2], [3, 4], [5, 6]), dictionary=dictionary_field([1], ["a"])))
    assert decode_report(envelope(body, signature=mac(KEY, 0, body)), key=KEY).dictionary == {1: "a"}
    assert decode_report(envelope(ZLIB_OF_BODY, flags=COMPRESSED), max_bytes=len(ZLIB_OF_BODY) * 4).seq == 5
    float32_body = body_fields(usage=rates([1, 2], [3, 4], [5, 0.1], dtype="<f4"))
    assert decode_report(envelope(float32_body, flags=FLOAT32)).usage.tolist() == [[1, 2], [3, 4], [5, np.float32(0.1)]]


ENCODER_REJECTS = [
    ("negative seq", {"seq": -1}, "seq is negative"),
    ("bool incarnation", {"incarnation": True}, "incarnation is bool, not int"),
    ("zero interval", {"interval_ms": 0}, "interval_ms is 0"),
    ("unknown dimension", {"dimensions": ("cpu", "publish_msgs_per_s")}, "unknown dimension 'cpu'"),
    ("dimensions as text", {"dimensions": "publish_msgs_per_s"}, "dimensions is str, not a tuple"),
    ("NaN usage", {"usage": np.array([[1.0, np.nan]] * 3)}, "usage has NaN"),
    ("negative demand", {"demand": -np.ones((3, 2))}, "demand has negative values"),
    ("usage as a vector", {"usage": np.ones(3)}, r"usage has shape \(3,\), not \(n, 2\)"),
    ("usage rows", {"usage": np.ones((2, 2))}, "lengths differ: 3 group ids, 2 usage rows"),
    ("usage columns", {"usage": np.ones((3, 3))}, "usage has 3 columns for 2 dimensions"),
    ("usage not numeric", {"usage": [["a", "b"]] * 3}, "usage is not numeric"),
    ("float ids", {"group_ids": np.array([1.0, 2.0, 3.0])}, "group ids are float64, not integers"),
    ("2-d ids", {"group_ids": np.ones((3, 1), dtype=np.int64)}, r"group ids have shape \(3, 1\)"),
    ("huge unsigned id", {"group_ids": np.array([2**64 - 1, 1, 2], dtype=np.uint64)}, "over 2\\*\\*63 - 1"),
    ("duplicate ids", {"group_ids": np.array([5, 5, 6])}, "duplicate group ids: 5"),
    ("negative id", {"group_ids": np.array([5, -5, 6])}, "negative group id -5"),
    ("dictionary as list", {"dictionary": [(1, "a")]}, "dictionary is list, not a dict"),
    ("dictionary id text", {"dictionary": {"1": "a"}}, "dictionary ids are <U1, not integers"),
    ("dictionary id huge", {"dictionary": {2**64: "a"}}, "dictionary ids are object, not integers"),
    ("dictionary id negative", {"dictionary": {-1: "a"}}, "negative dictionary id -1"),
    ("dictionary name bytes", {"dictionary": {1: b"a"}}, "a dictionary name is not str"),
    ("dictionary name with NUL", {"dictionary": {1: "a\0b"}}, "a dictionary name contains NUL"),
    ("dictionary name empty", {"dictionary": {1: "a", 2: ""}}, "a dictionary name is empty"),
    ("dictionary name surrogate", {"dictionary": {1: "\ud800"}}, "a dictionary name is not valid Unicode"),
    ("dictionary name repeats", {"dictionary": {1: "a", 2: "a"}}, "dictionary names repeat"),
]


@pytest.mark.parametrize("changes, reason", [c[1:] for c in ENCODER_REJECTS], ids=[c[0] for c in ENCODER_REJECTS])
def test_encoder_refuses_what_the_decoder_would(changes: dict[str, Any], reason: str) -> None:
    fields = vars(make_report()) | changes
    with pytest.raises(ReportError, match=reason):
        encode_report(UsageReport(**fields))


# ------------------------------------------------------------------------------------------------ properties


def rate_values(max_rate: float) -> st.SearchStrategy[float]:
    return st.floats(min_value=0.0, max_value=max_rate, allow_nan=False, allow_infinity=False)


dimension_tuples = st.builds(
    lambda order, n: tuple(order[:n]), st.permutations(DIMENSIONS), st.integers(1, len(DIMENSIONS))
)


@st.composite
def usage_reports(draw: st.DrawFn, dimensions: tuple[str, ...] | None = None, max_rate: float = 1e300) -> UsageReport:
    n = draw(st.integers(0, 200))
    dimensions = draw(dimension_tuples) if dimensions is None else dimensions
    largest = draw(st.sampled_from([2**8 - 1, 2**16 - 1, 2**32 - 1, 2**63 - 1]))
    group_ids = draw(hnp.arrays(np.int64, n, elements=st.integers(0, largest), unique=True))
    shape = (n, len(dimensions))
    usage = draw(hnp.arrays(np.float64, shape, elements=rate_values(max_rate)))
    demand = draw(st.none() | hnp.arrays(np.float64, shape, elements=rate_values(max_rate)))
    dictionary = draw(
        st.none()
        | st.dictionaries(
            st.integers(0, 2**63 - 1),
            st.text(st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=80),
            max_size=20,
        ).filter(lambda d: len(set(d.values())) == len(d))
    )
    return UsageReport(
        broker=draw(st.text(min_size=1, max_size=30)),
        incarnation=draw(st.integers(0, 2**63 - 1)),
        seq=draw(st.integers(0, 2**63 - 1)),
        sent_at_ms=draw(st.integers(0, 2**63 - 1)),
        interval_ms=draw(st.integers(1, 2**63 - 1)),
        dimensions=dimensions,
        group_ids=group_ids,
        usage=usage,
        demand=demand,
        dictionary=dictionary,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(usage_reports())
def test_any_valid_report_round_trips_exactly(report: UsageReport) -> None:
    for compress in (False, True):
        for key in (None, KEY):
            decoded = decode_report(encode_report(report, key=key, compress=compress), key=key)
            assert decoded == report
            # bit for bit, which array_equal alone would not check for -0.0
            assert decoded.usage.tobytes() == np.asarray(report.usage, dtype=np.float64).tobytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(usage_reports(max_rate=FLOAT32_MAX))
def test_any_valid_report_round_trips_within_float32_precision(report: UsageReport) -> None:
    """Each rate comes back as the nearest float32 (relative error at most 2**-24, or half the smallest float32
    below its normal range), as float64; everything else exactly."""
    for compress in (False, True):
        for key in (None, KEY):
            decoded = decode_report(encode_report(report, key=key, compress=compress, float32=True), key=key)
            assert decoded == as_float32(report)
            assert decoded.usage.dtype == np.float64
            for got, sent in ((decoded.usage, report.usage), (decoded.demand, report.demand)):
                if sent is not None:
                    np.testing.assert_allclose(
                        got, sent, rtol=2**-24, atol=float(np.finfo(np.float32).smallest_subnormal) / 2
                    )


def decode_or_report_error(data: Any, **kwargs: Any) -> UsageReport | None:
    """Decode, returning None on `ReportError`; any other exception fails the test that calls it."""
    try:
        return decode_report(data, **kwargs)
    except ReportError:
        return None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.sampled_from([None, KEY]))
def test_random_bytes_raise_only_report_error(data: bytes, key: bytes | None) -> None:
    decode_or_report_error(data, key=key, known_brokers={"broker-1"})


mutations = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("set"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 16)),
)


def mutate(data: bytes, steps: list[tuple[str, int, int]]) -> bytes:
    out = bytearray(data)
    for kind, position, value in steps:
        at = position % (len(out) + 1)
        if kind == "flip" and at < len(out):
            out[at] ^= value
        elif kind == "set" and at < len(out):
            out[at] = value
        elif kind == "truncate":
            del out[at:]
        elif kind == "insert":
            out.insert(at, value)
        elif kind == "delete":
            del out[at : at + value]
    return bytes(out)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    usage_reports(max_rate=FLOAT32_MAX),
    st.booleans(),
    st.booleans(),
    st.sampled_from([None, KEY]),
    st.lists(mutations, min_size=1, max_size=4),
)
def test_mutated_reports_raise_only_report_error(
    report: UsageReport, compress: bool, float32: bool, key: bytes | None, steps: list[tuple[str, int, int]]
) -> None:
    data = mutate(encode_report(report, key=key, compress=compress, float32=float32), steps)
    decoded = decode_or_report_error(data, key=key)
    if key is not None and decoded is not None:  # a signed report either fails or is the one that was signed
        assert decoded == (as_float32(report) if float32 else report)


msgpack_ints = st.integers(-(2**63), 2**64 - 1)  # what msgpack can carry
msgpack_objects = st.recursive(
    st.none() | st.booleans() | msgpack_ints | st.floats() | st.text(max_size=20) | st.binary(max_size=40),
    lambda children: st.lists(children, max_size=12) | st.dictionaries(msgpack_ints | st.text(), children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(msgpack_objects, st.sampled_from([0, COMPRESSED, FLOAT32, COMPRESSED | FLOAT32]))
def test_random_msgpack_objects_raise_only_report_error(obj: Any, flags: int) -> None:
    packed = msgpack.packb(obj, use_bin_type=True)
    decode_or_report_error(packed)
    decode_or_report_error(envelope(obj, flags=flags))
    decode_or_report_error(envelope(zlib.compress(packed), flags=COMPRESSED | flags))
    decode_or_report_error(
        envelope(packed, flags=flags & FLOAT32, signature=mac(KEY, flags & FLOAT32, packed)), key=KEY
    )


# where a random object may replace part of a valid body: any item, or an item inside the id and dictionary pairs
BODY_PATHS = [(i,) for i in range(10)] + [(6, 0), (6, 1), (9, 0), (9, 1), (9, 0, 0), (9, 0, 1)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(BODY_PATHS), msgpack_objects, st.booleans(), st.booleans())
def test_one_bad_body_item_raises_only_report_error(
    path: tuple[int, ...], obj: Any, compressed: bool, float32: bool
) -> None:
    dtype = "<f4" if float32 else "<f8"
    fields = body_fields(
        usage=rates([1, 2], [3, 4], [5, 6], dtype=dtype),
        demand=rates([1, 2], [3, 4], [5, 6], dtype=dtype),
        dictionary=dictionary_field([1, 7], ["a", "b"]),
    )
    parent = fields
    for i in path[:-1]:
        parent = parent[i]
    parent[path[-1]] = obj
    body = msgpack.packb(fields, use_bin_type=True)
    flags = FLOAT32 if float32 else 0
    if compressed:
        body, flags = zlib.compress(body), flags | COMPRESSED
    decode_or_report_error(envelope(body, flags=flags), known_brokers={"broker-1"})


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 3), msgpack_objects)
def test_one_bad_envelope_item_raises_only_report_error(index: int, obj: Any) -> None:
    items: list[Any] = [FORMAT_VERSION, 0, msgpack.packb(body_fields()), bytes(32)]
    items[index] = obj
    for key in (None, KEY):
        decode_or_report_error(msgpack.packb(items, use_bin_type=True), key=key)


# ------------------------------------------------------------------------------------- many reports at once


def test_encode_split_sends_each_part_its_rows_with_the_header_and_the_names_of_its_groups() -> None:
    report = make_report(6, demand=True, dictionary=True)
    rows, bounds = np.array([0, 2, 5, 1, 2, 3]), np.array([0, 3, 3, 6])  # the second part is empty
    parts = [decode_report(payload, key=KEY) for payload in encode_split(report, rows, bounds, key=KEY)]
    assert len(parts) == 3
    for part, start, end in zip(parts, bounds[:-1], bounds[1:], strict=True):
        part_rows = rows[start:end]
        assert (part.broker, part.incarnation, part.seq, part.sent_at_ms) == ("broker-1", 2, 17, 1_700_000_000_123)
        np.testing.assert_array_equal(part.group_ids, report.group_ids[part_rows])
        np.testing.assert_array_equal(part.usage, report.usage[part_rows])
        np.testing.assert_array_equal(part.demand, report.demand[part_rows])
        assert part.dictionary == {int(g): report.dictionary[int(g)] for g in report.group_ids[part_rows]}


def test_encode_split_sends_each_part_the_names_of_its_groups_the_dictionary_holds_and_refuses_a_bad_one() -> None:
    named = {0: "ns-a", 3: "ns-d", 5: "ns-f"}  # the groups not named before: a part may have none of them
    report = replace(make_report(6), group_ids=np.arange(6, dtype=np.int64), dictionary=named)
    rows, bounds = np.array([1, 3, 4, 0, 2, 5, 1, 2]), np.array([0, 3, 6, 8])
    parts = [decode_report(payload) for payload in encode_split(report, rows, bounds)]
    assert [part.dictionary for part in parts] == [{3: "ns-d"}, {0: "ns-a", 5: "ns-f"}, {}]
    for bad_name in ("", "ns\0x"):  # checked whole, even where no part names its group
        with pytest.raises(ReportError, match="dictionary name"):
            encode_split(replace(report, dictionary={**named, 4: bad_name}), np.array([0, 1]), np.array([0, 2]))


@pytest.mark.parametrize(
    "rows, bounds, reason",
    [([0, 0], [0, 2], "rows do not increase within a part"), ([2, 1], [0, 2], "rows do not increase"),
     ([0, 3], [0, 2], "a row is out of range"), ([-1], [0, 1], "a row is out of range")],
)  # fmt: skip
def test_encode_split_refuses_a_part_that_repeats_a_group(rows: list[int], bounds: list[int], reason: str) -> None:
    with pytest.raises(ReportError, match=reason):
        encode_split(make_report(3), np.array(rows), np.array(bounds))
    assert len(encode_split(make_report(3), np.array([1, 0]), np.array([0, 1, 2]))) == 2  # across parts: fine


def test_decode_batch_rejects_only_the_bad_reports_each_with_its_reason() -> None:
    good = encode_report(make_report(4, demand=True))
    shuffled = envelope(body_fields(group_ids=ids_field([3, 1, 2])))  # unique, not increasing: valid
    payloads = [
        good,
        envelope(body_fields(usage=rates([1, 2], [np.nan, 4], [5, 6]))),
        shuffled,
        envelope(body_fields(demand=rates([1, 2], [3, -4], [5, 6]))),
        envelope(body_fields(group_ids=ids_field([9, 4, 9]))),
        envelope(body_fields(group_ids=ids_field([1, -2, 3], 8))),
        good,
        b"\xc1",
        encode_report(make_report(2, ("publish_msgs_per_s",))),
    ]
    batch, rejected = decode_batch(payloads, TWO_DIMS)
    assert {position: error.reason for position, error in rejected.items()} == {
        1: "usage has NaN",
        3: "demand has negative values",
        4: "duplicate group ids: 9",
        5: "negative group id -2",
        7: "envelope is not valid msgpack",
        8: "dimensions ['publish_msgs_per_s'] are not ['publish_msgs_per_s', 'publish_bytes_per_s']",
    }
    assert len(batch) == 3 and batch.offsets.tolist() == [0, 4, 7, 11]
    assert batch.report(0) == batch.report(2) == make_report(4, demand=True)
    assert batch.report(1).group_ids.tolist() == [3, 1, 2] and batch.report(1).demand is None
    assert batch.demand[4:7].tolist() == [[0.0, 0.0]] * 3  # no demand: zeros, and has_demand says so
    assert batch.has_demand.tolist() == [True, False, True]
    with pytest.raises(ValueError, match="dimensions: unknown dimension 'cpu'"):
        decode_batch([good], ("cpu",))
    empty, none_rejected = decode_batch([], TWO_DIMS)
    assert len(empty) == 0 and none_rejected == {} and empty.usage.shape == (0, 2)


def test_a_batch_may_mix_float64_and_float32_reports() -> None:
    reports = [replace(make_report(n, demand=True), usage=make_report(n).usage + 0.1) for n in (3, 4, 2, 5, 0)]
    float32 = [False, True, True, False, True]
    payloads = [
        encode_report(report, key=KEY, compress=index % 2 == 1, float32=narrow)
        for index, (report, narrow) in enumerate(zip(reports, float32, strict=True))
    ]
    payloads.insert(2, envelope(body_fields(usage=rates([1, 2], [3, 4], [5, np.nan], dtype="<f4")), flags=FLOAT32))
    batch, rejected = decode_batch(payloads, TWO_DIMS)
    assert {position: error.reason for position, error in rejected.items()} == {2: "usage has NaN"}
    assert batch.usage.dtype == batch.demand.dtype == np.float64
    expected = [as_float32(report) if narrow else report for report, narrow in zip(reports, float32, strict=True)]
    assert [batch.report(index) for index in range(len(batch))] == expected
    assert batch.report(0).usage[0, 0] == 0.1 and batch.report(1).usage[0, 0] == float(np.float32(0.1)) != 0.1


def test_a_batch_of_reports_gives_each_report_back() -> None:
    reports = [make_report(3, demand=True, dictionary=True), make_report(0), make_report(2, broker="broker-2")]
    batch = ReportBatch.of(reports, TWO_DIMS)
    assert [batch.report(index) for index in range(len(batch))] == reports
    with pytest.raises(ValueError, match="every report must be in the dimensions"):
        ReportBatch.of([make_report(1, ("publish_msgs_per_s",))], TWO_DIMS)


VALUE_FAULTS = "has NaN|has inf|has negative values|duplicate group ids|negative group id"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dimension_tuples, st.data())
def test_decode_batch_says_what_decode_report_says_of_each(dimensions: tuple[str, ...], data: st.DataObject) -> None:
    float64_payloads = st.builds(encode_report, usage_reports(dimensions) | usage_reports())
    float32_payloads = st.builds(
        partial(encode_report, float32=True),
        usage_reports(dimensions, max_rate=FLOAT32_MAX) | usage_reports(max_rate=FLOAT32_MAX),
    )
    encoded = data.draw(st.lists(float64_payloads | float32_payloads, max_size=5))
    payloads = [mutate(payload, data.draw(st.lists(mutations, max_size=2))) for payload in encoded]
    batch, rejected = decode_batch(payloads, dimensions)
    accepted = iter(range(len(batch)))
    for position, payload in enumerate(payloads):
        try:
            expected: UsageReport | str = decode_report(payload)
        except ReportError as error:
            expected = error.reason
        got = rejected[position].reason if position in rejected else batch.report(next(accepted))
        if isinstance(expected, UsageReport) and expected.dimensions != dimensions:
            expected = f"dimensions {list(expected.dimensions)} are not {list(dimensions)}"
        elif isinstance(got, str) and got.startswith("dimensions ") and re.search(VALUE_FAULTS, str(expected)):
            continue  # the batch refuses other dimensions before it looks at the values decode_report refused
        assert got == expected
    assert next(accepted, None) is None


@pytest.mark.parametrize("code", [True, 1.0])
def test_a_batch_refuses_a_code_that_only_equals_one_of_its_own(code: Any) -> None:
    """`[0, True] == [0, 1]` in Python: the batch's shortcut for its own codes must not take True or 1.0 for 1."""
    batch, rejected = decode_batch([envelope(body_fields(dimensions=[0, code]))], TWO_DIMS)
    assert len(batch) == 0
    assert rejected[0].reason == f"unknown dimension code {code!r}"


dimension_code_lists = st.lists(
    st.integers(-2, len(DIMENSIONS) + 1) | st.sampled_from([True, False, 1.0, None, "publish_msgs_per_s", [0]]),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(dimension_code_lists, dimension_tuples)
def test_any_dimension_codes_decode_to_their_dimensions_or_a_report_error(
    codes: list[Any], dimensions: tuple[str, ...]
) -> None:
    """A body's codes decode to the dimensions at those positions of DIMENSIONS when they are distinct ints in
    range, else to a `ReportError`; a batch in `dimensions` takes the report exactly when its codes are theirs."""
    known = all(type(code) is int and 0 <= code < len(DIMENSIONS) for code in codes)
    valid = bool(codes) and known and len(set(codes)) == len(codes)
    body = body_fields(dimensions=codes, group_ids=ids_field([1]), usage=np.ones((1, len(codes))).tobytes())
    payload = envelope(body)
    if valid:
        assert decode_report(payload).dimensions == tuple(DIMENSIONS[code] for code in codes)
    else:
        with pytest.raises(ReportError):
            decode_report(payload)
    batch, rejected = decode_batch([payload], dimensions)
    theirs = valid and codes == [DIMENSIONS.index(dimension) for dimension in dimensions]
    assert (len(batch), len(rejected)) == ((1, 0) if theirs else (0, 1))


def test_a_float32_column_holding_a_signalling_nan_is_refused_without_a_warning() -> None:
    """Widening a signalling NaN to float64 raises the invalid flag: the batch refuses the report for its NaN
    and says nothing else (a hostile peer would otherwise put a RuntimeWarning in the log of every broker)."""
    report = make_report()
    payload = encode_report(report, float32=True)
    rate = np.float32(report.usage[1, 0]).tobytes()
    signalling_nan = np.array([0x7FA00000], dtype=np.uint32).tobytes()
    assert payload.count(rate) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batch, rejected = decode_batch([payload.replace(rate, signalling_nan)], TWO_DIMS)
    assert len(batch) == 0
    assert "has NaN" in rejected[0].reason
