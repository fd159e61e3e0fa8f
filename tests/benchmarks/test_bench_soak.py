"""The soak benchmark in short: a realtime run of 16 brokers at 0.1 s for 2.5 minutes must not grow after its
warm-up. What is checked is the slope of the line fitted through the RSS samples after the first minute (and
of Python's allocated blocks, where a growing Python container shows first), not a time."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the benchmarks import `common`

import bench_soak  # noqa: E402

# The 30-minute target is < 10% growth after a 5-minute warm-up: the slope, carried over those 25 minutes, must
# stay under 10% of the RSS (which, inside the whole test session, holds more than the soak's ~150 MB).
# Keeping every timer lag grew ~300 KB/min and 9,600 Python blocks a minute (160 ticks a second).
TARGET_GROWTH_PCT, TARGET_MINUTES = 10.0, 25.0
MAX_PYTHON_BLOCKS_PER_MIN = 2_000.0


def test_the_fit_measures_growth_after_the_warmup():
    elapsed_s = np.arange(0, 100, 5.0)
    rss = np.where(elapsed_s < 20, 50e6, 100e6 + 1024 * elapsed_s)  # a jump in the warm-up, then 60 KB/min
    fit = bench_soak.fit_after_warmup(elapsed_s, rss, warmup_s=20)
    assert fit.slope_kb_per_min == pytest.approx(60.0)
    assert fit.growth_pct == pytest.approx(100 * 1024 * 75 / (100e6 + 1024 * 20))
    with pytest.raises(ValueError, match="RSS samples"):
        bench_soak.fit_after_warmup(elapsed_s, rss, warmup_s=95)


@pytest.mark.slow
def test_a_short_soak_does_not_grow():
    result = bench_soak.soak(minutes=2.5, warmup_minutes=1.0, sample_s=2.0)
    assert result["rounds_completed"] == 1500 and result["samples_fitted"] >= 30
    projected_pct = result["slope_kb_per_min"] * TARGET_MINUTES / 1024 / result["rss_at_warmup_mb"] * 100
    assert projected_pct < TARGET_GROWTH_PCT, (projected_pct, result)
    assert result["python_blocks_per_min"] < MAX_PYTHON_BLOCKS_PER_MIN, result
