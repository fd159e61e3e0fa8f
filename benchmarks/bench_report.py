"""How long does `quotalab report` take per million rows of telemetry on `local[2]`?

A synthetic run of 20 brokers x 250 groups x 200 rounds x 1 dimension = 1,000,000 `rounds` rows (plus 4,000
`messages` rows and 3 events), written as the runtime writes it: a manifest and Parquet parts of 20 rounds
each. Every broker serves every group; demands are log-normal around 1.2x the quota, usage approaches the
max-min fair share after each event, a crashed broker is absent for 10 rounds, so the convergence, fairness
and bandwidth jobs all have work to do.

Timed: `build_report` on a started session (the JVM's start is reported apart, it does not grow with the
data), everything from reading Parquet to writing report.html.

Run from the repository root: `python benchmarks/bench_report.py` (writes `benchmarks/results/report.json`).
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from common import command_line, loadavg_1m, results_path, save_results

from allocator.policies.waterfill import max_min_fair
from experiments.report import build_report
from experiments.report.session import spark_session

RESULTS = results_path("report")
MASTER = "local[2]"
BROKERS, GROUPS, ROUNDS = 20, 250, 200
QUOTA = 1_000.0
ROUNDS_PER_PART = 20
EVENTS = [(50, "demand", "broker-0", {"group": "tenant-000/ns", "msgs_per_s": 400.0}), (100, "crash", "broker-3", {}),
          (150, "quota", "tenant-001/ns", {"publish_msgs_per_s": 1_500.0})]  # fmt: skip
CRASHED = range(100, 110)  # broker-3 is absent


def write_synthetic_run(run_dir: Path, seed: int = 82) -> int:
    """Write the run; returns the number of `rounds` rows."""
    rng = np.random.default_rng(seed)
    brokers = np.array([f"broker-{b}" for b in range(BROKERS)])
    groups = np.array([f"tenant-{g:03d}/ns" for g in range(GROUPS)])
    base_demand = rng.lognormal(0.0, 0.5, size=(GROUPS, BROKERS))
    base_demand *= 1.2 * QUOTA / base_demand.sum(axis=1, keepdims=True)
    parts: list[dict[str, np.ndarray]] = []
    breach_since = np.full(GROUPS, np.nan)
    for r in range(ROUNDS):
        demand, quota = base_demand.copy(), np.full(GROUPS, QUOTA)
        if r >= 50:
            demand[0, 0] = 400.0
        if r >= 150:
            quota[1] = 1_500.0
        present = np.ones((GROUPS, BROKERS), dtype=bool)
        if r in CRASHED:
            present[:, 3] = False
        fair = max_min_fair(quota, demand, present)
        since_event = r - max(e for e in (0, 50, 100, 110, 150) if e <= r)
        noise = 1 + 0.3 * np.exp(-since_event / 4) * rng.standard_normal((GROUPS, BROKERS))
        usage = np.clip(fair * noise, 0.0, demand)
        g, b = np.nonzero(present)
        n = len(g)
        group_usage = (usage * present).sum(axis=1)
        over = group_usage > quota
        breach_since = np.where(over, np.where(np.isnan(breach_since), float(r), breach_since), np.nan)
        parts.append(
            {
                "run_id": np.full(n, run_dir.name),
                "round": np.full(n, r, dtype=np.int32),
                "t_s": np.full(n, float(r)),
                "broker": brokers[b],
                "group": groups[g],
                "dimension": np.full(n, "publish_msgs_per_s"),
                "quota": quota[g],
                "limit": fair[g, b] * 1.05,
                "usage": usage[g, b],
                "demand": demand[g, b],
                "throttled_s": np.where(usage[g, b] < demand[g, b], 0.1, 0.0),
                "view_brokers": np.full(n, BROKERS, dtype=np.int32),
                "reported": np.ones(n, dtype=bool),
                "report_bytes": np.full(n, 24.0),
                "incarnation": np.where((b == 3) & (r >= 110), 2, 1).astype(np.int32),
                "usage_fraction_of_limit": usage[g, b] / (fair[g, b] * 1.05),
                "usage_fraction_of_quota": usage[g, b] / quota[g],
                "group_usage": group_usage[g],
                "group_usage_fraction_of_quota": group_usage[g] / quota[g],
                "over_quota": over[g],
                "breach_age_s": np.where(over, r - breach_since, 0.0)[g],
                "throttle_events": np.zeros(n, dtype=np.int32),
                "report_age_max_s": np.zeros(n),
                "report_age_mean_s": np.zeros(n),
            }
        )
    rows = 0
    (run_dir / "rounds").mkdir(parents=True)
    for start in range(0, ROUNDS, ROUNDS_PER_PART):
        batch = parts[start : start + ROUNDS_PER_PART]
        table = pa.table({name: np.concatenate([part[name] for part in batch]) for name in batch[0]})
        pq.write_table(table, run_dir / "rounds" / f"part-{start // ROUNDS_PER_PART:05d}.parquet")
        rows += table.num_rows
    _write_messages(run_dir, rng)
    _write_events(run_dir)
    _write_throttles_and_timings(run_dir, parts, rng)
    manifest = {
        "run_id": run_dir.name,
        "scenario_name": "bench-report",
        "policy": "fair-share",
        "seed": seed,
        "scenario": {"name": "bench-report", "rounds": ROUNDS},
        "status": "complete",
        "rounds_completed": ROUNDS,
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return rows


def _write_messages(run_dir: Path, rng: np.random.Generator) -> None:
    rounds, brokers = np.meshgrid(np.arange(ROUNDS, dtype=np.int32), np.arange(BROKERS), indexing="ij")
    n = rounds.size
    published = rng.integers(2_000, 6_000, size=n)
    table = pa.table(
        {
            "run_id": np.full(n, run_dir.name),
            "round": rounds.ravel(),
            "t_s": rounds.ravel().astype(np.float64),
            "broker": np.array([f"broker-{b}" for b in brokers.ravel()]),
            "bytes_published": published,
            "bytes_delivered": published * (BROKERS - 1),
            "reports_sent": np.ones(n, dtype=np.int32),
            "reports_suppressed": rng.integers(0, GROUPS, size=n).astype(np.int32),
            "deliveries_dropped": np.zeros(n, dtype=np.int32),
            "reports_rejected": np.zeros(n, dtype=np.int32),
            "deliveries_lost_transport": np.zeros(n, dtype=np.int32),
        }
    )
    (run_dir / "messages").mkdir()
    pq.write_table(table, run_dir / "messages" / "part-00000.parquet")


def _write_events(run_dir: Path) -> None:
    table = pa.table(
        {
            "run_id": [run_dir.name] * len(EVENTS),
            "round": pa.array([e[0] for e in EVENTS], pa.int32()),
            "t_s": [float(e[0]) for e in EVENTS],
            "kind": [e[1] for e in EVENTS],
            "target": [e[2] for e in EVENTS],
            "detail": [json.dumps(e[3]) for e in EVENTS],
        }
    )
    (run_dir / "events").mkdir()
    pq.write_table(table, run_dir / "events" / "part-00000.parquet")


def _write_throttles_and_timings(run_dir: Path, parts: list[dict[str, np.ndarray]], rng: np.random.Generator) -> None:
    """`throttles`: the throttled rows, one reason; `timings`: a broker's allocate phase, ~1 ms."""
    rounds = pa.concat_tables(pa.table(part) for part in parts)
    throttled = rounds.filter(pc.greater(rounds["throttled_s"], 0.0))
    n = throttled.num_rows
    throttles = throttled.select(["run_id", "round", "t_s", "broker", "group", "throttled_s"])
    throttles = throttles.append_column("reason", pa.array(["group_limit"] * n))
    throttles = throttles.append_column("throttle_events", pa.array(np.zeros(n, dtype=np.int32)))
    (run_dir / "throttles").mkdir()
    pq.write_table(throttles, run_dir / "throttles" / "part-00000.parquet")
    round_index, broker = np.meshgrid(np.arange(ROUNDS, dtype=np.int32), np.arange(BROKERS), indexing="ij")
    timings = pa.table(
        {
            "run_id": np.full(round_index.size, run_dir.name),
            "round": round_index.ravel(),
            "t_s": round_index.ravel().astype(np.float64),
            "broker": np.array([f"broker-{b}" for b in broker.ravel()]),
            "allocate_phase_s": rng.lognormal(np.log(0.001), 0.3, size=round_index.size),
        }
    )
    (run_dir / "timings").mkdir()
    pq.write_table(timings, run_dir / "timings" / "part-00000.parquet")


def run() -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-report-") as scratch:
        run_dir = Path(scratch) / "bench-run"
        rows = write_synthetic_run(run_dir)
        load_before = loadavg_1m()
        start = time.perf_counter()
        spark = spark_session(MASTER)
        session_s = time.perf_counter() - start
        start = time.perf_counter()
        build_report([run_dir], Path(scratch) / "report", spark=spark)
        report_s = time.perf_counter() - start
        spark.stop()
    result = {
        "rounds_rows": rows,
        "shape": {"brokers": BROKERS, "groups": GROUPS, "rounds": ROUNDS, "dimensions": 1},
        "master": MASTER,
        "session_start_s": round(session_s, 2),
        "report_s": round(report_s, 2),
        "seconds_per_million_rows": round(report_s / (rows / 1e6), 2),
        "load_average_1m_before": round(load_before, 2),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "pyspark": version("pyspark"),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }
    save_results(RESULTS, result, announce=False)
    print(
        f"{rows:,} rounds rows on {MASTER}: report {report_s:.1f} s "
        f"({result['seconds_per_million_rows']} s per million rows); session start {session_s:.1f} s; "
        f"load average before {load_before:.1f} on {os.cpu_count()} CPUs"
    )
    return result


if __name__ == "__main__":
    command_line(__doc__).parse_args()
    run()
