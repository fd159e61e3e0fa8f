"""What every benchmark shares: the repository on `sys.path`, the machine's description, saving results.

Importing this module (as `common`: the benchmarks run as scripts from `benchmarks/`, or through `run_all.py`,
which puts `benchmarks/` on the path) makes the repository's packages importable.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make the repository importable
    sys.path.insert(0, str(ROOT))

RESULTS_DIR = ROOT / "benchmarks" / "results"


def results_path(name: str) -> Path:
    """`benchmarks/results/<name>.json`."""
    return RESULTS_DIR / f"{name}.json"


def loadavg_1m() -> float:
    """The machine's 1-minute load average."""
    return os.getloadavg()[0]


def load_since(before: float) -> dict[str, float]:
    """`{"before": before, "after": <the 1-minute load average now>}`."""
    return {"before": before, "after": loadavg_1m()}


def environment(*packages: str) -> dict[str, Any]:
    """The Python version, the machine, the versions of `packages` and the time (UTC), as results record them."""
    return {
        "python": platform.python_version(),
        "machine": platform.platform(),
        "versions": {pkg: version(pkg) for pkg in packages},
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def save_results(path: Path, result: dict[str, Any], *lines: str, announce: bool = True) -> None:
    """Print `lines` (the benchmark's summary), write `result` as indented JSON to `path` (its folder made as
    needed) and say so unless `announce` is False."""
    for line in lines:
        print(line)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    if announce:
        print(f"saved {path.relative_to(ROOT)}")
