"""The processes of a local Ray instance end with the driver that started it, even a driver killed with SIGKILL.

Ray ties `gcs_server` and the raylet to the driver (the kernel kills them with it), but its agents
(DashboardAgent, RuntimeEnvAgent) see their raylet die, then try to tell the dead GCS about it and wait 60 s for
an answer (`ray._private.utils.publish_error_to_driver`'s timeout: not a setting) before they exit; and a worker
stuck in its exit was once seen alive long after its instance had ended.

So `init_ray` (actors/hosts/backends.py) starts a reaper next to a new local instance. The reaper reads a pipe whose
other end the driver holds: the read ends when the driver does, however it ends. Then it SIGKILLs every process
that holds a file open in the instance's session directory (`/tmp/ray/session_...`: each of Ray's processes
keeps its logs or its sockets there, orphaned or not), and exits; after a clean `ray.shutdown` nothing is left.
It runs in a session of its own, so a Ctrl-C to the terminal does not stop it before the driver. What else
could tell Ray's processes apart does not: the agents overwrite their command line and environment with their
process titles, and their parent, the raylet, is gone by then.

The pipe can close before the driver has ended (the interpreter closes its files as it shuts down, while it
still holds its own Ray log files open): the reaper then waits for the driver to end (up to `DRIVER_GRACE_S`)
and never signals the driver itself, which would turn a clean exit into "Killed" (status 137).

A driver that joins an existing cluster (`--address`) starts no reaper: those processes are not its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

DRIVER_GRACE_S = 10.0  # how long a driver that closed the pipe may take to end before its instance is reaped


def start(session_dir: str) -> subprocess.Popen:
    """Start the reaper of the instance whose session directory is `session_dir`; keep the returned process
    alive as long as the driver (its stdin is the pipe)."""
    return subprocess.Popen(
        [sys.executable, "-m", "actors.hosts.ray_reaper", session_dir, str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def session_processes(session_dir: str, spared: frozenset[int] = frozenset()) -> list[int]:
    """The processes (but this one and `spared`) holding a file open under `session_dir`."""
    prefix = os.path.join(os.path.realpath(session_dir), "")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid() or int(entry) in spared:
            continue
        try:
            descriptors = os.listdir(f"/proc/{entry}/fd")
        except OSError:  # gone, or not ours to read
            continue
        for descriptor in descriptors:
            try:
                if os.readlink(f"/proc/{entry}/fd/{descriptor}").startswith(prefix):
                    found.append(int(entry))
                    break
            except OSError:
                continue
    return found


def reap(session_dir: str, spared: frozenset[int] = frozenset()) -> list[int]:
    """SIGKILL every process (but `spared`) holding a file open under `session_dir`; the PIDs signalled."""
    killed = []
    for pid in session_processes(session_dir, spared):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def main(session_dir: str, driver_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdin.buffer.read()  # returns once the driver, the only writer, has closed it (or ended)
    deadline = time.monotonic() + DRIVER_GRACE_S
    while _alive(driver_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    reap(session_dir, spared=frozenset({driver_pid}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
