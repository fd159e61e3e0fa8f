"""How long does `quotalab report` take, wall clock from the command to report.html (JVM start included), on
`local[2]`, against a plain Spark job over the same rows measured in the same run?

The peer (`PEER_JOB`, in a fresh process too): start the JVM, read the `rounds` rows, sum usage and limits per
round and group, then each group's peak and mean (written as Parquet: about as many rows as groups). Target:
the report costs at most 3x the peer (`TARGETS`), whatever the size.

Workloads:

- demo: three synthetic runs of 5 brokers x 3 groups x 60 rounds (the size of `quotalab demo`'s runs);
- million: one synthetic run of 20 brokers x 250 groups x 200 rounds = 1,000,000 `rounds` rows;
- pip82: a real run of the shipped `scale-pip82` scenario, 15 rounds (`quotalab run scale-pip82 --backend local
  --rounds 15`): 100 brokers, 100,000 groups, 7,500,000 rows;
- pip82_50: the same for 50 rounds (25,000,000 rows), for the growth with rows (not in the default set: long).
  Measured with pip82 in the same run, it gives `growth`: the report's cost at 50 rounds over the 15 rounds' scaled
  by the rows (50/15), linear = 1 (target <= 1.2), and the same for the plain job.

Synthetic runs: every broker serves every group; demands are log-normal around 1.2x the quota, usage approaches
the max-min fair share after each event, a crashed broker is absent for 10 rounds.

Each measurement runs `python -m experiments report RUN... --master local[2]` and the peer in fresh processes,
alternating, `--repeat` times each (median kept): a load that changes during the run weighs on both. Recorded
too: the report's peak RSS, of its Python driver and of its JVM (sampled every 0.2 s), and the sizes of
report.html and summary.json. The reports start from Spark's class archive, as every report after a machine's
first does (`experiments.report.class_archive`: recorded first if the machine has none); the peer starts
without one, as a plain job does.

Run from the repository root: `python -m benchmarks.bench_report` (writes `benchmarks/results/report.json`);
`--workloads million pip82 pip82_50` for the growth. `--master spark://HOST:PORT` measures both on a Spark
cluster instead (a standalone one: see docs/reports.md) and writes `benchmarks/results/report-cluster.json`.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from allocator.policies.waterfill import max_min_fair
from benchmarks.common import ROOT, command_line, cpu_s, descendants, loadavg_1m, results_path, save_results
from experiments.report import class_archive

RESULTS = results_path("report")
CLUSTER_RESULTS = results_path("report-cluster")  # with --master other than MASTER
MASTER = "local[2]"
SCALE_ROUNDS = {"pip82": 15, "pip82_50": 50}
DEFAULT_WORKLOADS = ["demo", "million", "pip82"]
WORKLOADS = {"demo": {"runs": 3, "brokers": 5, "groups": 3, "rounds": 60},
             "million": {"runs": 1, "brokers": 20, "groups": 250, "rounds": 200}}  # fmt: skip
TARGETS = {"report_over_peer": 3.0, "driver_rss_gib": 2.0, "report_html_mb": 5.0, "summary_json_mb": 5.0,
           "growth_over_linear": 1.2}  # fmt: skip
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


PEER_JOB = """
import sys
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.master(sys.argv[1]).config("spark.ui.enabled", "false").getOrCreate()
rounds = spark.read.parquet(*sys.argv[3:])
per_round = rounds.groupBy("round", "group").agg(F.sum("usage").alias("usage"), F.sum("limit").alias("limit"))
per_group = per_round.groupBy("group").agg(*(f(c).alias(f"{f.__name__}_{c}") for f in (F.max, F.avg)
                                             for c in ("usage", "limit")))
per_group.write.mode("overwrite").parquet(sys.argv[2])
spark.stop()
"""


RECORD_CLASS_ARCHIVE = """
from experiments.report.session import spark_session
spark_session("local[1]", record_classes=True).range(3).count()
"""


def class_archive_ready() -> None:
    """Spark's class archive recorded, if this machine has none yet, and its JVM waited for (`report.class_archive`):
    every report but a machine's first starts from it, and a JVM writing it would take a core from a measurement."""
    archive = class_archive.this_machines_archive()
    subprocess.run([sys.executable, "-c", RECORD_CLASS_ARCHIVE], cwd=ROOT, check=True, capture_output=True)
    while class_archive.recording_jvm(archive) is not None:
        time.sleep(0.2)
    # the next start keeps the recording as the archive


def measured(command: list[str], cwd: Path) -> dict[str, float]:
    """Wall seconds of `command` in a fresh process; the peak RSS (GiB) of it and of its JVM, and the CPU seconds
    of all its processes (the last sample of each, every 0.2 s: a process's last 0.2 s are missed), sampled. On
    a machine another job loads, the CPU seconds of the report and of the peer still compare. On a cluster the
    executors are the cluster's processes, not the command's: the CPU seconds are the driver's only."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peaks = {"driver_rss_gib": 0.0, "jvm_rss_gib": 0.0}
    cpu_s_by_pid: dict[int, float] = {}
    while process.poll() is None:
        for pid in [process.pid, *descendants(process.pid)]:
            key = "driver_rss_gib" if pid == process.pid else "jvm_rss_gib"
            peaks[key] = max(peaks[key], _rss_gib(pid))
            cpu_s_by_pid[pid] = max(cpu_s_by_pid.get(pid, 0.0), cpu_s(pid))
        time.sleep(0.2)
    wall_s = time.perf_counter() - start
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {process.stderr.read()[-2000:]}")
    return {"wall_s": wall_s, "cpu_s": sum(cpu_s_by_pid.values()), **peaks}


def _rss_gib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def scale_run(scratch: Path, rounds: int) -> Path:
    """A run of the shipped scale-pip82 scenario of `rounds` rounds (in-process backend)."""
    out = scratch / f"pip82-{rounds}"
    command = [sys.executable, "-m", "experiments", "run", "scale-pip82", "--backend", "local", "--rounds",
               str(rounds), "--out", str(out)]  # fmt: skip
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    return out


def workload_runs(name: str, scratch: Path) -> tuple[list[Path], dict]:
    """The run directories of workload `name`, and its shape."""
    if name.startswith("pip82"):
        rounds = SCALE_ROUNDS[name]
        return [scale_run(scratch, rounds)], {"runs": 1, "scenario": "scale-pip82", "rounds": rounds}
    shape = WORKLOADS[name]
    run_dirs = [scratch / name / f"run-{index}" for index in range(shape["runs"])]
    for index, run_dir in enumerate(run_dirs):
        write_synthetic_run(run_dir, shape["brokers"], shape["groups"], shape["rounds"], seed=82 + index)
    return run_dirs, dict(shape)


def growth(measured: dict, small: str = "pip82", large: str = "pip82_50") -> dict:
    """How the cost grows from workload `small` to `large`, measured in the same run: each cost's ratio over
    the rows' (linear = 1), for the report and for the plain job."""
    rows_ratio = measured[large]["rounds_rows"] / measured[small]["rounds_rows"]
    return {
        "from": small,
        "to": large,
        "rows_ratio": round(rows_ratio, 3),
        **{
            f"{label}_over_linear": round(measured[large][f"{label}_s"] / measured[small][f"{label}_s"] / rows_ratio, 2)
            for label in ("report", "peer")
        },
    }


def run(repeat: int = 1, workloads: list[str] | None = None, master: str = MASTER) -> dict:
    """Measure each workload (default: demo, million, pip82) `repeat` times, report and peer on `master`; save
    and print."""
    workloads = workloads or DEFAULT_WORKLOADS
    result: dict = {"master": master, "repeat": repeat, "targets": TARGETS, "workloads": {}}
    class_archive_ready()
    load_before = loadavg_1m()
    with tempfile.TemporaryDirectory(prefix="bench-report-") as scratch_name:
        scratch = Path(scratch_name)
        peer_script = scratch / "peer.py"
        peer_script.write_text(PEER_JOB)
        for name in workloads:
            run_dirs, shape = workload_runs(name, scratch)
            rows = sum(pq.ParquetDataset(run_dir / "rounds").read(columns=["round"]).num_rows for run_dir in run_dirs)
            samples: dict[str, list[dict[str, float]]] = {"report": [], "peer": []}
            for attempt in range(repeat):
                out = scratch / f"{name}-report-{attempt}"
                report = [sys.executable, "-m", "experiments", "report", *map(str, run_dirs), "--out", str(out),
                          "--master", master]  # fmt: skip
                samples["report"].append(measured(report, ROOT))
                samples["report"][-1] |= {
                    "report_html_mb": (out / "report.html").stat().st_size / 1e6,
                    "summary_json_mb": (out / "summary.json").stat().st_size / 1e6,
                }
                parts = [str(run_dir / "rounds") for run_dir in run_dirs]
                peer = [sys.executable, str(peer_script), master, str(scratch / f"{name}-peer-{attempt}"), *parts]
                samples["peer"].append(measured(peer, ROOT))
                took = {label: values[-1]["wall_s"] for label, values in samples.items()}
                cpu = {label: values[-1]["cpu_s"] for label, values in samples.items()}
                print(f"{name}: report {took['report']:.1f} s ({cpu['report']:.0f} s CPU), peer {took['peer']:.1f} s "
                      f"({cpu['peer']:.0f} s CPU)", flush=True)  # fmt: skip
            report_s = statistics.median(sample["wall_s"] for sample in samples["report"])
            peer_s = statistics.median(sample["wall_s"] for sample in samples["peer"])
            report_cpu_s = statistics.median(sample["cpu_s"] for sample in samples["report"])
            peer_cpu_s = statistics.median(sample["cpu_s"] for sample in samples["peer"])
            result["workloads"][name] = {
                **shape,
                "rounds_rows": rows,
                "report_s": round(report_s, 2),
                "peer_s": round(peer_s, 2),
                "report_over_peer": round(report_s / peer_s, 2),
                "report_cpu_s": round(report_cpu_s, 1),
                "peer_cpu_s": round(peer_cpu_s, 1),
                "report_over_peer_cpu": round(report_cpu_s / peer_cpu_s, 2),
                "report_seconds_per_million_rows": round(report_s / (rows / 1e6), 2),
                "driver_rss_gib": round(max(sample["driver_rss_gib"] for sample in samples["report"]), 3),
                "jvm_rss_gib": round(max(sample["jvm_rss_gib"] for sample in samples["report"]), 3),
                "report_html_mb": round(max(sample["report_html_mb"] for sample in samples["report"]), 3),
                "summary_json_mb": round(max(sample["summary_json_mb"] for sample in samples["report"]), 3),
                "all_s": {label: [round(s["wall_s"], 2) for s in values] for label, values in samples.items()},
                "all_cpu_s": {label: [round(s["cpu_s"], 1) for s in values] for label, values in samples.items()},
            }
    if {"pip82", "pip82_50"} <= result["workloads"].keys():
        result["growth"] = growth(result["workloads"])
    result.update(
        load_average_1m={"before": round(load_before, 2), "after": round(loadavg_1m(), 2)},
        cpus=os.cpu_count(),
        python=platform.python_version(),
        pyspark=version("pyspark"),
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )
    save_results(RESULTS if master == MASTER else CLUSTER_RESULTS, result, announce=False)
    for name, measured_ in result["workloads"].items():
        print(
            f"{name} ({measured_['rounds_rows']:,} rounds rows): report {measured_['report_s']:.1f} s, plain Spark "
            f"job {measured_['peer_s']:.1f} s: {measured_['report_over_peer']}x (target <= "
            f"{TARGETS['report_over_peer']}x; CPU {measured_['report_cpu_s']:.0f} s against "
            f"{measured_['peer_cpu_s']:.0f} s: {measured_['report_over_peer_cpu']}x); driver RSS "
            f"{measured_['driver_rss_gib']:.2f} GiB, JVM {measured_['jvm_rss_gib']:.2f} GiB; report.html "
            f"{measured_['report_html_mb']:.2f} MB, summary.json {measured_['summary_json_mb']:.2f} MB"
        )
    if "growth" in result:
        print(
            f"growth {result['growth']['from']} -> {result['growth']['to']} ({result['growth']['rows_ratio']}x the "
            f"rows): report {result['growth']['report_over_linear']}x linear (target <= "
            f"{TARGETS['growth_over_linear']}x), plain job {result['growth']['peer_over_linear']}x"
        )
    return result


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument("--repeat", type=int, default=1, help="measurements per workload (median kept)")
    parser.add_argument("--workloads", nargs="+", choices=[*WORKLOADS, *SCALE_ROUNDS], default=DEFAULT_WORKLOADS)
    parser.add_argument("--master", default=MASTER, help=f"Spark master for both jobs (default {MASTER}; another "
                        "writes results/report-cluster.json)")  # fmt: skip
    arguments = parser.parse_args()
    run(arguments.repeat, arguments.workloads, arguments.master)
