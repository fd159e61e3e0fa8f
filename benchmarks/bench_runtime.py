"""How fast does the runtime go: lockstep rounds per second, realtime timer lag, and PIP-82's full scale.

- `lockstep`: rounds per second of `actors.lockstep.run_lockstep` for 16 brokers and 1,000 groups, each
  group on 4 brokers (so 250 groups a broker; a `generated:` scenario, one broker per actor), on the
  `local` backend and on the `ray` backend in the same run. Telemetry is written (a `TelemetryWriter` into
  a temporary directory): it is part of a round. Rounds are timed with the `on_round` callback's
  timestamps, over `timed` rounds after `warmup` rounds; Ray's start-up is timed apart and excluded.
  Target on Ray: at least 10 rounds/s on a 2-core machine.
- `realtime`: how late the brokers' timers tick at 16 brokers and `interval_s` 0.1 over 300 rounds (the
  manifest's `realtime_lag` from `actors.realtime.run_realtime`: mean, p50, p99 and max lag in ms), on Ray
  and locally. The run's epoch is fixed before the hosts exist, so on Ray the first ticks of every broker
  are as late as its actor took to start (seconds) and the timers then catch up back to back: that start-up
  shows in the mean, p99 and max; the median is the steady state once most ticks come after it.
- `scale`: PIP-82's sizing (`experiments/scenarios/scale-pip82.yaml`: 100 brokers, 100,000 groups on 5
  brokers each, 5,000 groups a broker, 10 shards) for 3 rounds, on the local backend (everything in one
  process) and on Ray with 10 brokers per actor. Each runs in a child process of its own, so its peak RSS
  (`resource.getrusage`) is its own; on Ray the RSS of the actor processes (the child's descendants,
  read from /proc) is sampled too. Seconds per round from the `on_round` timestamps (round 0 includes
  starting the 100 brokers), and the bytes published and delivered per round from the `messages` table,
  next to PIP-82's estimate (56 MB published, 5.6 GB consumed per round). A run that goes past
  `scale_timeout_s` is stopped and reported as such.

The machine's load average is recorded with the figures: other work on a shared machine slows every one.

Run from the repository root: `python benchmarks/bench_runtime.py` (prints tables, writes
`benchmarks/results/runtime.json`); `--no-scale` and `--no-ray` leave those parts out.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.dataset as ds
from common import ROOT, environment, load_since, loadavg_1m, results_path, save_results

from actors.backends import make_backend
from actors.config import Scenario
from actors.lockstep import run_lockstep
from actors.realtime import run_realtime
from actors.telemetry import TelemetryWriter
from experiments.scenario import load_scenario, parse_scenario

RESULTS = results_path("runtime")
SCALE_SCENARIO = ROOT / "experiments" / "scenarios" / "scale-pip82.yaml"
RAY_TARGET_ROUNDS_PER_S = 10.0
PIP82_PUBLISHED_BYTES = 56e6  # PIP-82's estimate per round: 100 brokers x 5,000 namespaces
PIP82_CONSUMED_BYTES = 5.6e9  # ... each report read by the 99 other brokers (100 x 56 MB)


def cluster_scenario(
    brokers: int = 16,
    groups: int = 1_000,
    per_group: int = 4,
    rounds: int = 35,
    *,
    mode: str = "lockstep",
    interval_s: float = 1.0,
    backend: str = "local",
    policy: str = "pip82-steal",
    shards: int = 1,
) -> Scenario:
    """`groups` groups on `per_group` of `brokers` brokers each, asking ~1.1x their quota in total.

    One shard (the default): every broker hosts groups of every shard at this size anyway, so more shards
    only split each broker's report into more, smaller messages."""
    return parse_scenario(
        {
            "name": f"bench-{brokers}x{groups}",
            "seed": 7,
            "rounds": rounds,
            "interval_s": interval_s,
            "mode": mode,
            "backend": backend,
            "brokers_per_actor": 1,
            "policy": {"name": policy},
            "channel": {"shards": shards},
            "generated": {
                "groups": groups,
                "brokers": brokers,
                "brokers_per_group": per_group,
                "quota": {"publish_msgs_per_s": 1000},
                "msgs_per_s": {"uniform": [100, 450]},
            },
        }
    )


def _writer(directory: str, scenario: Scenario) -> TelemetryWriter:
    run_id = f"bench-{scenario.mode}-{scenario.backend}"
    manifest = {"scenario_name": scenario.name, "policy": scenario.policy.name, "backend": scenario.backend}
    return TelemetryWriter(Path(directory) / run_id, run_id, manifest)


def _message_bytes(run_dir: Path, by_round: bool = False) -> dict[str, Any]:
    """Mean bytes published and delivered per round (summed over brokers) from the `messages` table."""
    table = ds.dataset(run_dir / "messages", format="parquet").to_table().to_pandas()
    if table.empty:
        return {"published_per_round": 0.0, "delivered_per_round": 0.0}
    per_round = table.groupby("round")[["bytes_published", "bytes_delivered"]].sum()
    out: dict[str, Any] = {
        "published_per_round": float(per_round["bytes_published"].mean()),
        "delivered_per_round": float(per_round["bytes_delivered"].mean()),
    }
    if by_round:
        out["published_by_round"] = [int(v) for v in per_round["bytes_published"]]
        out["delivered_by_round"] = [int(v) for v in per_round["bytes_delivered"]]
    return out


def _stamped_lockstep(
    directory: str, scenario: Scenario, backend: Any, by_round: bool = False
) -> tuple[float, list[float], dict[str, Any]]:
    """A lockstep run with telemetry in `directory`: its start, each round's end (`time.perf_counter`), and
    the bytes of its `messages` table (`_message_bytes`)."""
    stamps: list[float] = []
    writer = _writer(directory, scenario)
    start = time.perf_counter()
    try:
        run_lockstep(scenario, backend, writer, on_round=lambda _: stamps.append(time.perf_counter()))
    finally:
        writer.close("complete")
    return start, stamps, _message_bytes(writer.run_dir, by_round=by_round)


def lockstep_rate(scenario: Scenario, backend: Any, warmup: int) -> dict:
    """Rounds per second of a lockstep run over the rounds after `warmup` (telemetry written to a temp dir)."""
    with tempfile.TemporaryDirectory(prefix="quotalab-bench-") as directory:
        start, stamps, message_bytes = _stamped_lockstep(directory, scenario, backend)
    timed = len(stamps) - warmup
    seconds = np.diff([stamps[warmup - 1], *stamps[warmup:]]) if warmup else np.diff([start, *stamps])
    return {
        "rounds_timed": timed,
        "warmup_rounds": warmup,
        "rounds_per_s": float(timed / seconds.sum()),
        "median_round_ms": float(np.median(seconds) * 1e3),
        "max_round_ms": float(seconds.max() * 1e3),
        "first_round_s": float(stamps[0] - start),
        "bytes": message_bytes,
    }


def realtime_lag(scenario: Scenario, backend: Any) -> dict:
    """The timer lag statistics of a realtime run, in ms."""
    with tempfile.TemporaryDirectory(prefix="quotalab-bench-") as directory:
        writer = _writer(directory, scenario)
        start = time.perf_counter()
        try:
            stats = run_realtime(scenario, backend, writer)
        finally:
            writer.close("complete")
        elapsed = time.perf_counter() - start
    out: dict[str, float] = {"ticks": stats.get("ticks", 0), "interval_ms": scenario.interval_s * 1e3}
    for key in ("mean_s", "p50_s", "p99_s", "max_s"):
        if key in stats:
            out[key.replace("_s", "_ms")] = stats[key] * 1e3
    out["expected_ticks"] = len(scenario.brokers) * scenario.rounds
    out["wall_s"] = elapsed
    return out


def cluster_benchmarks(
    backends: tuple[str, ...] = ("local", "ray"),
    brokers: int = 16,
    groups: int = 1_000,
    per_group: int = 4,
    warmup: int = 5,
    timed: int = 30,
    realtime_rounds: int = 300,
    realtime_interval_s: float = 0.1,
) -> dict:
    """Lockstep rounds/s and realtime lag on each backend (one Ray session for both Ray measurements)."""
    results: dict[str, dict] = {}
    for name in backends:
        load = loadavg_1m()
        start = time.perf_counter()
        backend = make_backend(name)
        startup_s = time.perf_counter() - start
        try:
            lockstep = lockstep_rate(
                cluster_scenario(brokers, groups, per_group, warmup + timed, backend=name), backend, warmup
            )
            realtime = realtime_lag(
                cluster_scenario(
                    brokers,
                    groups,
                    per_group,
                    realtime_rounds,
                    mode="realtime",
                    interval_s=realtime_interval_s,
                    backend=name,
                ),
                backend,
            )
        finally:
            if name == "ray":
                import ray

                ray.shutdown()
        results[name] = {
            "startup_s": startup_s,
            "lockstep": lockstep,
            "realtime": realtime,
            "loadavg_1m": load_since(load),
        }
    out: dict[str, Any] = {
        "brokers": brokers,
        "groups": groups,
        "brokers_per_group": per_group,
        "groups_per_broker": groups * per_group / brokers,
        "backends": results,
    }
    if "ray" in results:
        rate = results["ray"]["lockstep"]["rounds_per_s"]
        out["ray_target"] = {"rounds_per_s": RAY_TARGET_ROUNDS_PER_S, "met": rate >= RAY_TARGET_ROUNDS_PER_S}
    return out


# --- PIP-82 scale, in a child process ---------------------------------------------------------------------


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc), e.g. the Ray processes a driver started."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class _RssSampler:
    """The largest total RSS of this process's descendants (Ray's processes), sampled every `every_s`."""

    def __init__(self, every_s: float = 1.0):
        self.peak = 0
        self._every = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.peak = max(self.peak, sum(_rss_bytes(pid) for pid in _descendants(os.getpid())))


def scale_child(backend_name: str, rounds: int) -> dict:
    """PIP-82's scale scenario for `rounds` rounds on one backend (run in a process of its own)."""
    start = time.perf_counter()
    scenario = load_scenario(SCALE_SCENARIO, {"rounds": rounds, "backend": backend_name})
    parse_s = time.perf_counter() - start
    start = time.perf_counter()
    backend = make_backend(backend_name)
    startup_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="quotalab-bench-scale-") as directory, _RssSampler() as sampler:
        start, stamps, message_bytes = _stamped_lockstep(directory, scenario, backend, by_round=True)
    round_s = np.diff([start, *stamps])
    result = {
        "backend": backend_name,
        "brokers": len(scenario.brokers),
        "groups": len(scenario.groups),
        "brokers_per_group": scenario.generated["brokers_per_group"] if scenario.generated else None,
        "brokers_per_actor": scenario.brokers_per_actor if backend_name == "ray" else None,
        "shards": scenario.channel.shards,
        "rounds": len(stamps),
        "parse_s": parse_s,
        "backend_startup_s": startup_s,
        "round_s": [float(s) for s in round_s],
        "steady_round_s": float(np.mean(round_s[1:])) if len(round_s) > 1 else None,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_descendants_rss_bytes": sampler.peak,
        "bytes": message_bytes,
    }
    if backend_name == "ray":
        import ray

        ray.shutdown()
    return result


def scale(backends: tuple[str, ...] = ("local", "ray"), rounds: int = 3, timeout_s: float = 600.0) -> dict:
    """Each backend's scale run in a child process, stopped (its whole process group) after `timeout_s`."""
    results: dict[str, dict] = {}
    for name in backends:
        load = loadavg_1m()
        command = [sys.executable, str(Path(__file__).resolve()), "--scale-child", name, "--rounds", str(rounds)]
        start = time.perf_counter()
        child = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            stdout, stderr = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # the child and the Ray processes it started
            child.communicate()
            results[name] = {"status": "timeout", "timeout_s": timeout_s}
            continue
        finally:
            elapsed = time.perf_counter() - start
        if child.returncode != 0:
            results[name] = {"status": f"failed ({child.returncode})", "stderr": stderr[-3000:]}
            continue
        result = json.loads(stdout.strip().splitlines()[-1])
        result["status"] = "complete"
        result["wall_s"] = elapsed
        result["loadavg_1m"] = load_since(load)
        result["vs_pip82"] = {
            "published_ratio": result["bytes"]["published_per_round"] / PIP82_PUBLISHED_BYTES,
            "delivered_ratio": result["bytes"]["delivered_per_round"] / PIP82_CONSUMED_BYTES,
        }
        results[name] = result
    return {
        "scenario": str(SCALE_SCENARIO.relative_to(ROOT)),
        "pip82_estimate": {"published_bytes": PIP82_PUBLISHED_BYTES, "consumed_bytes": PIP82_CONSUMED_BYTES},
        "backends": results,
    }


def run(
    backends: tuple[str, ...] = ("local", "ray"),
    with_scale: bool = True,
    scale_rounds: int = 3,
    scale_timeout_s: float = 600.0,
) -> dict:
    result: dict[str, Any] = {
        "cluster": cluster_benchmarks(backends),
        "scale": scale(backends, scale_rounds, scale_timeout_s) if with_scale else None,
        "cpus": os.cpu_count(),
        **environment("numpy", "pyarrow", "msgpack", *(("ray",) if "ray" in backends else ())),
    }
    return result


def _mb(value: float) -> str:
    return f"{value / 1e6:,.1f} MB"


def _table(result: dict) -> str:
    cluster = result["cluster"]
    interval_ms = next(iter(cluster["backends"].values()))["realtime"]["interval_ms"]
    lines = [
        f"{cluster['brokers']} brokers, {cluster['groups']:,} groups on {cluster['brokers_per_group']} brokers each"
        f" ({cluster['groups_per_broker']:.0f} a broker); one broker per actor",
        f"{'backend':<8} {'startup s':>9} {'rounds/s':>9} {'median ms':>10} {'max ms':>8}"
        f"   realtime lag at {interval_ms:g} ms: mean / p50 / p99 / max ms (ticks)   load",
    ]
    nan = float("nan")
    for name, row in cluster["backends"].items():
        lock, real = row["lockstep"], row["realtime"]
        lag = (
            f"{real.get('mean_ms', nan):.1f} / {real.get('p50_ms', nan):.1f} / {real.get('p99_ms', nan):.1f} /"
            f" {real.get('max_ms', nan):.1f} ({real['ticks']}/{real['expected_ticks']})"
        )
        load = row["loadavg_1m"]
        lines.append(
            f"{name:<8} {row['startup_s']:>9.1f} {lock['rounds_per_s']:>9.1f} {lock['median_round_ms']:>10.1f}"
            f" {lock['max_round_ms']:>8.1f}   {lag:<44} {load['before']:.1f}->{load['after']:.1f}"
        )
    if "ray_target" in cluster:
        target = cluster["ray_target"]
        lines.append(f"Ray target >= {target['rounds_per_s']:g} rounds/s: {'met' if target['met'] else 'MISSED'}")
    if result.get("scale"):
        scale_result = result["scale"]
        lines.append("")
        lines.append(f"PIP-82 scale ({scale_result['scenario']})")
        for name, row in scale_result["backends"].items():
            if row["status"] != "complete":
                lines.append(f"{name:<8} {row['status']}")
                continue
            rounds = ", ".join(f"{s:.1f}" for s in row["round_s"])
            lines.append(
                f"{name:<8} rounds (s): {rounds}; parse {row['parse_s']:.1f} s,"
                f" backend start {row['backend_startup_s']:.1f} s;"
                f" peak RSS {row['peak_rss_bytes'] / 2**30:.2f} GiB"
                + (
                    f" (+ Ray processes {row['peak_descendants_rss_bytes'] / 2**30:.2f} GiB)"
                    if row["peak_descendants_rss_bytes"]
                    else ""
                )
            )
            bytes_ = row["bytes"]
            lines.append(
                f"{'':<8} per round: published {_mb(bytes_['published_per_round'])}"
                f" ({row['vs_pip82']['published_ratio']:.2f}x PIP-82's 56 MB),"
                f" delivered {_mb(bytes_['delivered_per_round'])}"
                f" ({row['vs_pip82']['delivered_ratio']:.2f}x PIP-82's 5.6 GB); load"
                f" {row['loadavg_1m']['before']:.1f}->{row['loadavg_1m']['after']:.1f}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-scale", action="store_true", help="leave out the PIP-82 scale runs")
    parser.add_argument("--no-ray", action="store_true", help="local backend only")
    parser.add_argument("--scale-timeout", type=float, default=600.0, help="seconds per scale run (default 600)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the scale runs (default 3)")
    parser.add_argument("--scale-child", choices=["local", "ray"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scale_child:
        print(json.dumps(scale_child(args.scale_child, args.rounds)))
        sys.exit(0)
    chosen = ("local",) if args.no_ray else ("local", "ray")
    result = run(chosen, with_scale=not args.no_scale, scale_rounds=args.rounds, scale_timeout_s=args.scale_timeout)
    save_results(RESULTS, result, f"Python {result['python']}, {result['cpus']} CPUs", _table(result))
