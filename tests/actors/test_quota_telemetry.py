"""Quota telemetry: breach age, throttle events by reason and usage fractions, round by round (with a
stand-in node holding fixed numbers), then the columns and tables of a whole lossy run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.dataset as ds

from actors.telemetry.quota_tracker import GROUP_LIMIT, QuotaTracker, fraction
from experiments.run import run_scenario
from experiments.scenario import parse_scenario


@dataclass
class FixedTable:
    usage_in_view: np.ndarray

    def view_usage(self) -> np.ndarray:
        return self.usage_in_view

    def peer_entry_age_s(self, now_s: float) -> tuple[np.ndarray, np.ndarray]:
        return np.array([now_s - 100.0]), np.array([(now_s - 100.0) / 2])


@dataclass(frozen=True)
class FixedSettings:
    float32_rates: bool = False


@dataclass
class FixedNode:
    quota: np.ndarray
    table: FixedTable
    settings: FixedSettings = FixedSettings()


def test_breach_age_counts_from_the_first_round_over_quota_and_throttle_events_count_episodes():
    tracker = QuotaTracker()
    group_usage = [50.0, 120.0, 130.0, 80.0, 150.0]  # quota 100: over at t = 1, 2 and 4
    throttled = [0.0, 0.5, 0.5, 0.0, 0.2]  # two episodes of throttling: from t = 1 and from t = 4
    seen = []
    for t_s, (usage, seconds) in enumerate(zip(group_usage, throttled, strict=True)):
        node = FixedNode(np.array([[100.0]]), FixedTable(np.array([[usage]])))
        own, limit = np.array([[usage / 2]]), np.array([[40.0]])
        seen.append(tracker.update(node, own, limit, {GROUP_LIMIT: np.array([seconds])}, float(t_s), 100.0 + t_s))
    assert [bool(r.over_quota[0, 0]) for r in seen] == [False, True, True, False, True]
    assert [float(r.breach_age_s[0, 0]) for r in seen] == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert [int(r.throttle_events[0]) for r in seen] == [0, 1, 0, 0, 1]
    assert [float(r.by_reason[GROUP_LIMIT].throttled_s[0]) for r in seen] == throttled
    last = seen[-1]
    assert last.usage_fraction_of_limit[0, 0] == 75.0 / 40.0
    assert last.usage_fraction_of_quota[0, 0] == 0.75 and last.group_usage_fraction_of_quota[0, 0] == 1.5
    assert (last.report_age_max_s[0], last.report_age_mean_s[0]) == (4.0, 2.0)


def test_a_usage_equal_to_the_quota_is_no_breach():
    node = FixedNode(np.array([[90.0]]), FixedTable(np.array([[45.0 + 45.0 * (1 + 1e-15)]])))
    limit = np.array([[45.0]])
    assert not QuotaTracker().update(node, limit, limit, {}, 0.0, 0.0).over_quota.any()


def test_with_float32_rates_their_rounding_is_no_breach_and_more_is():
    quota, own = 1000.0, 200.0
    peers = np.array([123.456789, 234.567891, 345.678912])
    peers *= (quota - own) / peers.sum()  # the group exactly at its quota, as the brokers hold it
    heard = own + peers.astype(np.float32).astype(np.float64).sum()  # the peers as float32 reports tell them
    assert heard != quota  # rounded: a little over or under

    def over(usage_in_view: float, float32_rates: bool) -> bool:
        node = FixedNode(np.array([[quota]]), FixedTable(np.array([[usage_in_view]])), FixedSettings(float32_rates))
        return bool(QuotaTracker().update(node, np.array([[own]]), np.array([[own]]), {}, 0.0, 0.0).over_quota[0, 0])

    for usage_in_view in (heard, quota * (1 + 2.0**-24)):  # the rounding, at most half a float32 step
        assert not over(usage_in_view, float32_rates=True)
    assert over(quota * (1 + 2.0**-24), float32_rates=False)  # full precision: that is over
    assert over(quota * (1 + 1e-6), float32_rates=True)  # beyond the rounding: a breach


def test_fraction_of_an_unlimited_or_zero_whole():
    part = np.array([5.0, 5.0, 0.0, 5.0])
    whole = np.array([10.0, np.inf, 0.0, 0.0])
    np.testing.assert_array_equal(fraction(part, whole), [0.5, 0.0, 0.0, np.inf])


def lossy_cut_scenario() -> dict:
    """Two brokers over a lossy, late channel, and a quota cut the limits take rounds to follow."""
    return {
        "name": "telemetry",
        "seed": 5,
        "rounds": 30,
        "backend": "local",
        "policy": {"name": "pip82-proportional"},
        "reporting": {"threshold_pct": 10, "force_every": 3},
        "channel": {"loss": 0.3, "delay_rounds": 1},
        "groups": [{"name": "g", "quota": {"publish_msgs_per_s": 120}}],
        "brokers": [
            {"name": "b1", "workload": [{"group": "g", "msgs_per_s": 90}]},
            {"name": "b2", "workload": [{"group": "g", "msgs_per_s": 60}]},
        ],
        "events": [{"at": 15, "quota": {"group": "g", "publish_msgs_per_s": 40}}],
    }


def table(run_dir: Path, name: str) -> pd.DataFrame:
    return ds.dataset(run_dir / name, format="parquet").to_table().to_pandas()


def test_a_run_writes_the_quota_telemetry_consistently(tmp_path):
    run_dir = run_scenario(parse_scenario(lossy_cut_scenario()), tmp_path / "run", progress=False)
    rounds, throttles, timings = table(run_dir, "rounds"), table(run_dir, "throttles"), table(run_dir, "timings")

    rounds = rounds.sort_values(["broker", "round"]).reset_index(drop=True)
    previous_limit = rounds.groupby("broker")["limit"].shift(1)  # the limit the round's traffic went through
    later = previous_limit.notna()
    np.testing.assert_allclose(rounds.usage_fraction_of_limit[later], (rounds.usage / previous_limit)[later])
    assert (rounds.usage_fraction_of_limit <= 1 + 1e-9).all()  # a token bucket admits no more than its limit
    np.testing.assert_allclose(rounds.usage_fraction_of_quota, rounds.usage / rounds.quota)
    assert (rounds.group_usage_fraction_of_quota >= rounds.usage_fraction_of_quota).all()
    # over quota: the usage in view is; the cut to 40 triples it, and it takes rounds to come down
    np.testing.assert_array_equal(rounds.over_quota, rounds.group_usage_fraction_of_quota > 1 + 1e-9)
    cut = rounds[rounds["round"] == 15]
    assert cut.over_quota.all() and (cut.group_usage_fraction_of_quota > 2.5).all()
    # a breach ages one interval (1 s) per round over quota in a row, from 0; 0 when not over quota
    for _, rows in rounds.groupby("broker"):
        expected, run_length = [], 0
        for over in rows.over_quota:
            expected.append(float(run_length) if over else 0.0)
            run_length = run_length + 1 if over else 0
        np.testing.assert_array_equal(rows.breach_age_s, expected)
    assert rounds.breach_age_s.max() >= 5.0
    # no peer in view until the first report arrives, a round late; then the age since the peer's entry was
    # last refreshed: whole rounds (lockstep), growing while its reports are lost or suppressed
    np.testing.assert_array_equal(rounds.report_age_max_s.isna(), rounds["round"] == 0)
    heard = rounds[rounds["round"] > 0]
    np.testing.assert_array_equal(heard.report_age_max_s, heard.report_age_mean_s)  # one peer: max = mean
    np.testing.assert_array_equal(heard.report_age_max_s % 1.0, 0.0)
    assert heard.report_age_max_s.min() == 0 and heard.report_age_max_s.max() >= 3.0

    # throttles: one reason today, adding up to the rounds table's totals
    assert set(throttles.reason) == {GROUP_LIMIT}
    key = ["round", "broker", "group"]
    totals = throttles.groupby(key)[["throttle_events", "throttled_s"]].sum()
    per_group = rounds.drop_duplicates(key).set_index(key)[["throttle_events", "throttled_s"]]
    joined = per_group.merge(totals, "left", left_index=True, right_index=True, suffixes=("", "_by_reason")).fillna(0)
    np.testing.assert_allclose(joined.throttled_s, joined.throttled_s_by_reason)
    np.testing.assert_array_equal(joined.throttle_events, joined.throttle_events_by_reason)
    assert rounds.throttle_events.sum() > 0 and (throttles.throttled_s > 0).any()

    # timings: one row per round and broker, positive wall-clock seconds
    assert len(timings) == 30 * 2 and not timings.duplicated(["round", "broker"]).any()
    assert (timings.allocate_phase_s > 0).all()
