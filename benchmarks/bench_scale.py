"""PIP-82's size and ten times the brokers on this machine: start-up, rounds per second, memory, reports and bytes.

`experiments/scenarios/scale-pip82.yaml`: 100 brokers, 100,000 groups on 5 brokers each (5,000 groups a
broker), lockstep, telemetry written, as `quotalab run` runs it. Each configuration runs in a child process
of its own, so its peak RSS is its own (on Ray, the actor processes' RSS is sampled from /proc and added).
Both policies, `fair-share-safe` (the scenario's) and `pip82-proportional` (the reference), with the same
figures for each:

- `local` with `interest` routing (the scenario as shipped) and with `broadcast` (every report to every
  subscriber of its shard, for comparison), and `ray` with `interest` and 10 brokers per actor;
- ready: from reading the scenario to the end of round 0 (every broker started and through one round);
- steady state: rounds per second over whole cycles of the forced report after round 5 (the scenario's 15
  rounds hold two: rounds 5-14 with `force_every: 5`): a forced round and the one after it carry most
  entries, so a window of part of a cycle would weigh them more or less than a long run does;
- reports, bytes published and delivered per round over the same rounds (and at the start, round 0), next to
  PIP-82's estimate (56 MB published, 5.6 GB consumed); the worst group's usage over its quota in any round.

Ten times the brokers (`tenfold`): 1,000 brokers x the same 100,000 groups (5 brokers each, 500 a broker),
fair-share-safe, local, with an inbox per broker (`brokers_per_inbox: 1`, as shipped) and with 10 brokers
sharing an inbox (one report per inbox, read by all 10). `profile`: fair-share-safe's steady rounds at PIP-82's
size under cProfile, in a run of its own (`PROFILED`: the share of each part). `cost_model`: what docs/scale.md
derives from the local fair-share-safe runs (with a third size, 20 brokers x 20,000 groups): bytes per group
entry and per report (from the codec), memory per group entry and per peer (the arrays of the brokers' nodes),
CPU per group entry held, per broker and per report delivered, and the telemetry writer's CPU per row.

Targets (issue 42): fair-share-safe local >= 5 rounds/s, Ray >= 3 rounds/s, ready <= 10 s, peak RSS <= 1.5
GiB local, published bytes per round <= 1.5x pip82-proportional's, no round over the quota; at 1,000 brokers
the bytes per round within 2x of those at 100. `--quick` runs 20 brokers x 20,000 groups (the same 5,000
groups a broker), local only, so a regression shows in a minute (written to `scale_quick.json`, apart from the
figures the docs quote).

Run from the repository root: `python -m benchmarks.bench_scale [--quick] [--no-ray] [--no-tenfold]` (writes
`benchmarks/results/scale.json`; `python -m benchmarks.docs_figures` then rewrites the figures in the docs).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
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

from actors.drivers.lockstep import run_lockstep
from actors.hosts.backends import LocalBackend, make_backend
from actors.hosts.broker_host import BrokerHost
from allocator.wire.codec import decode_batch, encode_report
from allocator.wire.usage_report import UsageReport
from benchmarks.bench_runtime import message_bytes, writer_for
from benchmarks.common import (
    ROOT,
    command_line,
    descendants,
    environment,
    load_since,
    loadavg_1m,
    results_path,
    save_results,
)
from experiments.planner import build_plan
from experiments.scenario import load_scenario

RESULTS = results_path("scale")
QUICK_RESULTS = results_path("scale_quick")  # a quick check never replaces the figures the docs quote
SCENARIO = ROOT / "experiments" / "scenarios" / "scale-pip82.yaml"
PIP82_PUBLISHED_BYTES = 56e6  # PIP-82's estimate per round: 100 brokers x 5,000 namespaces
PIP82_CONSUMED_BYTES = 5.6e9  # ... each report read by the 99 other brokers
WARMUP_ROUNDS = 5
POLICIES = ("fair-share-safe", "pip82-proportional")  # the scenario's, and the reference it is compared with
TARGETS = {
    "ready_s": 10.0,
    "local_rounds_per_s": 5.0,
    "ray_rounds_per_s": 3.0,
    "peak_rss_bytes": 1.5 * 2**30,
    "published_vs_reference": 1.5,  # fair-share-safe's bytes published per round over pip82-proportional's
    "over_quota": 1.0,  # the worst group's usage over its quota, in any round, beyond the float32 rates' rounding
    # (met: no round where the quota telemetry says `over_quota`)
    "tenfold_published_vs_100": 2.0,  # bytes published per round at 1,000 brokers over those at 100
}
FULL = {"brokers": 100, "groups": 100_000}
QUICK = {"brokers": 20, "groups": 20_000}
TENFOLD = {"brokers": 1000, "groups": 100_000}
TENFOLD_INBOXES = (1, 10)  # brokers per inbox at 1,000 brokers
ROUTINGS = ("interest", "broadcast")  # on the local backend; on Ray, interest


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


class _KeepingBackend(LocalBackend):
    """The local backend, keeping what it creates: the hosts' nodes, whose arrays `node_bytes` sizes."""

    def __init__(self) -> None:
        self.created: list[Any] = []

    def create(self, cls: type, *args: Any) -> Any:
        created = super().create(cls, *args)
        self.created.append(created)
        return created


def child(
    policy: str,
    backend_name: str,
    routing: str,
    rounds: int | None,
    size: dict[str, int],
    brokers_per_inbox: int = 1,
    profile: bool = False,
) -> dict[str, Any]:
    """One configuration: scenario, plan, backend and run, timed from the first step; with `profile`, the steady
    rounds run under cProfile and the result holds where their time went (`PROFILED`) instead of timings."""
    start = time.perf_counter()
    overrides = {
        "policy.name": policy,
        "backend": backend_name,
        "channel.routing": routing,
        "channel.brokers_per_inbox": brokers_per_inbox,
        "generated.brokers": size["brokers"],
        "generated.groups": size["groups"],
    }
    scenario = load_scenario(SCENARIO, overrides | ({} if rounds is None else {"rounds": rounds}))
    steady_rounds = steady_window(scenario.reporting.force_every, scenario.rounds)
    plan = build_plan(scenario)
    planned_s = time.perf_counter() - start
    backend = _KeepingBackend() if backend_name == "local" else make_backend(backend_name)
    stamps: list[float] = []  # each round's end, wall clock
    cpu_stamps: list[tuple[float, float]] = [(time.thread_time(), time.process_time())]  # main thread, process
    with tempfile.TemporaryDirectory(prefix="quotalab-bench-scale-") as directory:
        with _RssSampler() as sampler:
            writer = writer_for(directory, plan, backend_name)

            profiler = cProfile.Profile()

            def on_round(round_index: int) -> None:
                stamps.append(time.perf_counter())
                cpu_stamps.append((time.thread_time(), time.process_time()))
                if profile and round_index == WARMUP_ROUNDS - 1:
                    profiler.enable()
                elif round_index == WARMUP_ROUNDS + steady_rounds - 1:
                    profiler.disable()

            try:
                run_lockstep(plan, backend, writer, on_round=on_round)
            finally:
                writer.close("complete")
            # the run's peak, before its telemetry is read back below: reading a run's rows takes memory that grows
            # with its rounds (45 rounds at PIP-82's size: 1.8 GiB against 1.3 for 15), which a run never spends
            self_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        run_dir = writer.run_dir
        window = (WARMUP_ROUNDS, WARMUP_ROUNDS + steady_rounds)
        bytes_per_round = message_bytes(run_dir, *window)
        traffic = _traffic(run_dir, window)
        worst_over_quota = _worst_over_quota(run_dir)
    if backend_name == "ray":
        import ray

        ray.shutdown()
    round_ends = np.array(stamps) - start
    steady_s = np.diff(round_ends[WARMUP_ROUNDS - 1 :])[:steady_rounds]
    if profile:
        return {"policy": policy, **size, "steady_rounds": len(steady_s), "shares": _profile_shares(profiler, steady_s)}
    return {
        "policy": policy,
        "backend": backend_name,
        "routing": routing,
        **size,
        "brokers_per_inbox": brokers_per_inbox,
        "brokers_per_actor": plan.brokers_per_actor if backend_name == "ray" else None,
        "rounds": len(stamps),
        "planned_s": planned_s,
        "ready_s": float(round_ends[0]),
        "round_s": [float(s) for s in np.diff(round_ends)],
        "steady_rounds": len(steady_s),
        "steady_rounds_per_s": float(len(steady_s) / steady_s.sum()),
        # CPU seconds per steady round, less moved by other jobs on the machine than the wall clock: the main
        # thread's (every broker, on the local backend) and the process's (also the telemetry writer's thread)
        "cpu_s_per_round": _steady_cpu(cpu_stamps, window, traffic.pop("published_by_round")),
        "peak_rss_bytes": self_rss + sampler.peak,
        "bytes": bytes_per_round,
        **traffic,
        "worst_over_quota": worst_over_quota,
        "telemetry_rows_per_round": worst_over_quota.pop("rows_per_round"),
        "node_bytes": _node_bytes(backend) if backend_name == "local" else None,
    }


PROFILED = {  # what a profiled round is split into: (file, function) whose cumulative time is counted
    "policy's allocation (its hooks)": ("allocator/node/broker_node.py", "allocate"),
    "receive: decode": ("allocator/node/report_reader.py", "decode"),
    "receive: merge into the usage table": ("allocator/node/usage_table.py", "merge_many"),
    "receive: all (decode, merge, loss meter, relay)": ("allocator/node/broker_node.py", "receive"),
    "reports built and encoded": ("allocator/node/broker_node.py", "build_reports"),
    "traffic through the buckets": ("allocator/node/broker_node.py", "admit"),
    "roster from the registry": ("allocator/node/broker_node.py", "update_roster"),
    "cleanup (deaths, expiry)": ("allocator/node/broker_node.py", "cleanup"),
    "telemetry rows": ("actors/hosts/broker_host.py", "rows"),
    "quota tracker (telemetry)": ("actors/telemetry/quota_tracker.py", "update"),
    "channel (publish, deliver)": ("actors/transport/channel.py", "exchange"),
    "waiting for the telemetry writer": ("actors/telemetry/writer.py", "flush"),
}


def _profile_shares(profiler: cProfile.Profile, steady_s: np.ndarray) -> dict[str, float]:
    """The share of the profiled rounds' wall time each part of `PROFILED` took (cumulative: parts may nest)."""
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total_s = float(steady_s.sum())
    shares = {}
    for part, (path, function) in PROFILED.items():
        seconds = sum(entry[3] for (file, _, name), entry in stats.items() if file.endswith(path) and name == function)
        shares[part] = seconds / total_s
    return shares


def _steady_cpu(
    cpu_stamps: list[tuple[float, float]], window: tuple[int, int], published_by_round: np.ndarray
) -> dict[str, float]:
    """CPU seconds a round over `window`, of the main thread and of the process; and the main thread's in the
    rounds of the forced report (those that publish at least half the most any round of the window did: most
    groups' entries, received, decoded and merged by every owner) and in the others."""
    per_round = np.diff(np.array(cpu_stamps), axis=0)[window[0] : window[1]]
    main, process = per_round.mean(axis=0)
    forced = published_by_round >= 0.5 * published_by_round.max()
    return {
        "main_thread": float(main),
        "process": float(process),
        "main_thread_forced_rounds": float(per_round[forced, 0].mean()),
        "main_thread_other_rounds": float(per_round[~forced, 0].mean()) if (~forced).any() else float("nan"),
    }


def _traffic(run_dir: Path, window: tuple[int, int]) -> dict[str, Any]:
    """Reports published per round over `window` and at the start (round 0), with the bytes published then; the
    bytes published in each round of `window` (`published_by_round`)."""
    messages = ds.dataset(run_dir / "messages", format="parquet").to_table().to_pandas()
    per_round = messages.groupby("round")[["reports_sent", "bytes_published"]].sum()
    steady = per_round.loc[window[0] : window[1] - 1]
    return {
        "reports_per_round": float(steady["reports_sent"].mean()),
        "start": {key: float(value) for key, value in per_round.loc[0].items()},
        "published_by_round": steady["bytes_published"].to_numpy(dtype=np.float64),
    }


def _worst_over_quota(run_dir: Path) -> dict[str, float]:
    """The telemetry rows a round wrote; the largest group usage over its quota in any round (1.0: at the quota),
    and the rounds with a group over it as the quota telemetry says (`over_quota`: beyond the float32 rates'
    rounding, when the wire carries them)."""
    rounds = ds.dataset(run_dir / "rounds", format="parquet")
    table = rounds.to_table(columns=["round", "group_usage_fraction_of_quota", "over_quota"]).to_pandas()
    per_round = table.groupby("round").agg({"group_usage_fraction_of_quota": "max", "over_quota": "any"})
    return {
        "fraction": float(per_round["group_usage_fraction_of_quota"].max()),
        "rounds_over": int(per_round["over_quota"].sum()),
        "rows_per_round": len(table) / len(per_round),
    }


def _node_bytes(backend: _KeepingBackend) -> dict[str, float]:
    """The arrays one broker's node holds (every broker's summed, over brokers), with the group entries (group x
    slot of its usage table) and the peers it knows, which docs/scale.md's memory model is fitted to."""
    nodes = [
        logical.node for host in backend.created if isinstance(host, BrokerHost) for logical in host.brokers.values()
    ]
    return {
        "brokers": len(nodes),
        "array_bytes": float(sum(_array_bytes(node) for node in nodes)),
        "entries": float(sum(node.table.slot_broker.size for node in nodes)),
        "peers": float(sum(node.table.n_brokers - 1 for node in nodes)),
    }


def _array_bytes(root: object) -> int:
    """The bytes of every numpy array reachable from `root` through attributes, dicts, lists and tuples (each once;
    the settings, shared by every broker of a host, are left out), plus the Python containers' own sizes."""
    seen: set[int] = set()
    total = 0
    todo: list[Any] = [root]
    while todo:
        item = todo.pop()
        if id(item) in seen or item is None or isinstance(item, int | float | bool | str | type):
            continue
        seen.add(id(item))
        if isinstance(item, np.ndarray):
            total += item.nbytes if item.base is None else 0
        elif isinstance(item, dict):
            total += sys.getsizeof(item)
            todo += [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple | set | frozenset):
            total += sys.getsizeof(item)
            todo += list(item)
        elif hasattr(item, "__dict__"):
            todo += [value for name, value in vars(item).items() if name != "settings"]
    return total


def wire_bytes(float32: bool = True, demand: bool = True) -> dict[str, float]:
    """Bytes of a report on the wire, from the codec: per entry (id, usage and demand) and per report (envelope
    and header), at PIP-82's ids (up to 100,000: 3 bytes) and broker names."""

    def size(n_entries: int) -> int:
        rates = np.full((n_entries, 1), 123.0)
        report = UsageReport(
            "broker-0001", 0, 1000, 1_000_000_000, 60_000, ("publish_msgs_per_s",),
            np.arange(99_000, 99_000 + n_entries), rates, rates if demand else None,
        )  # fmt: skip
        return len(encode_report(report, float32=float32))

    per_entry = (size(1001) - size(1)) / 1000
    return {"per_entry": per_entry, "per_report": size(1) - per_entry}


def steady_window(force_every: int, rounds: int) -> int:
    """Rounds measured for the steady state: as many whole cycles of the forced report as `rounds` holds
    after the warm-up, or every round after the warm-up when it holds none."""
    after_warmup = rounds - WARMUP_ROUNDS
    cycles = after_warmup // force_every
    return cycles * force_every if cycles else after_warmup


# --- the driver -----------------------------------------------------------------------------------------


def _in_child(
    policy: str, backend_name: str, routing: str, size: dict[str, int], brokers_per_inbox: int, rounds: int | None,
    timeout_s: float, profile: bool = False,
) -> dict[str, Any]:  # fmt: skip
    command = [sys.executable, "-m", "benchmarks.bench_scale", "--child", policy, backend_name, routing]
    command += ["--profile"] if profile else []
    command += ["--size", str(size["brokers"]), str(size["groups"]), "--brokers-per-inbox", str(brokers_per_inbox)]
    command += [] if rounds is None else ["--rounds", str(rounds)]
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


def _complete(run: dict[str, Any] | None) -> bool:
    return run is not None and run.get("status") == "complete"


def _targets(runs: dict[str, dict[str, Any]], quick: bool) -> dict[str, bool]:
    """Which targets fair-share-safe's complete configurations meet (issue 42)."""
    local, ray = runs.get("fair-share-safe/local/interest"), runs.get("fair-share-safe/ray/interest")
    reference = runs.get("pip82-proportional/local/interest")
    met: dict[str, bool] = {}
    if _complete(local):
        met["ready_s"] = local["ready_s"] <= TARGETS["ready_s"]
        met["local_rounds_per_s"] = local["steady_rounds_per_s"] >= TARGETS["local_rounds_per_s"]
        met["peak_rss_bytes"] = local["peak_rss_bytes"] <= TARGETS["peak_rss_bytes"]
        met["over_quota"] = local["worst_over_quota"]["rounds_over"] == 0
    if _complete(ray):
        met["ray_rounds_per_s"] = ray["steady_rounds_per_s"] >= TARGETS["ray_rounds_per_s"]
    if _complete(local) and _complete(reference):
        ratio = local["bytes"]["published_per_round"] / reference["bytes"]["published_per_round"]
        met["published_vs_reference"] = ratio <= TARGETS["published_vs_reference"]
    for inboxes in TENFOLD_INBOXES:
        tenfold = runs.get(f"tenfold/inbox-{inboxes}")
        if _complete(local) and _complete(tenfold):
            ratio = tenfold["bytes"]["published_per_round"] / local["bytes"]["published_per_round"]
            met[f"tenfold_published_vs_100/inbox-{inboxes}"] = ratio <= TARGETS["tenfold_published_vs_100"]
    return met


def cost_model(runs: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """What docs/scale.md derives from fair-share-safe's local runs with interest routing (at least two sizes):
    bytes per group entry and per report on the wire (the codec); memory per group entry (a group x slot of a
    broker's usage table) and per peer a broker knows, fitted to the arrays of every run's nodes; the CPU to decode
    a report, timed on the codec itself; the main thread's CPU a steady round less its reports' decoding, fitted as
    a time per group entry held (group x owner) and per broker; and the telemetry writer's CPU per row."""
    fitted = [
        run
        for key, run in runs.items()
        if _complete(run)
        and run["policy"] == POLICIES[0]
        and run["backend"] == "local"
        and run["routing"] == "interest"
    ]
    if len({(run["brokers"], run["groups"]) for run in fitted}) < 2:
        return None

    def delivered_reports(run: dict[str, Any]) -> float:
        published = run["bytes"]["published_per_round"]
        return run["reports_per_round"] * (run["bytes"]["delivered_per_round"] / published if published else 1.0)

    decode_s = decode_seconds_per_report()
    per_round = np.array([[run["groups"] * 5.0, run["brokers"]] for run in fitted])  # every group on 5 brokers
    cpu = [run["cpu_s_per_round"]["main_thread"] - delivered_reports(run) * decode_s for run in fitted]
    seconds = np.linalg.lstsq(per_round, cpu, rcond=None)[0]
    held = [run["node_bytes"]["entries"] for run in fitted]
    peers = [run["node_bytes"]["peers"] for run in fitted]
    array_bytes = [run["node_bytes"]["array_bytes"] for run in fitted]
    memory = np.linalg.lstsq(np.array([held, peers]).T, array_bytes, rcond=None)[0]
    reference = runs.get("fair-share-safe/local/interest")
    writer = None
    if _complete(reference):  # the process's CPU beyond the main thread's: the telemetry writer's thread
        cpu_s = reference["cpu_s_per_round"]
        writer = (cpu_s["process"] - cpu_s["main_thread"]) / reference["telemetry_rows_per_round"]
    return {
        "fitted_runs": [f"{r['brokers']}x{r['groups']}/inbox-{r['brokers_per_inbox']}" for r in fitted],
        "wire_bytes": wire_bytes(),
        "seconds": {"per_entry_held": seconds[0], "per_broker": seconds[1], "per_report_delivered": decode_s},
        "memory_bytes": {"per_entry": memory[0], "per_peer": memory[1]},
        "writer_seconds_per_row": writer,
    }


def numpy_ns_per_element(n_rows: int, passes: int) -> float:
    """The CPU nanoseconds per element of one numpy add over a float64 [n_rows, 5] table (best of 5 timings of
    `passes` adds): the arithmetic a round is made of, so a run's figures can be set against this machine's speed
    at the time (the same commit's round took 0.35 s of CPU one day and 0.50 s another on this shared machine)."""
    table = np.random.default_rng(0).random((n_rows, 5))
    out = np.empty_like(table)
    best_s = np.inf
    for _ in range(5):
        start_s = time.thread_time()
        for _ in range(passes):
            np.add(table, 1.0, out=out)
        best_s = min(best_s, time.thread_time() - start_s)
    return best_s / (passes * table.size) * 1e9


def machine_speed() -> dict[str, float]:
    """`numpy_ns_per_element` over a broker's table at PIP-82's size (5,000 groups: in the processor's cache) and
    over 500 times as many rows (from memory)."""
    return {"in_cache_ns": numpy_ns_per_element(5_000, 400), "from_memory_ns": numpy_ns_per_element(2_500_000, 4)}


def decode_seconds_per_report(n_reports: int = 5000, entries: int = 4) -> float:
    """Thread CPU seconds to decode one report of `entries` entries (a 1,000-broker cluster's ~4), in a batch of
    `n_reports` from as many brokers (`decode_batch`, as a broker reads its inbox); the best of three."""
    rates = np.full((entries, 1), 123.0)
    payloads = [
        encode_report(
            UsageReport(f"broker-{i:04d}", 0, 7, 1_000_000_000, 60_000, ("publish_msgs_per_s",),
                        np.arange(i, i + entries), rates, rates),
            float32=True,
        )
        for i in range(n_reports)
    ]  # fmt: skip
    best_s = np.inf
    for _ in range(3):
        start_s = time.thread_time()
        decode_batch(payloads, ("publish_msgs_per_s",))
        best_s = min(best_s, time.thread_time() - start_s)
    return best_s / n_reports


def run(
    quick: bool = False, rounds: int | None = None, timeout_s: float = 1800.0, no_ray: bool = False,
    no_tenfold: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Every configuration, each in its own process (with `quick`: fair-share-safe, local, interest, small)."""
    size = QUICK if quick else FULL
    speed_before = machine_speed()
    runs: dict[str, dict[str, Any]] = {}
    for routing in ("interest",) if quick else ROUTINGS:
        for policy in POLICIES[:1] if quick else POLICIES:
            runs[f"{policy}/local/{routing}"] = _in_child(policy, "local", routing, size, 1, rounds, timeout_s)
    profile = _in_child(POLICIES[0], "local", "interest", size, 1, rounds, timeout_s, profile=True)
    if not quick:  # a third size for the cost model: 20 brokers x 20,000 groups
        small = _in_child(POLICIES[0], "local", "interest", QUICK, 1, rounds, timeout_s)
        runs["small/fair-share-safe/local/interest"] = small
    for inboxes in () if quick or no_tenfold else TENFOLD_INBOXES:
        runs[f"tenfold/inbox-{inboxes}"] = _in_child(
            POLICIES[0], "local", "interest", TENFOLD, inboxes, rounds, timeout_s
        )
    for policy in () if quick or no_ray else POLICIES:  # Ray's last: the slowest to start, the most often left out
        runs[f"{policy}/ray/interest"] = _in_child(policy, "ray", "interest", size, 1, rounds, timeout_s)
    return {
        "scenario": str(SCENARIO.relative_to(ROOT)),
        "size": size,
        "tenfold_size": TENFOLD,
        "warmup_rounds": WARMUP_ROUNDS,
        "targets": TARGETS,
        "runs": runs,
        "met": _targets(runs, quick),
        "cost_model": cost_model(runs),
        "profile": profile,
        "pip82_estimate": {"published_bytes": PIP82_PUBLISHED_BYTES, "consumed_bytes": PIP82_CONSUMED_BYTES},
        "cpus": os.cpu_count(),
        "numpy_speed": {"before": speed_before, "after": machine_speed()},
        **environment("numpy", "pyarrow", "msgpack"),
    }


def _table(result: dict[str, Any]) -> str:
    size = result["size"]
    lines = [
        f"{size['brokers']} brokers x {size['groups']:,} groups, 5 brokers a group; steady state after round"
        f" {result['warmup_rounds']}",
        f"{'configuration':<40} {'ready s':>8} {'rounds/s':>9} {'peak RSS':>9} {'reports':>8} {'published':>12}"
        f" {'delivered':>12} {'worst':>6}   load",
    ]
    for name, row in result["runs"].items():
        if row["status"] != "complete":
            lines.append(f"{name:<40} {row['status']}")
            continue
        load = row["loadavg_1m"]
        lines.append(
            f"{name:<40} {row['ready_s']:>8.1f} {row['steady_rounds_per_s']:>9.2f}"
            f" {row['peak_rss_bytes'] / 2**30:>7.2f} G {row['reports_per_round']:>8,.0f}"
            f" {row['bytes']['published_per_round'] / 1e6:>9.2f} MB"
            f" {row['bytes']['delivered_per_round'] / 1e6:>9.2f} MB"
            f" {row['worst_over_quota']['fraction']:>6.3f}   {load['before']:.1f}->{load['after']:.1f}"
        )
    lines.append("targets: " + ", ".join(f"{key} {'met' if ok else 'MISSED'}" for key, ok in result["met"].items()))
    return "\n".join(lines)


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument("--quick", action="store_true", help="20 brokers x 20,000 groups, fair-share-safe, local only")
    parser.add_argument("--no-ray", action="store_true", help="local backend only")
    parser.add_argument("--no-tenfold", action="store_true", help="leave out the 1,000-broker runs")
    parser.add_argument("--rounds", type=int, help="rounds per run (default: the scenario's, 15)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per configuration (default 1800)")
    parser.add_argument("--child", nargs=3, metavar=("POLICY", "BACKEND", "ROUTING"), help=argparse.SUPPRESS)
    parser.add_argument("--size", nargs=2, type=int, metavar=("BROKERS", "GROUPS"), help=argparse.SUPPRESS)
    parser.add_argument("--brokers-per-inbox", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_size = {"brokers": args.size[0], "groups": args.size[1]}
        print(json.dumps(child(*args.child, args.rounds, child_size, args.brokers_per_inbox, args.profile)))
        sys.exit(0)
    result = run(args.quick, args.rounds, args.timeout, args.no_ray, args.no_tenfold)
    save_results(QUICK_RESULTS if args.quick else RESULTS, result, _table(result))
