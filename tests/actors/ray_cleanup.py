"""Do Ray's processes outlive a driver killed with SIGKILL: how long each process of a local Ray instance lives on.

A driver (a subprocess) starts Ray as `quotalab run` does (`actors.hosts.backends.RayBackend`: a new local instance),
creates one actor (a `Channel`, as a run does) and calls it, then waits. Every process below it is listed
(`gcs_server`, `raylet`, Ray's agents, the actor's worker...), the driver is sent SIGKILL (no `ray.shutdown`, no
atexit: what a crash, the OOM killer or `kill -9` leave), and the processes are polled every 0.2 s until all
are gone or `--timeout-s` has passed. Reported per kind of process: the seconds it outlived the driver (the
longest of its kind), and `outlived_s_max` over all; target: a few seconds (5).

Not a test: each kill starts a Ray instance of its own (18 s for one kill at a load of 12, on top of the test
session's own Ray). `test_ray_reaper.py` checks the reaper that ends those processes, without Ray; this measures it with
Ray for docs/trust.md's table (`trust_table.py`).

Run from the repository root: `python -m tests.actors.ray_cleanup [--repeat N] [--code DIR]` (writes
`tests/results/ray_cleanup.json`); `--code` runs the driver on another checkout's code (the "before" of
docs/trust.md: `git worktree add /tmp/before 915f03d`), the results going to `--out`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_soak import process_kind
from benchmarks.common import (
    ROOT,
    command_line,
    descendants,
    environment,
    load_since,
    loadavg_1m,
    results_path,
    save_results,
)

RESULTS = results_path("ray_cleanup", "tests")
TARGET_S = 5.0

DRIVER = """
import sys
from actors.hosts.backends import RayBackend
from actors.transport.channel import Channel
from actors.plan import ChannelPlan

backend = RayBackend()
channel = backend.create(Channel, ChannelPlan(), 1)
backend.gather([backend.call(channel, "subscribers")])
print("ready", flush=True)
sys.stdin.read()  # wait for the kill
"""


def one_kill(code: Path, timeout_s: float) -> dict[str, Any]:
    """Start a driver on `code`, kill it once its actor answered; seconds each kind of process outlived it."""
    env = {**os.environ, "PYTHONPATH": str(code), "RAY_ADDRESS": ""}
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER], cwd=code, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        if driver.stdout.readline().strip() != "ready":
            raise RuntimeError("the driver did not start Ray")
        time.sleep(2.0)  # Ray's agents start a little after the first actor answers
        processes = {pid: process_kind(pid) for pid in descendants(driver.pid)}
        killed_at = time.monotonic()
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    except BaseException:
        driver.kill()
        raise
    outlived: dict[str, float] = {}
    alive = dict(processes)
    while alive and time.monotonic() - killed_at < timeout_s:
        time.sleep(0.2)
        for pid in [pid for pid in alive if not _running(pid)]:
            kind = alive.pop(pid)
            outlived[kind] = max(outlived.get(kind, 0.0), round(time.monotonic() - killed_at, 1))
    for pid, kind in alive.items():  # still there: say so, and clean up after the measurement
        outlived[kind] = float("inf")
        _kill(pid)
    left = sorted(alive.values())
    return {"processes": sorted(processes.values()), "outlived_s": outlived, "left_after_timeout": left}


def _running(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not: it has exited and waits only to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def run(code: Path = ROOT, repeat: int = 3, timeout_s: float = 180.0) -> dict[str, Any]:
    load = loadavg_1m()
    kills = [one_kill(code, timeout_s) for _ in range(repeat)]
    worst = max(max(kill["outlived_s"].values(), default=0.0) for kill in kills)
    return {
        "code": str(code),
        "kills": kills,
        "outlived_s_max": worst,
        "target_s": TARGET_S,
        "met": worst <= TARGET_S,
        "loadavg_1m": load_since(load),
        **environment("ray"),
    }


def summary(result: dict[str, Any]) -> str:
    lines = [f"driver killed {len(result['kills'])} times (code: {result['code']}):"]
    for kill in result["kills"]:
        by_kind = ", ".join(f"{kind} {seconds:g} s" for kind, seconds in sorted(kill["outlived_s"].items()))
        lines.append(f"  outlived the driver by: {by_kind}")
    lines.append(
        f"longest: {result['outlived_s_max']:g} s (target <= {result['target_s']:g} s:"
        f" {'met' if result['met'] else 'MISSED'}); load {result['loadavg_1m']['before']:.1f} ->"
        f" {result['loadavg_1m']['after']:.1f}"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="drivers started and killed (default 3)")
    parser.add_argument("--timeout-s", type=float, default=180.0, help="how long to wait for the processes to go")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose code the driver runs")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the results")
    args = parser.parse_args()
    result = run(args.code.resolve(), args.repeat, args.timeout_s)
    save_results(args.out.resolve(), result, summary(result), announce=False)
    print(f"saved {args.out}")
