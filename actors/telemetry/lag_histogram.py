"""Timer lag statistics in constant memory, for runs of any length.

A realtime run of 16 brokers at 0.1 s ticks 160 times a second; keeping every lag to take percentiles at the
end grew the driver by ~5 KB/s (a Python float and a list slot per tick: 400 MB a month). Lags are counted
instead in fixed log-spaced bins (2% wide, from 1 µs to ~17 minutes), so a percentile is known to within 2%,
while the count, mean and max stay exact.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

_SMALLEST_S = 1e-6
_BIN_RATIO = 1.02
_BINS = 1050  # 1e-6 * 1.02**1050 ~ 1,100 s
_EDGES_S = _SMALLEST_S * _BIN_RATIO ** np.arange(1, _BINS + 1)  # upper edge of each bin


class LagHistogram:
    """Count, sum, max and a log-binned histogram of lags in seconds (a lag below 1 µs, or a timer a
    hair early, counts in the first bin; one above the last edge in the last)."""

    def __init__(self) -> None:
        self.count = 0
        self.sum_s = 0.0
        self.max_s = 0.0
        self._counts = np.zeros(_BINS, dtype=np.int64)

    def add(self, lags_s: Iterable[float]) -> None:
        lags = np.fromiter(lags_s, dtype=np.float64)
        if lags.size == 0:
            return
        self.count += int(lags.size)
        self.sum_s += float(lags.sum())
        self.max_s = max(self.max_s, float(lags.max()))
        bins = np.minimum(np.searchsorted(_EDGES_S, lags), _BINS - 1)
        self._counts += np.bincount(bins, minlength=_BINS)

    def percentile_s(self, q: float) -> float:
        """The upper edge of the bin holding the `q`-th percentile (0-100), never above the max."""
        if self.count == 0:
            raise ValueError("no lags counted")
        rank = max(1, int(np.ceil(q / 100 * self.count)))
        index = int(np.searchsorted(np.cumsum(self._counts), rank))
        return min(float(_EDGES_S[index]), self.max_s)

    def summary(self, interval_s: float) -> dict[str, float]:
        """The manifest's `realtime_lag`: ticks, interval, mean, p50, p99 and max in seconds."""
        if self.count == 0:
            return {"ticks": 0}
        return {
            "ticks": self.count,
            "interval_s": interval_s,
            "mean_s": self.sum_s / self.count,
            "p50_s": self.percentile_s(50),
            "p99_s": self.percentile_s(99),
            "max_s": self.max_s,
        }
