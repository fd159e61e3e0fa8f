"""How long does a 100-run sweep take on this machine, from the sweep file to report.html?

The sweep: 25 candidates (pip82-steal's `steal_fraction` 0.1 ... 0.9 x `threshold_pct` 2 ... 40) x 4 seeds
= 100 runs of a scenario with 8 brokers and 60 rounds (two groups, 10% report loss rising to 30%, a demand
shift, a crash and a restart), each candidate a Ray Tune trial running its seeds on the in-process backend,
each run measured by the store's Spark session on `local[2]`, then the Spark ranking. The scenario and the
sweep file are written to a temporary folder.

Timed: checking and expanding the sweep file (`plan_s`), the Tune experiment on a fresh local Ray instance
with one trial per CPU (`execute_s`, Ray's start and the store's SparkSession included; `measure_s` of it in
the store's Spark passes), and the ranking and outputs (`rank_s`). `wall_s` is their sum. Also: the mean time
of one run inside its trial, the speed-up of the parallel runs over running them one after the other (sum of
the runs' own times / `execute_s`), and a resume of the complete sweep (`resume_s`, ranking included: Tune
restores the finished experiment, no run runs again).

Run from the repository root: `python -m benchmarks.bench_sweep` (writes `benchmarks/results/sweep.json`).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import command_line, environment, load_since, loadavg_1m, results_path, save_results
from experiments.sweep.expand import plan_sweep
from experiments.sweep.sweep_file import load_sweep
from experiments.sweep.tuning import execute_sweep

RESULTS = results_path("sweep")
MASTER = "local[2]"
BROKERS, ROUNDS = 8, 60
STEAL_FRACTIONS = [0.1, 0.3, 0.5, 0.7, 0.9]
THRESHOLDS = [2, 5, 10, 20, 40]


def base_scenario() -> dict[str, Any]:
    """8 brokers on two groups: every broker in tenant-a, the even ones also in tenant-b."""
    brokers = []
    for index in range(1, BROKERS + 1):
        workload = [{"group": "tenant-a/ns-1", "msgs_per_s": 20 + 10 * index}]
        if index % 2 == 0:
            workload.append({"group": "tenant-b/ns-1", "msgs_per_s": 40})
        brokers.append({"name": f"broker-{index}", "workload": workload})
    return {
        "name": "bench-8-brokers",
        "seed": 1,
        "rounds": ROUNDS,
        "policy": {"name": "pip82-steal", "params": {"steal_fraction": 0.5}},
        "reporting": {"threshold_pct": 10, "force_every": 5},
        "channel": {"loss": 0.1},
        "groups": [
            {"name": "tenant-a/ns-1", "quota": {"publish_msgs_per_s": 400}},
            {"name": "tenant-b/ns-1", "quota": {"publish_msgs_per_s": 120}},
        ],
        "brokers": brokers,
        "events": [
            {"at": 15, "demand": {"broker": "broker-1", "group": "tenant-a/ns-1", "msgs_per_s": 150}},
            {"at": 30, "crash": "broker-4"},
            {"at": 35, "restart": "broker-4"},
            {"at": 45, "channel": {"loss": 0.3}},
        ],
    }


def write_sweep(folder: Path, seeds: int) -> Path:
    (folder / "base.yaml").write_text(yaml.safe_dump(base_scenario(), sort_keys=False))
    sweep = {
        "name": "bench-sweep",
        "base": "base.yaml",
        "seeds": list(range(1, seeds + 1)),
        "grid": {"policy.params.steal_fraction": STEAL_FRACTIONS, "reporting.threshold_pct": THRESHOLDS},
    }  # the default objective: minimize rounds_to_converge, peak_overshoot, bytes published; maximize jain
    path = folder / "bench-sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def run(seeds: int = 4, max_parallel: int | None = None) -> dict[str, Any]:
    """Run the sweep once in a temporary folder and return the timings (see the module docstring)."""
    load_before = loadavg_1m()
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as folder:
        out = Path(folder) / "out"
        start = time.perf_counter()
        plan = plan_sweep(load_sweep(write_sweep(Path(folder), seeds)))
        plan_s = time.perf_counter() - start

        execution, _ = execute_sweep(plan, out, max_parallel=max_parallel, master=MASTER, progress=False, rank=False)
        if execution.failed:
            raise RuntimeError(f"{len(execution.failed)} runs failed, e.g. {next(iter(execution.failed.items()))}")

        start = time.perf_counter()
        resume, results = execute_sweep(plan, out, master=MASTER, progress=False)
        resume_s = time.perf_counter() - start
    return {
        "runs": plan.planned_runs,
        "configurations": plan.candidates,
        "seeds": seeds,
        "brokers": BROKERS,
        "rounds": ROUNDS,
        "cpus": os.cpu_count(),
        "max_parallel": max_parallel,
        "master": MASTER,
        "wall_s": plan_s + execution.wall_s + resume_s,
        "plan_s": plan_s,
        "execute_s": execution.wall_s,
        "measure_s": execution.measure_seconds,
        "run_s_mean": execution.run_seconds / len(execution.ran),
        "parallel_speedup": execution.run_seconds / execution.wall_s,
        "resume_s": resume_s,
        "resume_ran": len(resume.ran),
        "resume_skipped": len(resume.skipped),
        "best": results.summary["best"]["overrides"],
        "pareto_front": len(results.summary["pareto"]),
        "loadavg_1m": load_since(load_before),
        **environment("ray", "pyspark", "pandas"),
    }


if __name__ == "__main__":
    command_line(__doc__).parse_args()
    result = run()
    print(
        f"{result['runs']} runs ({result['configurations']} candidates x {result['seeds']} seeds, "
        f"{result['brokers']} brokers, {result['rounds']} rounds) on {result['cpus']} CPUs: "
        f"{result['wall_s']:.1f} s in all"
    )
    print(
        f"  check and expand {result['plan_s']:.2f} s, Tune {result['execute_s']:.1f} s (measuring "
        f"{result['measure_s']:.1f} s; one run {result['run_s_mean']:.2f} s on average, "
        f"{result['parallel_speedup']:.2f}x over one at a time)"
    )
    print(f"  resume and rank: {result['resume_s']:.1f} s ({result['resume_ran']} runs ran again)")
    print(f"  best: {result['best']}, {result['pareto_front']} on the Pareto front")
    save_results(RESULTS, result)
