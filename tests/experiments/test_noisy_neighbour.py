"""The shipped noisy-neighbour scenario end to end on the local backend, under both throttle modes: the
neighbours keep their throughput under `signal` and lose it under `pause-connection`; then the report's
producers section, side by side."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest

import experiments
from experiments.report import build_report
from tests.throttle_runs import run_in_both_modes

SCENARIO = Path(experiments.__file__).parent / "scenarios" / "noisy-neighbour.yaml"
NEIGHBOURS = ["orders", "payments"]
NEIGHBOUR_RATE = 300.0
BURST = (12, 20)  # rounds well inside the burst (it starts at round 10; the run is cut at 20)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    return run_in_both_modes(SCENARIO, 20, tmp_path_factory.mktemp("noisy"))


def in_burst(run_dir: Path) -> pd.DataFrame:
    producers = ds.dataset(run_dir / "producers", format="parquet").to_table().to_pandas()
    return producers[producers["round"].between(*BURST)].set_index(["topic", "round"])


def test_under_signal_the_neighbours_keep_their_throughput_and_latency(runs):
    seen = in_burst(runs["signal"])
    neighbours = seen.loc[NEIGHBOURS]
    np.testing.assert_allclose(neighbours.throughput_msgs_per_s, NEIGHBOUR_RATE)
    assert (neighbours.latency_p99_ms <= 10.0).all()
    assert (neighbours.connection_blocked_s == 0).all() and (neighbours.throttle_signals == 0).all()
    assert (neighbours.failed_timeout_msgs + neighbours.failed_queue_full_msgs == 0).all()
    noisy = seen.loc["noisy-events"]
    assert (noisy.throttled_resource_group_quota_s > 0.9).all() and (noisy.throttle_signals > 0).all()
    assert noisy.offered_msgs_per_s.min() > 10 * noisy.throughput_msgs_per_s.max()  # far over its quota
    assert noisy.failed_throttled_msgs.sum() > 0 and noisy.failed_timeout_msgs.sum() == 0


def test_under_pause_connection_the_neighbours_lose_it(runs):
    seen = in_burst(runs["pause-connection"])
    neighbours = seen.loc[NEIGHBOURS]
    assert neighbours.throughput_msgs_per_s.mean() < 0.8 * NEIGHBOUR_RATE
    assert neighbours.latency_p50_ms.median() > 1000.0
    assert (neighbours.connection_blocked_s > 0.3).all() and neighbours.connection_blocked_s.mean() > 0.5
    assert neighbours.failed_timeout_msgs.sum() > 0
    noisy = seen.loc["noisy-events"]
    assert (noisy.throttle_signals == 0).all() and noisy.failed_throttled_msgs.sum() == 0  # nobody is told


def test_the_noisy_groups_other_producer_on_another_broker_is_unaffected(runs):
    for run_dir in runs.values():
        audit = in_burst(run_dir).loc["noisy-audit"]
        np.testing.assert_allclose(audit.throughput_msgs_per_s, 50.0)


@pytest.mark.spark
def test_the_report_shows_both_modes_side_by_side(runs, spark, tmp_path):
    report = build_report([runs["pause-connection"], runs["signal"]], tmp_path / "report", spark=spark)
    page = report.read_text()
    assert "Producers and throttling (PIP-385)" in page and "Time throttled, by reason (seconds)" in page
    for reason in ("topic quota", "resource-group quota", "connection pending messages", "buffer size", "broker quota"):
        assert f"<th>{reason}</th>" in page  # all five of PIP-385's reasons, those that never held anyone too
    assert "Two views of the same throttling" in page  # the throttles table holds the producers' reasons
    assert page.count('class="figure"') >= 3  # the comparison, the producers' lines and their throttled time
    table = pd.read_csv(report.parent / "producers.csv").set_index(["mode", "topic"])
    assert len(table) == 8  # four producers, two runs
    signal, paused = table.loc["signal"], table.loc["pause-connection"]
    for topic in NEIGHBOURS:
        assert signal.loc[topic, "throughput_msgs_per_s"] > paused.loc[topic, "throughput_msgs_per_s"]
        assert signal.loc[topic, "failed_timeout_msgs"] == 0 < paused.loc[topic, "failed_timeout_msgs"]
    assert signal.loc["noisy-events", "throttled_resource_group_quota_s"] > 5.0
