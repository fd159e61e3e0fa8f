"""The Ray backend against the local one: lockstep with the same seed gives the same numbers, and a crash
really kills the broker's actor. Uses the session's Ray instance (`ray_session`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.dataset as ds
import pytest

from actors.hosts.backends import RayBackend
from experiments import run as run_module
from experiments.run import run_scenario
from experiments.scenario import parse_scenario

pytestmark = pytest.mark.ray


def lossy_scenario(backend: str) -> dict[str, Any]:
    """Loss, delay with jitter, reordering and duplicates, Poisson and sine loads, and every event kind."""
    return {
        "name": "determinism",
        "seed": 11,
        "rounds": 30,
        "backend": backend,
        "brokers_per_actor": 1,
        "policy": {"name": "pip82-steal", "params": {"steal_fraction": 0.5}},
        "reporting": {"threshold_pct": 10, "force_every": 3},
        "cleanup": {"stale_after_rounds": 6, "max_report_age_rounds": 2, "session_timeout_rounds": 3},
        "channel": {"loss": 0.2, "delay_rounds": 0.5, "jitter_rounds": 0.5, "reorder": 0.1, "duplicate": 0.05},
        "groups": [
            {"name": "g1", "quota": {"publish_msgs_per_s": 120}},
            {"name": "g2", "quota": {"publish_msgs_per_s": 80, "publish_bytes_per_s": 60000}},
        ],
        "brokers": [
            {"name": "b1", "workload": [{"group": "g1", "msgs_per_s": {"poisson": {"mean": 50}}},
                                        {"group": "g2", "msgs_per_s": 30, "msg_bytes": 800}]},
            {"name": "b2", "workload": [{"group": "g1", "msgs_per_s": {"poisson": {"mean": 40}}}]},
            {"name": "b3", "workload": [{"group": "g1", "msgs_per_s": {"sine": {"mean": 40, "amplitude": 20,
                                                                                "period_rounds": 10}}},
                                        {"group": "g2", "msgs_per_s": {"poisson": {"mean": 30}}}]},
            {"name": "b4", "join_at": 5, "workload": [{"group": "g2", "msgs_per_s": {"poisson": {"mean": 25}}}]},
        ],
        "events": [
            {"at": 8, "demand": {"broker": "b2", "group": "g1", "msgs_per_s": {"poisson": {"mean": 70}}}},
            {"at": 10, "crash": "b1"},
            {"at": 16, "restart": "b1"},
            {"at": 18, "quota": {"group": "g1", "publish_msgs_per_s": 150}},
            {"at": 20, "channel": {"loss": 0.4}},
            {"at": 22, "clock_skew": {"broker": "b3", "offset_s": -3}},
            {"at": 24, "leave": "b4"},
            {"at": 27, "join": "b4"},
        ],
        # producers on shared connections (PIP-385), on a broker that crashes and restarts
        "throttle": {"mode": "signal", "step_ms": 50},
        "clients": [
            {"name": "app-1", "producers": [
                {"topic": "t1", "broker": "b1", "group": "g1", "msgs_per_s": {"poisson": {"mean": 200}},
                 "send_timeout_ms": 2000},
                {"topic": "t2", "broker": "b1", "group": "g2", "msgs_per_s": 20}]},
            {"name": "app-2", "throttle_signal": False, "producers": [
                {"topic": "t3", "broker": "b3", "group": "g2", "msgs_per_s": {"poisson": {"mean": 100}},
                 "max_pending": 50}]},
        ],
    }  # fmt: skip


class RecordingRayBackend(RayBackend):
    """The Ray backend, remembering the actors it killed."""

    def __init__(self) -> None:
        super().__init__()
        self.killed: list[Any] = []

    def kill(self, handle: Any) -> None:
        self.killed.append(handle)
        super().kill(handle)


def tables(run_dir: Path) -> dict[str, pd.DataFrame]:
    keys = {"rounds": ["round", "broker", "group", "dimension"], "messages": ["round", "broker"],
            "events": ["round", "kind", "target"], "throttles": ["round", "broker", "group", "reason"],
            "producers": ["round", "broker", "client", "topic"]}  # fmt: skip
    out = {}
    for name, key in keys.items():
        frame = ds.dataset(run_dir / name, format="parquet").to_table().to_pandas().drop(columns="run_id")
        out[name] = frame.sort_values(key, kind="stable").reset_index(drop=True)
    return out


def test_lockstep_is_identical_on_local_and_ray_and_a_crash_kills_the_actor(ray_session, tmp_path, monkeypatch):
    local = tables(run_scenario(parse_scenario(lossy_scenario("local")), tmp_path / "local", progress=False))

    backend = RecordingRayBackend()
    monkeypatch.setattr(run_module, "make_backend", lambda name, address=None: backend)
    on_ray = tables(run_scenario(parse_scenario(lossy_scenario("ray")), tmp_path / "ray", progress=False))

    # the scenario did exercise what it claims
    rounds = local["rounds"]
    assert local["messages"].deliveries_dropped.sum() > 0
    assert set(local["events"].kind) == {"demand", "crash", "restart", "quota", "channel", "clock_skew",
                                         "leave", "join"}  # fmt: skip
    assert rounds[rounds.broker == "b1"]["round"].between(10, 15).sum() == 0
    assert len(rounds) > 0 and rounds.usage.nunique() > 20  # Poisson loads: many distinct values
    producers = local["producers"]
    assert set(producers.topic) == {"t1", "t2", "t3"} and producers.throttle_signals.sum() > 0
    assert producers[producers.topic == "t1"]["round"].between(10, 15).sum() == 0  # b1 was down

    # `timings` (wall-clock durations) is the one table that may differ
    for name in ("rounds", "messages", "events", "throttles", "producers"):
        pd.testing.assert_frame_equal(local[name], on_ray[name], check_exact=True, obj=name)

    # b1's crash and b4's leave killed their actors (one broker per actor): a call to one now fails
    assert len(backend.killed) == 2
    for handle in backend.killed:
        with pytest.raises(ray_session.exceptions.RayActorError):
            ray_session.get(handle.publish_phase.remote(0, 0.0), timeout=60)
