"""The processes of a local Ray instance end with the driver that started it, even a driver killed with SIGKILL.

Ray ties `gcs_server` and the raylet to the driver (the kernel kills them with it), but its agents
(DashboardAgent, RuntimeEnvAgent) see their raylet die, then try to tell the dead GCS about it and wait 60 s for
an answer (`ray._private.utils.publish_error_to_driver`'s timeout: not a setting) before they exit; and a worker
stuck in its exit was once seen alive 40 minutes after its instance ended.

So `init_ray` (actors/backends.py) starts a reaper next to a new local instance. The reaper reads a pipe whose
other end the driver holds: the read ends when the driver does, however it ends. Meanwhile, every
`REFRESH_S`, it notes the driver's process tree (Ray's processes are its children, their workers and agents the
raylet's), each process with its start time; once the driver has ended it SIGKILLs every process of the last
tree that still runs with the same start time (a PID reused since is another process), then exits. After a clean
`ray.shutdown` nothing is left to kill. It runs in a session of its own, so a Ctrl-C to the terminal does not
stop it before the driver. Ray's own environment marks cannot tell its processes apart: the agents overwrite
their environment with their process titles.

A driver that joins an existing cluster (`--address`) starts no reaper: those processes are not its own.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

REFRESH_S = 1.0  # a process started less than this before the driver died is not in the tree (workers exit anyway)


def start(driver: int) -> subprocess.Popen:
    """Start the reaper of `driver`'s processes; keep the returned process alive (its stdin is the pipe)."""
    return subprocess.Popen(
        [sys.executable, "-m", "actors.ray_reaper", str(driver)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def process_tree(root: int) -> dict[int, int]:
    """The processes below `root` (not `root` itself) as PID -> start time (clock ticks since boot)."""
    children: dict[int, list[int]] = {}
    started: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry))
                started[int(entry)] = int(fields[19])
    tree: dict[int, int] = {}
    below = list(children.get(root, []))
    while below:
        pid = below.pop()
        tree[pid] = started[pid]
        below += children.get(pid, [])
    return tree


def reap(tree: dict[int, int]) -> list[int]:
    """SIGKILL each process of `tree` that still runs with its start time; the PIDs signalled."""
    killed = []
    for pid, start_time in tree.items():
        fields = _stat_fields(pid)
        if fields is None or int(fields[19]) != start_time or pid == os.getpid():
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command's name (state, ppid, ...; start time at index 19), or None."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def main(driver: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tree: dict[int, int] = {}
    pipe = sys.stdin.buffer.raw
    while True:
        tree = process_tree(driver) or tree
        readable, _, _ = select.select([pipe], [], [], REFRESH_S)
        if readable and not pipe.read(4096):  # end of file: the driver, the only writer, has ended
            reap(tree)
            return


if __name__ == "__main__":
    main(int(sys.argv[1]))
