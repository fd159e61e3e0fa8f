"""The shipped slow-persistence scenario end to end on the local backend, under both throttle modes: a
connection held at its pending-messages limit while the others flow, then the broker's publish buffer full
holding every connection; the reasons in the `producers` and `throttles` tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest

import experiments
from tests.throttle_runs import run_in_both_modes

SCENARIO = Path(experiments.__file__).parent / "scenarios" / "slow-persistence.yaml"
BULK_BURST = (12, 24)  # bulk-loader bursts over the broker's persistence in rounds 10 to 24
MEDIA_BURST = (32, 36)  # media's large messages from round 30 (the run is cut at 36)
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    return run_in_both_modes(SCENARIO, 37, tmp_path_factory.mktemp("slow"))


def table(run_dir: Path, name: str) -> pd.DataFrame:
    return ds.dataset(run_dir / name, format="parquet").to_table().to_pandas()


def rounds_of(producers: pd.DataFrame, span: tuple[int, int]) -> pd.DataFrame:
    return producers[producers["round"].between(*span)].set_index(["topic", "round"])


@pytest.mark.parametrize("mode", ["pause-connection", "signal"])
def test_the_bulk_connection_is_held_at_its_pending_limit_and_the_others_flow(runs, mode):
    seen = rounds_of(table(runs[mode], "producers"), BULK_BURST)
    bulk, orders = seen.loc["bulk-import"], seen.loc["orders"]
    assert (bulk.connection_pending_max_msgs <= 1000.0 + 1e-6).all()
    assert (bulk.connection_pending_max_msgs >= 950.0).all()  # it reaches the limit every round
    assert (bulk.throttled_connection_pending_messages_s > 0.5).all()
    assert (bulk.throttled_buffer_size_s == 0).all() and (bulk.throttled_resource_group_quota_s == 0).all()
    # the broker persists 2 MB/s: bulk gets what the others leave (0.3 + 0.2 MB/s)
    np.testing.assert_allclose(bulk.throughput_msgs_per_s.mean(), 1500.0, rtol=0.03)
    assert (orders.throttled_connection_pending_messages_s == 0).all() and (orders.connection_blocked_s == 0).all()
    np.testing.assert_allclose(orders.throughput_msgs_per_s.mean(), 300.0, rtol=0.03)
    assert (orders.failed_timeout_msgs + orders.failed_throttled_msgs == 0).all()
    assert (bulk.publish_buffer_max_mb < 4.0).all()  # 1000 messages of 1 KB: the buffer does not bind


@pytest.mark.parametrize("mode", ["pause-connection", "signal"])
def test_a_full_publish_buffer_holds_every_connection(runs, mode):
    seen = rounds_of(table(runs[mode], "producers"), MEDIA_BURST)
    assert (seen.publish_buffer_max_mb <= 4.0 + 1e-9).all() and (seen.publish_buffer_max_mb >= 3.8).all()
    for topic in ("bulk-import", "orders", "thumbnails"):
        assert (seen.loc[topic].throttled_buffer_size_s > 0.5).all(), topic
    assert seen.loc["orders"].throughput_msgs_per_s.mean() < 0.5 * 300.0  # held with the rest
    throttles = table(runs[mode], "throttles")
    reasons = throttles[throttles.throttled_s > 0].groupby("group")["reason"].agg(set)
    assert {"buffer_size", "connection_pending_messages"} <= reasons["tenant-bulk/ns"]
    assert "buffer_size" in reasons["tenant-b/ns"] and "buffer_size" in reasons["tenant-media/ns"]


def test_under_signal_the_held_clients_are_told_and_their_timeouts_fail_as_throttled(runs):
    told, untold = table(runs["signal"], "producers"), table(runs["pause-connection"], "producers")
    orders_told, orders_untold = told[told.topic == "orders"], untold[untold.topic == "orders"]
    assert orders_told.failed_throttled_msgs.sum() > 0 and orders_told.failed_timeout_msgs.sum() == 0
    assert orders_untold.failed_timeout_msgs.sum() > 0 and orders_untold.failed_throttled_msgs.sum() == 0
    assert untold.throttle_signals.sum() == 0 and (told.groupby("topic").throttle_signals.sum() > 0).all()
    # connection-level limits pause connections in both modes: the same messages get through
    np.testing.assert_allclose(
        told.throughput_msgs_per_s.to_numpy(), untold.throughput_msgs_per_s.to_numpy(), rtol=1e-9, atol=1e-9
    )
