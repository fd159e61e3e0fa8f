"""What every benchmark and evaluation shares: the command line, the machine's description, saving results.

The benchmarks and evaluations run as modules from the repository root (`python -m benchmarks.bench_allocator`,
`python -m evaluations.quality`), which puts the repository's packages on the path.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def command_line(doc: str) -> argparse.ArgumentParser:
    """The benchmark's command line: `--help` prints its docstring (what it measures and how to read it), and its
    usage the command that runs it (`python -m benchmarks.bench_allocator`)."""
    first, _, rest = doc.strip().partition("\n")
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    return argparse.ArgumentParser(
        prog=f"python -m {spec.name}" if spec else None,
        description=first,
        epilog=rest.strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def results_path(name: str, folder: str = "benchmarks") -> Path:
    """`<folder>/results/<name>.json`: `folder` is the top-level folder of the code that writes it (benchmarks,
    evaluations, tests)."""
    return ROOT / folder / "results" / f"{name}.json"


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/`pid`/stat after the command's name (state, parent, ...), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_s(pid: int) -> float:
    """User and system CPU seconds `pid` has used (from /proc), 0 once it is gone."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else 0.0


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc), e.g. the Ray processes a driver started."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        fields = _stat_fields(int(entry)) if entry.isdigit() else None
        if fields:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


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


def replace_marked(path: Path, name: str, text: str) -> None:
    """Put `text` between the markers `<!-- name:begin -->` and `<!-- name:end -->` of the document `path`, indented
    as the begin marker is (a section inside a list item stays in it): the way a benchmark's figures reach the
    docs, never copied by hand."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    document = path.read_text()
    head, found, rest = document.partition(begin)
    if not found or end not in rest:
        raise ValueError(f"{path.relative_to(ROOT)} has no {begin} ... {end} section")
    indent = head[head.rfind("\n") + 1 :]
    body = "".join(f"{indent}{line}\n" if line else "\n" for line in text.strip().splitlines())
    path.write_text(head + begin + "\n" + body + indent + end + rest.partition(end)[2])


PHASES = ("admit", "build_reports", "finish_round")


@dataclass(frozen=True)
class TimedRound:
    """One `BrokerNode` round timed phase by phase: `seconds` per phase of `PHASES` (wall clock), plus "total"
    and "cpu" (the thread's CPU time, which load from other processes inflates much less); the round's
    outbox and the receive's inbox counts."""

    seconds: dict[str, float]
    outbox: Any
    inbox: Any


def timed_round(node: Any, demand: Any, msg_bytes: Any, payloads: list[bytes], now_s: float) -> TimedRound:
    """Run one round of `node` (admit `demand`, build its reports, then `finish_round` on `payloads`)."""
    clock = time.perf_counter
    cpu_start = time.thread_time()
    stamps = [clock()]
    traffic = node.admit(demand, msg_bytes, now_s)
    stamps.append(clock())
    outbox = node.build_reports(traffic, now_s)
    stamps.append(clock())
    inbox = node.finish_round(payloads, now_s)
    stamps.append(clock())
    cpu = time.thread_time() - cpu_start
    seconds = {phase: after - before for phase, before, after in zip(PHASES, stamps, stamps[1:], strict=False)}
    return TimedRound(seconds | {"total": stamps[-1] - stamps[0], "cpu": cpu}, outbox, inbox)
