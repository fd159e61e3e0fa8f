"""The reaper of a local Ray instance (actors/ray_reaper.py), without Ray: a stand-in driver starts a child that
starts a grandchild (as the raylet starts agents), gets SIGKILL, and the reaper ends both at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from actors import ray_reaper

# A driver that starts the reaper, a child and (through it) a grandchild, prints their PIDs, then waits.
DRIVER = """
import subprocess, sys, time
from actors import ray_reaper
reaper = ray_reaper.start(__import__("os").getpid())
sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                          f"g = subprocess.Popen({sleeper!r}); print(g.pid, flush=True); time.sleep(600)"],
                         stdout=subprocess.PIPE, text=True)
grandchild = int(child.stdout.readline())
time.sleep(2 * ray_reaper.REFRESH_S)  # the reaper has seen the whole tree
print(reaper.pid, child.pid, grandchild, flush=True)
time.sleep(600)
"""


def running(pid: int) -> bool:
    fields = ray_reaper._stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def wait_until_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(map(running, pids)):
        time.sleep(0.05)
    return [pid for pid in pids if running(pid)]


def test_a_killed_drivers_processes_are_reaped_at_once():
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True, env=os.environ)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # not the driver's
    try:
        reaper, child, grandchild = map(int, driver.stdout.readline().split())
        assert ray_reaper.process_tree(driver.pid).keys() >= {reaper, child, grandchild}
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        # the pipe's end tells the reaper at once: well within Ray's agents' 60 s
        assert wait_until_gone([child, grandchild, reaper], timeout_s=30) == []
        assert running(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()
        driver.kill()


def test_a_pid_reused_by_another_process_is_not_killed():
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        started = int(ray_reaper._stat_fields(other.pid)[19])
        assert ray_reaper.reap({other.pid: started - 1}) == []  # the tree's process of that PID has ended
        assert running(other.pid)
        assert ray_reaper.reap({other.pid: started}) == [other.pid]
        other.wait(timeout=10)
    finally:
        other.kill()
