"""The process's heap: the telemetry writer hands freed pages back (without it a stall's peak stays resident for
good), and a realtime host alone in its process freezes what it holds before its clock starts."""

import subprocess
import sys

import pytest

# Fills glibc's heap with 128 MB of 64 KB blocks (under the mmap threshold), frees all but the last one (which
# pins the heap's top, so free() alone cannot shrink it), then prints the RSS before and after the release.
CHILD = """
import numpy as np
from actors.telemetry.heap import release_free_heap

def rss_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20

blocks = [np.ones(8192) for _ in range(2048)]
last = blocks[-1]
del blocks
before = rss_mb()
released = release_free_heap()
print(released, before, rss_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_pages_go_back_to_the_system() -> None:
    output = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout
    released, before_mb, after_mb = output.split()
    assert released == "True"
    assert float(before_mb) - float(after_mb) > 100  # of the 128 MB freed


# A realtime host of ten brokers settles as on the local backend (shared process: nothing frozen), then as a Ray
# actor would (its own process): prints the frozen count after each, and the objects a full collection still walks.
SETTLE = """
import gc
from tests.actors.test_realtime_timers import started_host

host = started_host(0.0, brokers=10)
host.settle(own_process=False)
shared = gc.get_freeze_count()
host.settle(own_process=True)
print(shared, gc.get_freeze_count(), len(gc.get_objects()))
"""


def test_a_host_in_its_own_process_freezes_its_heap_before_the_clock() -> None:
    output = subprocess.run([sys.executable, "-c", SETTLE], capture_output=True, text=True, check=True).stdout
    frozen_shared, frozen_own, walked = (int(value) for value in output.split())
    assert frozen_shared == 0  # the local backend's hosts share the driver's process: its heap is not theirs
    assert frozen_own > 20_000  # the modules, the plan, the brokers' state
    assert walked < frozen_own / 20  # what a full collection walks from then on
