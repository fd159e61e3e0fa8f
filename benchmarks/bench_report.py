"""How long does `quotalab report` take, wall clock from the command to report.html (JVM start included), on
`local[2]`, against the report as it was before issue 21 (commit 915f03d) in the same run?

Two workloads, synthetic runs written as the runtime writes them (a manifest and Parquet parts of 20 rounds):

- demo: three runs of 5 brokers x 3 groups x 60 rounds (the size of `quotalab demo`'s runs; target <= 12 s);
- million: one run of 20 brokers x 250 groups x 200 rounds x 1 dimension = 1,000,000 `rounds` rows (plus
  4,000 `messages` rows and 3 events; target <= 20 s per million rows).

Every broker serves every group; demands are log-normal around 1.2x the quota, usage approaches the max-min
fair share after each event, a crashed broker is absent for 10 rounds, so the convergence, fairness and
bandwidth jobs all have work to do.

Each measurement runs `python -m experiments report RUN... --master local[2]` in a fresh process, from this
checkout and from the baseline's files (`git archive 915f03d`), alternating, `--repeat` times each (median
kept): a load that changes during the run weighs on both. Needs git and the repository's history.

Run from the repository root: `python -m benchmarks.bench_report` (writes `benchmarks/results/report.json`).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from io import BytesIO
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from allocator.policies.waterfill import max_min_fair
from benchmarks.common import ROOT, command_line, loadavg_1m, results_path, save_results

RESULTS = results_path("report")
MASTER = "local[2]"
BASELINE = "915f03d"  # the report before issue 21
WORKLOADS = {"demo": {"runs": 3, "brokers": 5, "groups": 3, "rounds": 60},
             "million": {"runs": 1, "brokers": 20, "groups": 250, "rounds": 200}}  # fmt: skip
TARGETS = {"demo_s": 12.0, "seconds_per_million_rows": 20.0}
QUOTA = 1_000.0
ROUNDS_PER_PART = 20
EVENTS = [(50, "demand", "broker-0", {"group": "tenant-000/ns", "msgs_per_s": 400.0}), (100, "crash", "broker-3", {}),
          (150, "quota", "tenant-001/ns", {"publish_msgs_per_s": 1_500.0})]  # fmt: skip
CRASHED = range(100, 110)  # broker-3 is absent


def write_synthetic_run(run_dir: Path, brokers_n: int, groups_n: int, rounds_n: int, seed: int = 82) -> int:
    """Write the run; returns the number of `rounds` rows."""
    BROKERS, GROUPS, ROUNDS = brokers_n, groups_n, rounds_n
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
            quota[min(1, GROUPS - 1)] = 1_500.0
        present = np.ones((GROUPS, BROKERS), dtype=bool)
        if r in CRASHED:
            present[:, min(3, BROKERS - 1)] = False
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
                "incarnation": np.where((b == min(3, BROKERS - 1)) & (r >= 110), 2, 1).astype(np.int32),
                "usage_fraction_of_limit": usage[g, b] / (fair[g, b] * 1.05),
                "usage_fraction_of_quota": usage[g, b] / quota[g],
                "group_usage": group_usage[g],
                "group_usage_fraction_of_quota": group_usage[g] / quota[g],
                "over_quota": over[g],
                "breach_age_s": np.where(over, r - breach_since, 0.0)[g],
                "throttle_events": np.zeros(n, dtype=np.int32),
                "report_age_max_s": np.zeros(n),
                "report_age_mean_s": np.zeros(n),
                "agreed_pool_size": np.full(n, -1, dtype=np.int32),  # no pool-size consensus
                "pool": quota[g],
            }
        )
    rows = 0
    (run_dir / "rounds").mkdir(parents=True)
    for start in range(0, ROUNDS, ROUNDS_PER_PART):
        batch = parts[start : start + ROUNDS_PER_PART]
        table = pa.table({name: np.concatenate([part[name] for part in batch]) for name in batch[0]})
        pq.write_table(table, run_dir / "rounds" / f"part-{start // ROUNDS_PER_PART:05d}.parquet")
        rows += table.num_rows
    _write_messages(run_dir, rng, BROKERS, GROUPS, ROUNDS)
    _write_events(run_dir)
    _write_throttles_and_timings(run_dir, parts, rng, BROKERS, ROUNDS)
    (run_dir / "producers").mkdir()  # no producers: the table is empty
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


def _write_messages(run_dir: Path, rng: np.random.Generator, BROKERS: int, GROUPS: int, ROUNDS: int) -> None:
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


def _write_throttles_and_timings(
    run_dir: Path,
    parts: list[dict[str, np.ndarray]],
    rng: np.random.Generator,
    BROKERS: int,
    ROUNDS: int,
) -> None:
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


def baseline_tree(scratch: Path) -> Path:
    """The repository's files at `BASELINE`, unpacked into `scratch/baseline` (its report code, with today's
    run format: the telemetry schema has only grown since)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", BASELINE], capture_output=True, check=True).stdout
    target = scratch / "baseline"
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target


def report_wall_s(code: Path, run_dirs: list[Path], out: Path) -> float:
    """Wall seconds of `python -m experiments report` from `code`, in a fresh process (JVM start included)."""
    command = [sys.executable, "-m", "experiments", "report", *map(str, run_dirs), "--out", str(out),
               "--master", MASTER]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(code)}
    start = time.perf_counter()
    finished = subprocess.run(command, cwd=code, env=env, capture_output=True, text=True)
    if finished.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} (from {code}) failed: {finished.stderr[-2000:]}")
    return time.perf_counter() - start


def run(repeat: int = 1, workloads: list[str] | None = None) -> dict:
    """Measure each workload (default: all) `repeat` times with both codes; save and print the results."""
    workloads = workloads or list(WORKLOADS)
    result: dict = {"master": MASTER, "baseline": BASELINE, "repeat": repeat, "targets": TARGETS, "workloads": {}}
    load_before = loadavg_1m()
    with tempfile.TemporaryDirectory(prefix="bench-report-") as scratch_name:
        scratch = Path(scratch_name)
        baseline = baseline_tree(scratch)
        for name in workloads:
            shape = WORKLOADS[name]
            run_dirs = [scratch / name / f"run-{index}" for index in range(shape["runs"])]
            rows = sum(
                write_synthetic_run(run_dir, shape["brokers"], shape["groups"], shape["rounds"], seed=82 + index)
                for index, run_dir in enumerate(run_dirs)
            )
            times: dict[str, list[float]] = {"now": [], "baseline": []}
            for attempt in range(repeat):
                for label, code in (("now", ROOT), ("baseline", baseline)):
                    out = scratch / f"{name}-{label}-{attempt}"
                    times[label].append(report_wall_s(code, run_dirs, out))
                    print(f"{name}: {label} {times[label][-1]:.1f} s", flush=True)
            now_s, baseline_s = statistics.median(times["now"]), statistics.median(times["baseline"])
            result["workloads"][name] = {
                **shape,
                "rounds_rows": rows,
                "now_s": round(now_s, 2),
                "baseline_s": round(baseline_s, 2),
                "baseline_over_now": round(baseline_s / now_s, 2),
                "now_seconds_per_million_rows": round(now_s / (rows / 1e6), 2),
                "all_s": {label: [round(value, 2) for value in values] for label, values in times.items()},
            }
    result.update(
        load_average_1m={"before": round(load_before, 2), "after": round(loadavg_1m(), 2)},
        cpus=os.cpu_count(),
        python=platform.python_version(),
        pyspark=version("pyspark"),
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )
    save_results(RESULTS, result, announce=False)
    for name, measured in result["workloads"].items():
        print(
            f"{name} ({measured['rounds_rows']:,} rounds rows): {measured['now_s']:.1f} s now, "
            f"{measured['baseline_s']:.1f} s at {BASELINE} ({measured['baseline_over_now']}x faster now); "
            f"{measured['now_seconds_per_million_rows']:.1f} s per million rows"
        )
    return result


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument("--repeat", type=int, default=1, help="measurements per code and workload (median kept)")
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    arguments = parser.parse_args()
    run(arguments.repeat, arguments.workloads)
