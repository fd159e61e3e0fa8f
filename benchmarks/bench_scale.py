"""PIP-82's size on this machine: start-up, rounds per second, memory and bytes per round.

`experiments/scenarios/scale-pip82.yaml`: 100 brokers, 100,000 groups on 5 brokers each (5,000 groups a
broker), lockstep, telemetry written, as `quotalab run` runs it. Each configuration runs in a child process
of its own, so its peak RSS is its own (on Ray, the actor processes' RSS is sampled from /proc and added):

- `local` with `interest` routing (the scenario as shipped) and with `broadcast` (every report to every
  subscriber of its shard, for comparison), and `ray` with `interest` and 10 brokers per actor;
- ready: from reading the scenario to the end of round 0 (every broker started and through one round);
- steady state: rounds per second over whole cycles of the forced report after round 5 (the scenario's 15
  rounds hold two: rounds 5-14 with `force_every: 5`): a forced round and the one after it carry most
  entries, so a window of part of a cycle would weigh them more or less than a long run does;
- bytes published and delivered per round over the same rounds, next to PIP-82's estimate (56 MB published,
  5.6 GB consumed).

Targets: ready <= 30 s; local >= 2 rounds/s; Ray's steady round within 2x of local's; peak RSS <= 2 GiB;
with interest routing, published <= 5.6 MB and delivered <= 56 MB a round. `--quick` runs 20 brokers x
20,000 groups (the same 5,000 groups a broker), local only, so a regression shows in a minute.

Run from the repository root: `python -m benchmarks.bench_scale [--quick]` (writes
`benchmarks/results/scale.json`).
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
from typing import Any

import numpy as np

from actors.hosts.backends import make_backend
from benchmarks.bench_runtime import message_bytes, stamped_lockstep
from benchmarks.common import ROOT, descendants, environment, load_since, loadavg_1m, results_path, save_results
from experiments.planner import build_plan
from experiments.scenario import load_scenario

RESULTS = results_path("scale")
SCENARIO = ROOT / "experiments" / "scenarios" / "scale-pip82.yaml"
PIP82_PUBLISHED_BYTES = 56e6  # PIP-82's estimate per round: 100 brokers x 5,000 namespaces
PIP82_CONSUMED_BYTES = 5.6e9  # ... each report read by the 99 other brokers
WARMUP_ROUNDS = 5
TARGETS = {
    "ready_s": 30.0,
    "local_rounds_per_s": 2.0,
    "ray_vs_local": 2.0,
    "peak_rss_bytes": 2 * 2**30,
    "published_per_round": PIP82_PUBLISHED_BYTES / 10,
    "delivered_per_round": PIP82_CONSUMED_BYTES / 100,
}
FULL = {"brokers": 100, "groups": 100_000}
QUICK = {"brokers": 20, "groups": 20_000}
CONFIGURATIONS = (("local", "interest"), ("local", "broadcast"), ("ray", "interest"))


# --- one configuration, in a child process ---------------------------------------------------------------


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
            self.peak = max(self.peak, sum(_rss_bytes(pid) for pid in descendants(os.getpid())))


def child(backend_name: str, routing: str, rounds: int | None, size: dict[str, int]) -> dict[str, Any]:
    """One configuration: scenario, plan, backend and run, timed from the first step."""
    start = time.perf_counter()
    overrides = {
        "backend": backend_name,
        "channel.routing": routing,
        "generated.brokers": size["brokers"],
        "generated.groups": size["groups"],
    }
    scenario = load_scenario(SCENARIO, overrides | ({} if rounds is None else {"rounds": rounds}))
    steady_rounds = steady_window(scenario.reporting.force_every, scenario.rounds)
    plan = build_plan(scenario)
    planned_s = time.perf_counter() - start
    backend = make_backend(backend_name)
    with tempfile.TemporaryDirectory(prefix="quotalab-bench-scale-") as directory, _RssSampler() as sampler:
        _, stamps, run_dir = stamped_lockstep(directory, plan, backend)
        bytes_per_round = message_bytes(run_dir, WARMUP_ROUNDS, WARMUP_ROUNDS + steady_rounds)
    if backend_name == "ray":
        import ray

        ray.shutdown()
    round_ends = np.array(stamps) - start
    steady_s = np.diff(round_ends[WARMUP_ROUNDS - 1 :])[:steady_rounds]
    self_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "backend": backend_name,
        "routing": routing,
        **size,
        "brokers_per_actor": plan.brokers_per_actor if backend_name == "ray" else None,
        "rounds": len(stamps),
        "planned_s": planned_s,
        "ready_s": float(round_ends[0]),
        "round_s": [float(s) for s in np.diff(round_ends)],
        "steady_rounds": len(steady_s),
        "steady_rounds_per_s": float(len(steady_s) / steady_s.sum()),
        "peak_rss_bytes": self_rss + sampler.peak,
        "bytes": bytes_per_round,
    }


def steady_window(force_every: int, rounds: int) -> int:
    """Rounds measured for the steady state: as many whole cycles of the forced report as `rounds` holds
    after the warm-up, or every round after the warm-up when it holds none."""
    after_warmup = rounds - WARMUP_ROUNDS
    cycles = after_warmup // force_every
    return cycles * force_every if cycles else after_warmup


# --- the driver -----------------------------------------------------------------------------------------


def _in_child(backend_name: str, routing: str, rounds: int | None, quick: bool, timeout_s: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.bench_scale", "--child", backend_name, routing]
    command += [] if rounds is None else ["--rounds", str(rounds)]
    command += ["--quick"] if quick else []
    load = loadavg_1m()
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the child and the Ray processes it started
        process.communicate()
        return {"status": "timeout", "timeout_s": timeout_s}
    if process.returncode != 0:
        return {"status": f"failed ({process.returncode})", "stderr": stderr[-3000:]}
    return {**json.loads(stdout.strip().splitlines()[-1]), "status": "complete", "loadavg_1m": load_since(load)}


def _targets(runs: dict[str, dict[str, Any]], quick: bool) -> dict[str, bool]:
    """Which targets each complete configuration meets (`ray_vs_local`: Ray's steady round time over local's)."""
    local, ray = runs.get("local/interest", {}), runs.get("ray/interest", {})
    met: dict[str, bool] = {}
    if local.get("status") == "complete":
        met["ready_s"] = local["ready_s"] <= TARGETS["ready_s"]
        met["local_rounds_per_s"] = local["steady_rounds_per_s"] >= TARGETS["local_rounds_per_s"]
        met["peak_rss_bytes"] = local["peak_rss_bytes"] <= TARGETS["peak_rss_bytes"]
        if not quick:
            for key in ("published_per_round", "delivered_per_round"):
                met[key] = local["bytes"][key] <= TARGETS[key]
    if local.get("status") == "complete" and ray.get("status") == "complete":
        met["ray_vs_local"] = local["steady_rounds_per_s"] / ray["steady_rounds_per_s"] <= TARGETS["ray_vs_local"]
    return met


def run(
    quick: bool = False, rounds: int | None = None, timeout_s: float = 900.0, no_ray: bool = False
) -> dict[str, Any]:
    """Every configuration (local only with `quick` or `no_ray`), each in its own process."""
    configurations = [(b, r) for b, r in CONFIGURATIONS if not ((quick or no_ray) and b == "ray")]
    if quick:
        configurations = [("local", "interest")]
    runs = {f"{b}/{r}": _in_child(b, r, rounds, quick, timeout_s) for b, r in configurations}
    return {
        "scenario": str(SCENARIO.relative_to(ROOT)),
        "size": QUICK if quick else FULL,
        "warmup_rounds": WARMUP_ROUNDS,
        "targets": TARGETS,
        "runs": runs,
        "met": _targets(runs, quick),
        "pip82_estimate": {"published_bytes": PIP82_PUBLISHED_BYTES, "consumed_bytes": PIP82_CONSUMED_BYTES},
        "cpus": os.cpu_count(),
        **environment("numpy", "pyarrow", "msgpack"),
    }


def _table(result: dict[str, Any]) -> str:
    size = result["size"]
    lines = [
        f"{size['brokers']} brokers x {size['groups']:,} groups, 5 brokers a group; steady state after round"
        f" {result['warmup_rounds']}",
        f"{'configuration':<18} {'ready s':>8} {'rounds/s':>9} {'peak RSS':>9} {'published/round':>16}"
        f" {'delivered/round':>16}   load",
    ]
    for name, row in result["runs"].items():
        if row["status"] != "complete":
            lines.append(f"{name:<18} {row['status']}")
            continue
        load = row["loadavg_1m"]
        lines.append(
            f"{name:<18} {row['ready_s']:>8.1f} {row['steady_rounds_per_s']:>9.2f}"
            f" {row['peak_rss_bytes'] / 2**30:>7.2f} G {row['bytes']['published_per_round'] / 1e6:>13.2f} MB"
            f" {row['bytes']['delivered_per_round'] / 1e6:>13.2f} MB   {load['before']:.1f}->{load['after']:.1f}"
        )
    lines.append("targets: " + ", ".join(f"{key} {'met' if ok else 'MISSED'}" for key, ok in result["met"].items()))
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 brokers x 20,000 groups, local only")
    parser.add_argument("--no-ray", action="store_true", help="local backend only")
    parser.add_argument("--rounds", type=int, help="rounds per run (default: the scenario's, 15)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per configuration (default 900)")
    parser.add_argument("--child", nargs=2, metavar=("BACKEND", "ROUTING"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.rounds, QUICK if args.quick else FULL)))
        sys.exit(0)
    result = run(args.quick, args.rounds, args.timeout, args.no_ray)
    save_results(RESULTS, result, _table(result))
