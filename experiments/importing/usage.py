"""What an export tells of a cluster: per broker and group, the messages per second each round (`ClusterUsage`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from experiments.user_files import MIB

MAX_EXPORT_BYTES = 256 * MIB  # a Prometheus export or a capture: read whole, so bounded (hours of a large cluster)


@dataclass(frozen=True)
class ClusterUsage:
    """Per (broker, group): `msgs_per_s[key]` the published messages per second in each of `rounds` rounds of
    `interval_s`, and `msg_bytes[key]` the mean message size where the export has bytes. `reports[broker]`: the
    reports it published, where the export tells (`None` where it does not)."""

    interval_s: float
    rounds: int
    msgs_per_s: dict[tuple[str, str], np.ndarray]
    msg_bytes: dict[tuple[str, str], float]
    reports: dict[str, int | None]

    @property
    def brokers(self) -> list[str]:
        return sorted({broker for broker, _ in self.msgs_per_s})

    @property
    def groups(self) -> list[str]:
        return sorted({group for _, group in self.msgs_per_s})


def filled(rounds: int, reported: Mapping[int, float]) -> np.ndarray:
    """[rounds] a series from the rounds it was reported in: each value holds until the next one (a broker reports
    again only when its usage moves), 0 before the first."""
    series = np.zeros(rounds)
    ordered = sorted(reported.items())
    for (start, value), (end, _) in zip(ordered, [*ordered[1:], (rounds, 0.0)], strict=True):
        series[start:end] = value
    return series


def mean_sizes(totals: Iterable[tuple[tuple[str, str], float, float]]) -> dict[tuple[str, str], float]:
    """(broker, group) -> bytes / messages, from (key, messages, bytes) totals; left out without both."""
    return {key: size_bytes / messages for key, messages, size_bytes in totals if messages > 0 and size_bytes > 0}
