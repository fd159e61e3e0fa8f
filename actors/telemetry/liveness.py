"""Whether a run's driver is still alive, from its manifest alone: a driver killed with SIGKILL cannot mark
its manifest, which then says `running` for ever.

While a run goes, its manifest names the driver (`driver: {pid, host}`) and a background thread refreshes
`heartbeat_at` every `HEARTBEAT_EVERY_S`. A reader takes a `running` manifest as `died` when the driver's PID
no longer exists on this host, or, from another host, when the heartbeat is older than `STALE_AFTER_S`.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

HEARTBEAT_EVERY_S = 5.0
STALE_AFTER_S = 60.0  # 12 missed heartbeats: far beyond a slow disk or a long garbage collection


def driver_identity() -> dict[str, Any]:
    """This process: `{pid, host}` for the manifest."""
    return {"pid": os.getpid(), "host": socket.gethostname()}


def pid_exists(pid: int) -> bool:
    """Whether a process `pid` exists on this host (a zombie, already dead but not yet reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:  # no /proc (not Linux): kill(pid, 0) is all we know
        return True


def run_status(
    manifest: dict[str, Any],
    now: datetime | None = None,
    this_host: str | None = None,
    alive: Callable[[int], bool] = pid_exists,
) -> str:
    """The manifest's `status`, except that a `running` run whose driver is gone is `died`.

    Gone: the manifest's driver ran on this host and its PID no longer exists, or its heartbeat is more than
    `STALE_AFTER_S` old. A manifest from before heartbeats (no `driver`, no `heartbeat_at`) keeps its status.
    """
    status = manifest.get("status")
    if status != "running":
        return status
    driver = manifest.get("driver")
    host = socket.gethostname() if this_host is None else this_host
    on_this_host = isinstance(driver, dict) and driver.get("host") == host and isinstance(driver.get("pid"), int)
    if on_this_host and not alive(driver["pid"]):
        return "died"
    heartbeat = manifest.get("heartbeat_at")
    if isinstance(heartbeat, str):
        try:
            beat = datetime.fromisoformat(heartbeat)
        except ValueError:
            return status
        age_s = ((now or datetime.now(UTC)) - beat).total_seconds()
        if age_s > STALE_AFTER_S:
            return "died"
    return status


class Heartbeat:
    """Calls `beat()` every `every_s` seconds on a daemon thread until `stop()`."""

    def __init__(self, beat: Callable[[], None], every_s: float = HEARTBEAT_EVERY_S):
        self._beat = beat
        self._every_s = every_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="quotalab-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(self._every_s):
            try:
                self._beat()
            except OSError:  # the run directory is gone (a test's temporary one, say): nothing left to beat for
                return

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
