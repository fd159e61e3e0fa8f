"""The reaper of a local Ray instance (actors/hosts/ray_reaper.py), without Ray: a stand-in driver starts the reaper
and two processes holding a log open in the "session directory" as Ray's processes do (one in a session of its
own, as an agent its raylet left behind); the driver gets SIGKILL and the reaper ends both, and nothing else."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from actors.hosts import ray_reaper

# Holds a file of the session directory open, as each of Ray's processes does (logs, sockets), and waits.
LEAF = "import sys, time; log = open(sys.argv[1], 'a'); print('ready', flush=True); time.sleep(600)"

DRIVER = """
import subprocess, sys, time
from actors.hosts import ray_reaper
session, leaf = sys.argv[1], sys.argv[2]
reaper = ray_reaper.start(session)
child = subprocess.Popen([sys.executable, "-c", leaf, session + "/raylet.out"], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
grandchild = subprocess.Popen([sys.executable, "-c", leaf, session + "/agent.log"], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)  # an agent its raylet left behind: not in the driver's tree
grandchild.stdout.readline()
print(reaper.pid, child.pid, grandchild.pid, flush=True)
time.sleep(600)
"""


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(map(running, pids)):
        time.sleep(0.05)
    return [pid for pid in pids if running(pid)]


def test_a_killed_drivers_instance_is_reaped_and_nothing_else(tmp_path: Path):
    session, elsewhere = tmp_path / "session", tmp_path / "elsewhere"
    session.mkdir()
    elsewhere.mkdir()
    bystander = subprocess.Popen(  # a file open elsewhere: not the instance's
        [sys.executable, "-c", LEAF, str(elsewhere / "other.log")], stdout=subprocess.PIPE, text=True
    )
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(session), LEAF], stdout=subprocess.PIPE, text=True)
    try:
        bystander.stdout.readline()
        reaper, child, orphan = map(int, driver.stdout.readline().split())
        assert set(ray_reaper.session_processes(str(session))) == {child, orphan}
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        # the pipe's end tells the reaper at once: well within the 60 s Ray's agents take on their own
        assert wait_until_gone([child, orphan, reaper], timeout_s=30) == []
        assert running(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()
        driver.kill()


# Closes the reaper's pipe while it still runs and holds its own file of the session open, as a Ray driver's
# interpreter does while it shuts down; ends when the test writes a line.
CLOSING_DRIVER = """
import subprocess, sys
from actors.hosts import ray_reaper
session, leaf = sys.argv[1], sys.argv[2]
own_log = open(session + "/driver.log", "a")
reaper = ray_reaper.start(session)
child = subprocess.Popen([sys.executable, "-c", leaf, session + "/raylet.out"], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(reaper.pid, child.pid, flush=True)
reaper.stdin.close()
sys.stdin.readline()
"""


def _reading_its_pipe(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/wchan") as wchan:
            return wchan.read().endswith("pipe_read")  # anon_pipe_read on newer kernels
    except OSError:
        return False


def test_a_driver_that_closes_the_pipe_before_it_ends_is_never_killed(tmp_path: Path):
    session = tmp_path / "session"
    session.mkdir()
    driver = subprocess.Popen(
        [sys.executable, "-c", CLOSING_DRIVER, str(session), LEAF], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        reaper, child = map(int, driver.stdout.readline().split())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and driver.poll() is None and _reading_its_pipe(reaper):
            time.sleep(0.05)  # until the reaper has seen the pipe close
        driver.stdin.write("end\n")
        driver.stdin.close()
        assert driver.wait(timeout=30) == 0  # not "Killed" (status -9): the reaper waited for it to end
        assert wait_until_gone([child, reaper], timeout_s=30) == []
    finally:
        driver.kill()
