"""The fields of a usage report on the wire, each checked (and packed or unpacked) on its own.

`allocator.wire.codec` assembles a report from these and reads one back; every problem is a `ReportError` with a
short reason, so a broker can count and drop a bad report without ever failing because of one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

DIMENSIONS = ("publish_msgs_per_s", "publish_bytes_per_s", "dispatch_msgs_per_s", "dispatch_bytes_per_s")
"""The quota dimensions a report may carry. On the wire a dimension is its code, its position here: every broker
of a format version knows this table, so a report does not spell the names (~20 bytes each, a third of a small
report's header). Add a dimension at the end only: a code that changes meaning needs a new `FORMAT_VERSION`."""
INT64_MAX = 2**63 - 1
ID_DTYPES = {1: np.dtype("<u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<i8")}


class ReportError(ValueError):
    """A report that is not valid; `reason` says why in a few words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def check_header(broker: Any, incarnation: Any, seq: Any, sent_at_ms: Any, interval_ms: Any) -> None:
    if not isinstance(broker, str):
        raise ReportError(f"broker is {type_name(broker)}, not str")
    if not broker:
        raise ReportError("broker is empty")
    int_field(incarnation, "incarnation")
    int_field(seq, "seq")
    int_field(sent_at_ms, "sent_at_ms")
    if int_field(interval_ms, "interval_ms") == 0:
        raise ReportError("interval_ms is 0")


def as_int(value: Any) -> Any:
    """A numpy integer as a Python int, which msgpack can pack; anything else is left to the checks."""
    return int(value) if isinstance(value, np.integer) else value


def int_field(value: Any, name: str) -> int:
    """A non-negative int that fits in int64 (bool, which is an int to Python, is refused)."""
    if type(value) is not int:
        raise ReportError(f"{name} is {type_name(value)}, not int")
    if value < 0:
        raise ReportError(f"{name} is negative: {value}")
    if value > INT64_MAX:
        raise ReportError(f"{name} is over 2**63 - 1")
    return value


def dimension_codes(dimensions: list[Any]) -> list[int]:
    """The codes of `dimensions` (names), checked as `dimension_names` checks a report's codes."""
    for dimension in dimensions:
        if not isinstance(dimension, str) or dimension not in DIMENSIONS:
            raise ReportError(f"unknown dimension {dimension!r}")
    codes = [DIMENSIONS.index(dimension) for dimension in dimensions]
    dimension_names(codes)  # none, or one twice
    return codes


def dimension_names(codes: Any) -> tuple[str, ...]:
    """The dimensions of a report's codes, checked: a non-empty array of distinct codes of `DIMENSIONS`."""
    if not isinstance(codes, list):
        raise ReportError(f"dimensions is {type_name(codes)}, not an array")
    if not codes:
        raise ReportError("no dimensions")
    for code in codes:
        if type(code) is not int or not 0 <= code < len(DIMENSIONS):
            raise ReportError(f"unknown dimension code {code!r}")
    if len(set(codes)) != len(codes):
        raise ReportError("a dimension repeats")
    return tuple(DIMENSIONS[code] for code in codes)


def ids_array(ids: Any, what: str) -> np.ndarray:
    """The sender's ids as int64[n]: any integer dtype that fits, or an empty array of any dtype."""
    try:
        array = np.asarray(ids)
    except (TypeError, ValueError, OverflowError) as error:
        raise ReportError(f"{what} are not an array") from error
    if array.ndim != 1:
        raise ReportError(f"{what} have shape {array.shape}, not (n,)")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype.kind not in "iu":
        raise ReportError(f"{what} are {array.dtype}, not integers")
    if array.dtype.kind == "u" and array.max() > INT64_MAX:
        raise ReportError(f"one of the {what} is over 2**63 - 1")
    return array.astype(np.int64, copy=False)


def pack_ids(ids: np.ndarray) -> list[Any]:
    """`[width, bytes]` with the fewest bytes per id (1, 2, 4 or 8) that hold every id."""
    largest = int(ids.max()) if ids.size else 0
    width = next((w for w in (1, 2, 4) if largest < 256**w), 8)
    return [width, ids.astype(ID_DTYPES[width], copy=False).tobytes()]


def id_column(ids: Any, what: str) -> tuple[int, bytes]:
    """`(width, bytes)` of a `[width, bytes]` id column, checked."""
    if not isinstance(ids, list) or len(ids) != 2:
        raise ReportError(f"{what} are not a [width, bytes] pair")
    width, data = ids
    if type(width) is not int or width not in ID_DTYPES:
        raise ReportError(f"{what} width {width!r} not in 1, 2, 4, 8")
    if not isinstance(data, bytes):
        raise ReportError(f"{what} are {type_name(data)}, not bytes")
    if len(data) % width:
        raise ReportError(f"{what} are {len(data)} bytes, not a multiple of {width}")
    return width, data


def unpack_ids(ids: Any, what: str) -> np.ndarray:
    width, data = id_column(ids, what)
    return np.frombuffer(data, dtype=ID_DTYPES[width]).astype(np.int64, copy=False)


def check_ids(ids: np.ndarray, what: str) -> None:
    """Non-negative and unique, vectorised: increasing ids (what a broker sends) need no sort (~50 us for 5,000)."""
    if ids.size == 0:
        return
    if ids.min() < 0:
        raise ReportError(f"negative {what} {ids.min()}")
    if (ids[1:] > ids[:-1]).all():
        return
    ordered = np.sort(ids)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if repeated.size:
        shown = ", ".join(str(i) for i in np.unique(repeated)[:5])
        raise ReportError(f"duplicate {what}s: {shown}")


def rates_array(rates: Any, name: str) -> np.ndarray:
    try:
        return np.asarray(rates, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ReportError(f"{name} is not numeric") from error


def check_rate_bytes(data: Any, n_entries: int, n_dimensions: int, rate_dtype: np.dtype, name: str) -> None:
    """Bytes of whole rows of `n_dimensions` rates of `rate_dtype`, one row per entry."""
    if not isinstance(data, bytes):
        raise ReportError(f"{name} is {type_name(data)}, not bytes")
    row_bytes = n_dimensions * rate_dtype.itemsize
    if len(data) % row_bytes:
        raise ReportError(f"{name} is {len(data)} bytes, not whole rows of {n_dimensions} {rate_dtype.name}")
    if len(data) // row_bytes != n_entries:
        raise ReportError(f"lengths differ: {n_entries} group ids, {len(data) // row_bytes} {name} rows")


def check_columns(group_ids: np.ndarray, usage: np.ndarray, demand: np.ndarray | None, D: int) -> None:
    """Shapes agree, rates are finite and non-negative, ids are non-negative and unique (all vectorised)."""
    check_shapes(group_ids, usage, demand, D)
    check_values(group_ids, usage, demand)


def check_shapes(group_ids: np.ndarray, usage: np.ndarray, demand: np.ndarray | None, D: int) -> None:
    n = len(group_ids)
    for name, rates in (("usage", usage), ("demand", demand)):
        if rates is None:
            continue
        if rates.ndim != 2:
            raise ReportError(f"{name} has shape {rates.shape}, not (n, {D})")
        if rates.shape[0] != n:
            raise ReportError(f"lengths differ: {n} group ids, {rates.shape[0]} {name} rows")
        if rates.shape[1] != D:
            raise ReportError(f"{name} has {rates.shape[1]} columns for {D} dimensions")


def check_values(group_ids: np.ndarray, usage: np.ndarray, demand: np.ndarray | None) -> None:
    for name, rates in (("usage", usage), ("demand", demand)):
        if rates is None or rates.size == 0 or (rates.min() >= 0 and rates.max() < np.inf):  # NaN fails both
            continue  # two reductions, no temporary array: the usual answer, found ~3x faster
        if not np.isfinite(rates).all():
            raise ReportError(f"{name} has NaN" if np.isnan(rates).any() else f"{name} has inf")
        raise ReportError(f"{name} has negative values")
    check_ids(group_ids, "group id")


def pack_dictionary(dictionary: Any) -> list[Any]:
    if not isinstance(dictionary, dict):
        raise ReportError(f"dictionary is {type_name(dictionary)}, not a dict")
    ids = ids_array(list(dictionary), "dictionary ids")
    names = list(dictionary.values())
    try:
        text = "\0".join(names)
    except TypeError as error:
        raise ReportError("a dictionary name is not str") from error
    if names and text.count("\0") != len(names) - 1:
        raise ReportError("a dictionary name contains NUL")
    check_dictionary(ids, names)
    try:
        return packed_dictionary(ids, names)
    except UnicodeEncodeError as error:
        raise ReportError("a dictionary name is not valid Unicode") from error


def packed_dictionary(ids: np.ndarray, names: list[str]) -> list[Any]:
    """The `[ids, names]` pair of a dictionary already checked (`pack_dictionary`): the names joined by NUL."""
    return [pack_ids(ids), "\0".join(names).encode()]


def unpack_dictionary(dictionary: Any) -> dict[int, str]:
    if not isinstance(dictionary, list) or len(dictionary) != 2:
        raise ReportError("dictionary is not an [ids, names] pair")
    ids = unpack_ids(dictionary[0], "dictionary ids")
    blob = dictionary[1]
    if not isinstance(blob, bytes):
        raise ReportError(f"dictionary names are {type_name(blob)}, not bytes")
    try:
        text = blob.decode()
    except UnicodeDecodeError as error:
        raise ReportError("dictionary names are not UTF-8") from error
    names = text.split("\0") if text else []
    check_dictionary(ids, names)
    return dict(zip(ids.tolist(), names, strict=True))


def check_dictionary(ids: np.ndarray, names: list[str]) -> None:
    if len(ids) != len(names):
        raise ReportError(f"lengths differ: {len(ids)} dictionary ids, {len(names)} names")
    check_ids(ids, "dictionary id")
    if "" in names:
        raise ReportError("a dictionary name is empty")
    if len(set(names)) != len(names):
        raise ReportError("dictionary names repeat")


def same_optional_array(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return np.array_equal(a, b)


def type_name(value: Any) -> str:
    return type(value).__name__
