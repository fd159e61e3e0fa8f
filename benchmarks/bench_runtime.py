"""How fast does the runtime go: lockstep rounds per second and realtime timer lag (PIP-82's size: bench_scale).

- `lockstep`: rounds per second of `actors.drivers.lockstep.run_lockstep` for 16 brokers and 1,000 groups, each
  group on 4 brokers (so 250 groups a broker; a `generated:` scenario, one broker per actor), on the
  `local` backend and on the `ray` backend in the same run. Telemetry is written (a `TelemetryWriter` into
  a temporary directory): it is part of a round. Rounds are timed with the `on_round` callback's
  timestamps, over `timed` rounds after `warmup` rounds; Ray's start-up is timed apart and excluded.
  Target on Ray: at least 10 rounds/s on a 2-core machine.
- `realtime`: how late the brokers' timers tick at 16 brokers and `interval_s` 0.1 over 300 rounds (the
  manifest's `realtime_lag` from `actors.drivers.realtime.run_realtime`: mean, p50, p99 and max lag in ms), on Ray
  and locally. The run's epoch is fixed before the hosts exist, so on Ray the first ticks of every broker
  are as late as its actor took to start (seconds) and the timers then catch up back to back: that start-up
  shows in the mean, p99 and max; the median is the steady state once most ticks come after it.
The machine's load average is recorded with the figures: other work on a shared machine slows every one.

Run from the repository root: `python -m benchmarks.bench_runtime` (prints tables, writes
`benchmarks/results/runtime.json`); `--no-ray` leaves Ray out.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.dataset as ds

from actors.drivers.lockstep import run_lockstep
from actors.drivers.realtime import run_realtime
from actors.hosts.backends import make_backend
from actors.plan import Plan
from actors.telemetry.writer import TelemetryWriter
from benchmarks.common import environment, load_since, loadavg_1m, results_path, save_results
from experiments.planner import build_plan
from experiments.scenario import parse_scenario
from experiments.scenario.spec import Scenario

RESULTS = results_path("runtime")
RAY_TARGET_ROUNDS_PER_S = 10.0


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


def writer_for(directory: str, plan: Plan, backend_name: str) -> TelemetryWriter:
    """A telemetry writer into `directory`, with the plan's names for the coded columns."""
    run_id = f"bench-{plan.mode}-{backend_name}"
    manifest = {"scenario_name": plan.name, "policy": plan.node.policy.name, "backend": backend_name}
    names = {"broker": [b.name for b in plan.brokers], "group": plan.group_names, "dimension": plan.dimensions}
    return TelemetryWriter(Path(directory) / run_id, run_id, manifest, names)


def message_bytes(run_dir: Path, from_round: int = 0, until_round: int | None = None) -> dict[str, float]:
    """Mean bytes published and delivered per round (summed over brokers) from `from_round` on (to
    `until_round`, excluded, when given)."""
    table = ds.dataset(run_dir / "messages", format="parquet").to_table().to_pandas()
    last_round = table["round"].max() if until_round is None else until_round - 1
    kept = table[table["round"].between(from_round, last_round)]
    per_round = kept.groupby("round")[["bytes_published", "bytes_delivered"]].sum()
    if per_round.empty:
        return {"published_per_round": 0.0, "delivered_per_round": 0.0}
    return {
        "published_per_round": float(per_round["bytes_published"].mean()),
        "delivered_per_round": float(per_round["bytes_delivered"].mean()),
    }


def stamped_lockstep(directory: str, plan: Plan, backend: Any) -> tuple[float, list[float], Path]:
    """A lockstep run with telemetry in `directory`: its start, each round's end (`time.perf_counter`), and
    its run directory."""
    stamps: list[float] = []
    writer = writer_for(directory, plan, backend.name)
    start = time.perf_counter()
    try:
        run_lockstep(plan, backend, writer, on_round=lambda _: stamps.append(time.perf_counter()))
    finally:
        writer.close("complete")
    return start, stamps, writer.run_dir


def lockstep_rate(scenario: Scenario, backend: Any, warmup: int) -> dict:
    """Rounds per second of a lockstep run over the rounds after `warmup` (telemetry written to a temp dir)."""
    with tempfile.TemporaryDirectory(prefix="quotalab-bench-") as directory:
        start, stamps, run_dir = stamped_lockstep(directory, build_plan(scenario), backend)
        bytes_per_round = message_bytes(run_dir)
    timed = len(stamps) - warmup
    seconds = np.diff([stamps[warmup - 1], *stamps[warmup:]]) if warmup else np.diff([start, *stamps])
    return {
        "rounds_timed": timed,
        "warmup_rounds": warmup,
        "rounds_per_s": float(timed / seconds.sum()),
        "median_round_ms": float(np.median(seconds) * 1e3),
        "max_round_ms": float(seconds.max() * 1e3),
        "first_round_s": float(stamps[0] - start),
        "bytes": bytes_per_round,
    }


def realtime_lag(scenario: Scenario, backend: Any) -> dict:
    """The timer lag statistics of a realtime run, in ms."""
    with tempfile.TemporaryDirectory(prefix="quotalab-bench-") as directory:
        plan = build_plan(scenario)
        writer = writer_for(directory, plan, backend.name)
        start = time.perf_counter()
        try:
            stats = run_realtime(plan, backend, writer)
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


def run(backends: tuple[str, ...] = ("local", "ray")) -> dict:
    result: dict[str, Any] = {
        "cluster": cluster_benchmarks(backends),
        "cpus": os.cpu_count(),
        **environment("numpy", "pyarrow", "msgpack", *(("ray",) if "ray" in backends else ())),
    }
    return result


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
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-ray", action="store_true", help="local backend only")
    args = parser.parse_args()
    result = run(("local",) if args.no_ray else ("local", "ray"))
    save_results(RESULTS, result, f"Python {result['python']}, {result['cpus']} CPUs", _table(result))
