"""How long does one allocation take, and one whole broker round, at PIP-82's size (5,000 groups a broker)?

Two measurements, each the median of many repetitions (min and p90 given too):

- `step`: one allocation over 5,000 groups x 5 brokers (every broker present, usages drawn uniformly from
  [50, 400] msgs/s against a quota of 1,000, limits near the usages so some brokers count as throttled), each
  policy called two ways: bound once (`policies.bind(name)`, then the `BoundPolicy` each round, as a broker
  does) and `policies.step(name, ...)`, which binds on every call. The floor, timed in the same run, is the
  plain numpy proportional split `usage / usage.sum(axis=1, keepdims=True) * quota[:, None]`; every median is
  also given as a ratio to it. Target: at most 0.5 ms for `pip82-steal` and `fair-share`, bound and by `step`,
  in the `process` mode (below); the other policies are timed for comparison.
- `round`: one full `BrokerNode` round of one broker hosting 5,000 groups, each shared with the same 4 other
  brokers: `admit`, `build_reports`, `finish_round` on the 4 other brokers' reports.
  Five nodes are built on the same 5,000 groups and warmed up for a few rounds; in every timed round the
  other four run their first phase (their payloads are prepared) before node 0's round is timed, then
  they run their second phase untimed. Offered load is Poisson around a per-(group, broker) mean, so usage
  moves every round. Two reporting settings: `threshold_pct: 0` (every group is reported every round:
  the worst case, 5,000-group reports) and the default 10% threshold (most groups suppressed in a steady
  state). Target: under 10 ms.

Each is measured in three child processes of its own, `process` first:

- `process`: a fresh child process with glibc's malloc untouched: the mode the targets are judged on. glibc
  starts with a 128 KB mmap threshold and raises it (dynamically) to the size of the first mmapped block that is
  freed, so once the first step's 200 KB temporaries are freed, later ones come from the heap.
- `pinned-128k`: both thresholds pinned at 128 KB with `mallopt`, which switches the dynamic threshold off:
  every block over 128 KB (the 200 KB result of a 5,000 x 5 step, any temporary that size) is a new mmap,
  page-faulted in afresh, on every call, forever. The worst case: no real process stays in it. Information only.
- `pinned-32m`: both thresholds pinned at 32 MB, a heap that never maps or trims: a long-running broker.
  Information only.

The median CPU time of the timing thread is given next to the wall-clock figures, and (`cpu x`) as a ratio
to the floor's: what load from elsewhere inflates least.

The machine's load average is recorded with the figures: on a shared machine they are upper bounds.

Run from the repository root: `python -m benchmarks.bench_allocator` (prints a table, writes
`benchmarks/results/allocator.json`); `--step-only` leaves out the rounds, `--step-repeats` and
`--round-repeats` set the repetitions.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from allocator import policies
from allocator.node.broker_node import BrokerNode
from allocator.node.node_settings import NodeSettings
from benchmarks.common import command_line, environment, load_since, loadavg_1m, results_path, save_results, timed_round

RESULTS = results_path("allocator")
GROUPS = 5_000
BROKERS = 5
QUOTA = 1_000.0
STEP_TARGET_MS = 0.5
ROUND_TARGET_MS = 10.0
TARGET_POLICIES = ("pip82-steal", "fair-share")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters
JUDGED_MODE = "process"  # glibc untouched: the mode the targets are judged on
PINNED_THRESHOLDS = {"pinned-128k": 128 * 1024, "pinned-32m": 32 * 1024 * 1024}  # information only
MODES = (JUDGED_MODE, *PINNED_THRESHOLDS)


def _stats(seconds: list[float], cpu_seconds: list[float]) -> dict:
    """Wall-clock statistics, and the median CPU time of this thread (what load from elsewhere inflates least)."""
    ms = np.asarray(seconds) * 1e3
    return {
        "repeats": len(ms),
        "median_ms": float(np.median(ms)),
        "min_ms": float(ms.min()),
        "p90_ms": float(np.percentile(ms, 90)),
        "max_ms": float(ms.max()),
        "median_cpu_ms": float(np.median(cpu_seconds) * 1e3),
    }


def _timed(call: Callable[[], object], repeats: int) -> tuple[list[float], list[float]]:
    """Wall and thread-CPU seconds of `repeats` calls."""
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.thread_time()
        call()
        wall.append(time.perf_counter() - start)
        cpu.append(time.thread_time() - start_cpu)
    return wall, cpu


def step_inputs(groups: int = GROUPS, brokers: int = BROKERS, seed: int = 82) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    usage = rng.uniform(50.0, 400.0, (groups, brokers))
    return {
        "quota": np.full(groups, QUOTA),
        "usage": usage,
        "limit": usage * rng.uniform(0.97, 1.3, (groups, brokers)),  # about a fifth count as throttled
        "present": np.ones((groups, brokers), dtype=bool),
    }


def proportional_floor(quota: np.ndarray, usage: np.ndarray) -> np.ndarray:
    """The plain numpy proportional split: what any policy at least has to compute."""
    return usage / usage.sum(axis=1, keepdims=True) * quota[:, None]


def time_step(groups: int = GROUPS, brokers: int = BROKERS, repeats: int = 500) -> dict[str, dict]:
    """Median time of one allocation: the floor, then every policy bound once and by `policies.step`.

    The calls take turns in batches of 50, `repeats` calls each: a burst of load elsewhere hits one batch, not
    one policy. Rows are named `floor`, `<policy>` (bound) and `<policy> (step)`."""
    inputs = step_inputs(groups, brokers)
    arrays = (inputs["quota"], inputs["usage"], inputs["limit"], None, inputs["present"])
    calls: dict[str, Callable[[], object]] = {"floor": lambda: proportional_floor(inputs["quota"], inputs["usage"])}
    for name in policies.POLICIES:
        bound = policies.bind(name)
        calls[name] = lambda bound=bound: bound(*arrays)
        calls[f"{name} (step)"] = lambda name=name: policies.step(name, **inputs)
    wall: dict[str, list[float]] = {label: [] for label in calls}
    cpu: dict[str, list[float]] = {label: [] for label in calls}
    for call in calls.values():  # warm-up
        call()
    batch = 50
    for _ in range(max(1, repeats // batch)):
        for label, call in calls.items():
            batch_wall, batch_cpu = _timed(call, batch)
            wall[label] += batch_wall
            cpu[label] += batch_cpu
    floor_ms = float(np.median(wall["floor"]) * 1e3)
    rows = {}
    for label in calls:
        row = _stats(wall[label], cpu[label])
        name = label.removesuffix(" (step)")
        rows[label] = {
            **row,
            "ratio_to_floor": row["median_ms"] / floor_ms,
            "target_ms": STEP_TARGET_MS if name in TARGET_POLICIES else None,
        }
    return rows


class _Cluster:
    """`brokers` BrokerNodes sharing the same `groups` groups, driven round by round."""

    def __init__(self, groups: int, brokers: int, policy: str, threshold_pct: float, seed: int = 82):
        settings = NodeSettings(
            dimensions=("publish_msgs_per_s",),
            interval_s=1.0,
            policy=policies.bind(policy),
            threshold_pct=threshold_pct,
        )
        rng = np.random.default_rng(seed)
        group_ids = np.arange(groups, dtype=np.int64)
        names = [f"broker-{i:03d}" for i in range(brokers)]
        self.nodes = [
            BrokerNode(
                name,
                rng.permutation(group_ids),  # each broker lists its groups in its own order
                np.full(groups, QUOTA),
                settings,
                group_names={int(g): f"tenant-{g // 100:04d}/ns-{g:06d}" for g in group_ids},
                known_brokers=names,
            )
            for name in names
        ]
        self.mean = [rng.uniform(50.0, 400.0, groups) for _ in names]  # msgs/s, per node's own row order
        self.msg_bytes = np.full(groups, 1000.0)
        self.rng = rng
        self.round = 0

    def phase1(self, index: int, now_s: float) -> list[bytes]:
        node = self.nodes[index]
        demand = self.rng.poisson(self.mean[index]).astype(np.float64)
        outbox = node.build_reports(node.admit(demand, self.msg_bytes, now_s), now_s)
        return [payload for _, payload in outbox.payloads]

    def phase2(self, index: int, payloads: list[bytes], now_s: float) -> None:
        node = self.nodes[index]
        node.finish_round(payloads, now_s)

    def full_round(self, timed: int | None = None) -> tuple[float, dict[str, float], int]:
        """One round of every node; node `timed`'s own round is timed (after the others' first phase)."""
        self.round += 1
        now_s = float(self.round)
        outgoing: dict[int, list[bytes]] = {}
        for index in range(len(self.nodes)):
            if index != timed:
                outgoing[index] = self.phase1(index, now_s)
        parts: dict[str, float] = {}
        elapsed, reported = 0.0, 0
        if timed is not None:
            inbox = [p for index, payloads in outgoing.items() for p in payloads]
            node = self.nodes[timed]
            demand = self.rng.poisson(self.mean[timed]).astype(np.float64)
            timed_result = timed_round(node, demand, self.msg_bytes, inbox, now_s)
            elapsed = timed_result.seconds["total"]
            parts = {name: value for name, value in timed_result.seconds.items() if name != "total"}
            outbox = timed_result.outbox
            outgoing[timed] = [payload for _, payload in outbox.payloads]
            reported = int(outbox.reported.sum())
        for index in range(len(self.nodes)):
            if index != timed:
                inbox = [p for sender, payloads in outgoing.items() if sender != index for p in payloads]
                self.phase2(index, inbox, now_s)
        return elapsed, parts, reported


def time_round(
    policy: str, threshold_pct: float, groups: int = GROUPS, brokers: int = BROKERS, warmup: int = 5, repeats: int = 60
) -> dict:
    cluster = _Cluster(groups, brokers, policy, threshold_pct)
    for _ in range(warmup):
        cluster.full_round()
    totals: list[float] = []
    parts: dict[str, list[float]] = {}
    report_groups: list[int] = []
    for _ in range(repeats):
        elapsed, split, reported = cluster.full_round(timed=0)
        totals.append(elapsed)
        for name, seconds in split.items():
            parts.setdefault(name, []).append(seconds)
        report_groups.append(reported)
    node = cluster.nodes[0]
    cpu = parts.pop("cpu")
    return {
        "policy": policy,
        "threshold_pct": threshold_pct,
        "groups": groups,
        "brokers": brokers,
        "warmup_rounds": warmup,
        **_stats(totals, cpu),
        "median_parts_ms": {name: float(np.median(s) * 1e3) for name, s in parts.items()},
        "mean_groups_reported": float(np.mean(report_groups)),
        "view_brokers_mean": float(node.table.view_brokers().mean()),
        "target_ms": ROUND_TARGET_MS,
    }


def set_malloc(mode: str) -> bool:
    """Pin glibc's mmap and trim thresholds for this process at `PINNED_THRESHOLDS[mode]` (which switches off
    glibc's dynamic threshold: see the module's docstring). Returns False where there is no glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    threshold = PINNED_THRESHOLDS[mode]
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold)) and bool(libc.mallopt(M_TRIM_THRESHOLD, threshold))


def measure(mode: str, step_repeats: int, round_repeats: int) -> dict:
    """Both measurements under one malloc mode (run in a process of its own: a pinned threshold cannot be undone,
    and `process` has to be fresh); `round_repeats` 0 leaves out the rounds."""
    pinned = mode != JUDGED_MODE and set_malloc(mode)
    step = time_step(repeats=step_repeats)
    rounds = [
        time_round(policy, threshold, repeats=round_repeats)
        for policy in TARGET_POLICIES
        for threshold in (0.0, 10.0)
        if round_repeats
    ]
    return {
        "malloc_pinned": pinned,
        "step": step,
        "rounds": rounds,
        "step_met": {
            label: step[label]["median_ms"] <= STEP_TARGET_MS
            for name in TARGET_POLICIES
            for label in (name, f"{name} (step)")
        },
        "round_met": all(r["median_ms"] < ROUND_TARGET_MS for r in rounds),
    }


def run(step_repeats: int = 500, round_repeats: int = 60) -> dict:
    """Each malloc mode in a fresh child process, `process` first; `round_repeats` 0 leaves out the rounds."""
    load_before = loadavg_1m()
    modes = {}
    context = multiprocessing.get_context("spawn")
    for mode in MODES:
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            modes[mode] = pool.submit(measure, mode, step_repeats, round_repeats).result()
    return {
        "groups": GROUPS,
        "brokers": BROKERS,
        "malloc": modes,
        "targets": {"step_ms": STEP_TARGET_MS, "round_ms": ROUND_TARGET_MS, "step_policies": list(TARGET_POLICIES)},
        "loadavg_1m": load_since(load_before),
        "cpus": os.cpu_count(),
        **environment("numpy", "msgpack"),
    }


def _table(result: dict) -> str:
    judged, pinned = result["malloc"][JUDGED_MODE], [result["malloc"][mode] for mode in PINNED_THRESHOLDS]
    lines = [
        f"one allocation over {result['groups']:,} groups x {result['brokers']} brokers, bound once and by step"
        f" (target <= {STEP_TARGET_MS:g} ms for {', '.join(TARGET_POLICIES)} in a fresh process, glibc untouched)",
        f"{'':<29} {JUDGED_MODE:-^53}{'':<7} |" + "|".join(f" {mode:-^18} " for mode in PINNED_THRESHOLDS),
        f"{'policy':<29} {'median ms':>10} {'x floor':>8} {'min ms':>8} {'p90 ms':>8} {'cpu ms':>8} {'cpu x':>6}"
        f"{'':<7} |" + "|".join(f" {'median ms':>10} {'x floor':>7} " for _ in PINNED_THRESHOLDS),
    ]
    floor_cpu_ms = judged["step"]["floor"]["median_cpu_ms"]

    def mark(row: dict) -> str:
        return "" if row["target_ms"] is None else (" met" if row["median_ms"] <= row["target_ms"] else " MISSED")

    for label, row in judged["step"].items():
        lines.append(
            f"{label:<29} {row['median_ms']:>10.3f} {row['ratio_to_floor']:>8.2f} {row['min_ms']:>8.3f}"
            f" {row['p90_ms']:>8.3f} {row['median_cpu_ms']:>8.3f} {row['median_cpu_ms'] / floor_cpu_ms:>6.2f}"
            f"{mark(row):<7} |"
            + "|".join(
                f" {other['step'][label]['median_ms']:>10.3f} {other['step'][label]['ratio_to_floor']:>7.2f} "
                for other in pinned
            )
        )
    if not judged["rounds"]:
        return "\n".join([*lines, _load_line(result)])
    lines.append("")
    lines.append(
        f"BrokerNode round, {result['groups']:,} groups shared with {result['brokers'] - 1} others"
        f" (target < {ROUND_TARGET_MS:g} ms)"
    )
    lines.append(
        f"{'malloc':<11} {'policy':<12} {'thresh%':>7} {'reported':>8} {'median ms':>10} {'min ms':>8} {'p90 ms':>8}"
        f" {'cpu ms':>7}  admit/build/finish_round (median ms)"
    )
    for mode, measured in result["malloc"].items():
        for row in measured["rounds"]:
            parts = "/".join(f"{v:.2f}" for v in row["median_parts_ms"].values())
            met = "met" if row["median_ms"] < row["target_ms"] else "MISSED"
            lines.append(
                f"{mode:<11} {row['policy']:<12} {row['threshold_pct']:>7g} {row['mean_groups_reported']:>8.0f}"
                f" {row['median_ms']:>10.2f} {row['min_ms']:>8.2f} {row['p90_ms']:>8.2f} {row['median_cpu_ms']:>7.2f}"
                f"  {parts}  {met}"
            )
    lines.append(_load_line(result))
    return "\n".join(lines)


def _load_line(result: dict) -> str:
    load = result["loadavg_1m"]
    return f"load average (1 min) {load['before']:.2f} -> {load['after']:.2f} on {result['cpus']} CPUs"


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument("--step-only", action="store_true", help="time the allocation only, not the rounds")
    parser.add_argument("--step-repeats", type=int, default=500, help="calls of each policy per mode (500)")
    parser.add_argument("--round-repeats", type=int, default=60, help="timed rounds of each setting per mode (60)")
    args = parser.parse_args()
    result = run(args.step_repeats, 0 if args.step_only else args.round_repeats)
    save_results(RESULTS, result, f"Python {result['python']}, numpy {result['versions']['numpy']}", _table(result))
