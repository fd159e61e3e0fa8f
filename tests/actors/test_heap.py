"""The telemetry writer hands freed heap pages back: without it a stall's peak stays resident for good."""

import subprocess
import sys

import pytest

# Fills glibc's heap with 128 MB of 64 KB blocks (under the mmap threshold), frees all but the last one (which
# pins the heap's top, so free() alone cannot shrink it), then prints the RSS before and after the release.
CHILD = """
import numpy as np
from actors.heap import release_free_heap

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
