"""Timer lags in constant memory: count, mean and max exact, percentiles within the bins' 2%."""

from __future__ import annotations

import numpy as np
import pytest

from actors.telemetry.lag_histogram import LagHistogram


def test_percentiles_are_within_two_percent_and_the_rest_is_exact():
    rng = np.random.default_rng(3)
    lags = rng.lognormal(mean=-6, sigma=1.5, size=20_000)  # ~2.5 ms median, a long tail
    histogram = LagHistogram()
    for chunk in np.array_split(lags, 37):
        histogram.add(chunk.tolist())
    summary = histogram.summary(0.1)
    assert summary["ticks"] == lags.size and summary["interval_s"] == 0.1
    assert summary["mean_s"] == pytest.approx(lags.mean(), rel=1e-9) and summary["max_s"] == lags.max()
    for q, key in ((50, "p50_s"), (99, "p99_s")):
        exact = np.percentile(lags, q)
        assert exact * 0.98 <= summary[key] <= exact * 1.03, (q, exact, summary[key])
    assert summary["p50_s"] <= summary["p99_s"] <= summary["max_s"]


def test_early_ticks_and_no_ticks():
    histogram = LagHistogram()
    assert histogram.summary(0.1) == {"ticks": 0}
    histogram.add([-1e-4, 0.0, 2e-3])  # a timer a hair early counts in the first bin
    assert histogram.percentile_s(50) <= 1.1e-6 and histogram.max_s == 2e-3
