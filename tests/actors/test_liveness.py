"""A `running` manifest whose driver is gone reads as `died` (actors/telemetry/liveness.py), from the manifest alone."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta

from actors.telemetry.liveness import STALE_AFTER_S, Heartbeat, pid_exists, run_status
from actors.telemetry.writer import TelemetryWriter

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def manifest(status="running", host="here", pid=1234, beat_age_s=1.0) -> dict:
    return {
        "status": status,
        "driver": {"pid": pid, "host": host},
        "heartbeat_at": (NOW - timedelta(seconds=beat_age_s)).isoformat(timespec="seconds"),
    }


def status(m: dict, alive: bool) -> str:
    return run_status(m, now=NOW, this_host="here", alive=lambda pid: alive)


def test_a_running_driver_on_this_host_whose_pid_is_gone_died():
    assert status(manifest(), alive=True) == "running"
    assert status(manifest(), alive=False) == "died"


def test_a_stale_heartbeat_is_a_death_wherever_the_driver_ran():
    fresh, stale = STALE_AFTER_S - 5, STALE_AFTER_S + 5
    assert status(manifest(host="elsewhere", beat_age_s=fresh), alive=False) == "running"  # not our PID to check
    assert status(manifest(host="elsewhere", beat_age_s=stale), alive=True) == "died"
    assert status(manifest(beat_age_s=stale), alive=True) == "died"  # the PID was reused by another process


def test_ended_runs_and_manifests_from_before_heartbeats_keep_their_status():
    for ended in ("complete", "interrupted", "failed"):
        assert status(manifest(status=ended, beat_age_s=10 * STALE_AFTER_S), alive=False) == ended
    assert status({"status": "running"}, alive=False) == "running"
    assert status({"status": "running", "heartbeat_at": "not a time"}, alive=False) == "running"


def test_pid_exists_for_this_process_and_not_for_a_reaped_child():
    assert pid_exists(os.getpid())
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    assert not pid_exists(child)


def test_the_writer_names_its_driver_and_refreshes_the_heartbeat(tmp_path):
    writer = TelemetryWriter(tmp_path / "run", "run", {})
    try:
        first = json.loads((tmp_path / "run" / "manifest.json").read_text())
        assert first["driver"]["pid"] == os.getpid() and first["heartbeat_at"]
        assert run_status(first) == "running"
        writer._heartbeat.stop()
        beats = []
        writer._heartbeat = Heartbeat(lambda: beats.append(writer._write_manifest(writer._written_manifest)), 0.05)
        deadline = time.monotonic() + 10
        while len(beats) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(beats) >= 3
    finally:
        writer.close("complete")
    last = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert last["status"] == "complete" and run_status(last) == "complete"
