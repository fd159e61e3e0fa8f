"""A round's reports, parsed one by one, turned into one `ReportBatch` of arrays with the values checked at once.

`allocator.wire.codec` parses each report's envelope and header in Python (a `ParsedBody`, its columns still bytes);
`checked_batch` joins the columns of all of them (one `frombuffer` per column and dtype) and checks their values
in one vectorised pass, looking at a report alone only when that pass finds a fault in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from allocator.wire.report_fields import ReportError, check_values
from allocator.wire.usage_report import ReportBatch


class ParsedBody(NamedTuple):
    """A report checked but for the values of its columns, which are still bytes (see `checked_batch`)."""

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


def checked_batch(bodies: list[ParsedBody], dimensions: tuple[str, ...]) -> tuple[ReportBatch, dict[int, ReportError]]:
    """The reports as one batch of arrays (one `frombuffer` per column and dtype), with the values checked in one
    pass; returns the batch of the valid ones and the error of each other one by its index in `bodies`."""
    columns = list(zip(*bodies, strict=True)) or [()] * len(ParsedBody._fields)  # one tuple per field of `ParsedBody`
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
    `frombuffer` per dtype, usually one (the reports of a cluster are sent alike, and then no mask is needed).

    A corrupt or hostile float32 column may hold a signalling NaN, whose widening to float64 raises the invalid
    flag (numpy's RuntimeWarning, once per batch in a broker's log): ignored here, since the value check that
    follows refuses the NaN with its report."""
    for dtype in set(dtypes):
        chosen = [d == dtype for d in dtypes]
        joined = b"".join(column for column, kept in zip(columns, chosen, strict=True) if kept)
        rows = slice(None) if all(chosen) else np.repeat(chosen, counts)
        with np.errstate(invalid="ignore"):
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
