"""How long does one broker's round take at PIP-82's size, with reports routed by interest?

PIP-82's sizing: 100 brokers, 100,000 groups, each on 5 brokers, so 5,000 groups a broker. The broker timed
(broker 0) hosts 5,000 groups, each shared with 4 peers drawn from the 99 others; it publishes each group's
entry to the inbox of every other owner (`Routes.from_lists`: ~99 reports a round) and receives in its own
inbox the reports of its peers, which host only the groups they share with it here (what the others publish
elsewhere does not reach broker 0). One dimension (msgs/s), quota 1,000 a group, mean offered load drawn
from [50, 400] msgs/s per (group, broker) and moving a little every round (a random walk of 3%), threshold
10%, force_every 5: a steady state where most groups are suppressed and each is forced every 5 rounds.

Every round the 99 peers run their first phase (untimed), then broker 0's whole round is timed phase by phase:
`admit`, `build_reports`, `receive` (the peers' payloads), `cleanup`, `allocate`; then the peers receive
broker 0's payloads meant for them (untimed). After `warmup` rounds, `rounds` rounds are timed; the whole run
is repeated `repeats` times (fresh nodes, another seed), and the figures are the medians over all timed
rounds, with each run's median total too. The median CPU time of the timing thread is given next to the
wall-clock figures (what load from elsewhere inflates least). Target: <= 4 ms a round (100 brokers at >= 2
rounds/s on one core is 5 ms a broker round, everything included).

The machine's load average is recorded with the figures: on a shared machine they are upper bounds.

Run from the repository root: `python -m benchmarks.bench_node_scale` (prints a table, writes
`benchmarks/results/node_scale.json`).
"""

from __future__ import annotations

import os

import numpy as np

from allocator import policies
from allocator.node.broker_node import BrokerNode
from allocator.node.node_settings import NodeSettings
from allocator.wire.routing import Routes
from benchmarks.common import (
    PHASES,
    command_line,
    environment,
    load_since,
    loadavg_1m,
    results_path,
    save_results,
    timed_round,
)

RESULTS = results_path("node_scale")
BROKERS = 100
GROUPS_PER_BROKER = 5_000
OWNERS_PER_GROUP = 5
QUOTA = 1_000.0
DRIFT = 0.03  # the relative step of every mean offered load, each round
TARGET_MS = 4.0
SETTINGS = NodeSettings(
    dimensions=("publish_msgs_per_s",),
    interval_s=1.0,
    policy=policies.bind("pip82-steal"),
    threshold_pct=10.0,
    force_every=5,
)


class _Cluster:
    """Broker 0 and, for each of its peers, a node holding the groups that peer shares with broker 0."""

    def __init__(self, seed: int):
        rng = np.random.default_rng(seed)
        group_ids = np.sort(
            rng.choice(BROKERS * GROUPS_PER_BROKER // OWNERS_PER_GROUP, GROUPS_PER_BROKER, replace=False)
        )
        peers = [rng.choice(np.arange(1, BROKERS), OWNERS_PER_GROUP - 1, replace=False) for _ in group_ids]
        quota = np.full((GROUPS_PER_BROKER, 1), QUOTA)
        self.node = BrokerNode("broker-000", group_ids, quota, SETTINGS, routes=Routes.from_lists(peers))
        self.peers: dict[int, BrokerNode] = {}
        for peer in range(1, BROKERS):
            rows = np.flatnonzero([peer in owners for owners in peers])
            self.peers[peer] = BrokerNode(
                f"broker-{peer:03d}", group_ids[rows], quota[rows], SETTINGS, routes=Routes.single(len(rows), topic=0)
            )
        self.mean = {peer: rng.uniform(50.0, 400.0, len(node.group_ids)) for peer, node in self.peers.items()}
        self.mean[0] = rng.uniform(50.0, 400.0, GROUPS_PER_BROKER)
        self.rng = rng
        self.round = 0

    def _demand(self, broker: int) -> np.ndarray:
        self.mean[broker] *= np.exp(self.rng.normal(0.0, DRIFT, len(self.mean[broker])))
        return self.mean[broker]

    def full_round(self) -> tuple[dict[str, float], dict[str, int]]:
        """One round of every node; broker 0's phases are timed (seconds), with what it sent and received."""
        self.round += 1
        now_s = float(self.round)
        inbox = []
        for peer, node in self.peers.items():
            demand = self._demand(peer)
            outbox = node.build_reports(node.admit(demand, np.ones(len(demand)), now_s), now_s)
            inbox += [payload for _, payload in outbox.payloads]
        demand, msg_bytes = self._demand(0), np.ones(GROUPS_PER_BROKER)
        timed = timed_round(self.node, demand, msg_bytes, inbox, now_s)
        outbox, received = timed.outbox, timed.inbox
        for topic, payload in outbox.payloads:
            peer = self.peers[topic]
            peer.finish_round([payload], now_s)
        counts = {
            "payloads_sent": len(outbox.payloads),
            "groups_reported": int(outbox.reported.sum()),
            "payloads_received": len(inbox),
            "reports_accepted": received.accepted,
        }
        return timed.seconds, counts


def time_rounds(seed: int, warmup: int, rounds: int) -> dict:
    cluster = _Cluster(seed)
    for _ in range(warmup):
        cluster.full_round()
    seconds: dict[str, list[float]] = {}
    counts: dict[str, list[int]] = {}
    for _ in range(rounds):
        timed, counted = cluster.full_round()
        for name, value in timed.items():
            seconds.setdefault(name, []).append(value)
        for name, value in counted.items():
            counts.setdefault(name, []).append(value)
    table = cluster.node.table
    return {
        "seed": seed,
        "seconds": seconds,
        "mean_counts": {name: float(np.mean(values)) for name, values in counts.items()},
        "slots": table.n_slots,
        "brokers_heard_of": table.n_brokers,
        "view_brokers_mean": float(cluster.node.table.view_brokers().mean()),
    }


def run(repeats: int = 3, warmup: int = 10, rounds: int = 40) -> dict:
    load_before = loadavg_1m()
    runs = [time_rounds(seed, warmup, rounds) for seed in range(repeats)]
    every_round = {name: np.concatenate([r["seconds"][name] for r in runs]) for name in (*PHASES, "total", "cpu")}
    median_ms = {name: float(np.median(values) * 1e3) for name, values in every_round.items()}
    for r in runs:
        r["median_total_ms"] = float(np.median(r.pop("seconds")["total"]) * 1e3)
    return {
        "brokers": BROKERS,
        "groups_per_broker": GROUPS_PER_BROKER,
        "owners_per_group": OWNERS_PER_GROUP,
        "policy": SETTINGS.policy.name,
        "threshold_pct": SETTINGS.threshold_pct,
        "force_every": SETTINGS.force_every,
        "warmup_rounds": warmup,
        "timed_rounds": rounds * repeats,
        "median_ms": median_ms,
        "p90_total_ms": float(np.percentile(every_round["total"], 90) * 1e3),
        "runs": runs,
        "target_ms": TARGET_MS,
        "met": median_ms["total"] <= TARGET_MS,
        "loadavg_1m": load_since(load_before),
        "cpus": os.cpu_count(),
        **environment("numpy", "msgpack"),
    }


def _table(result: dict) -> str:
    ms = result["median_ms"]
    counts = result["runs"][0]["mean_counts"]
    load = result["loadavg_1m"]
    return "\n".join(
        [
            f"BrokerNode round: {result['groups_per_broker']:,} groups, each on {result['owners_per_group']} of"
            f" {result['brokers']} brokers, interest routing, threshold {result['threshold_pct']:g}%, force_every"
            f" {result['force_every']}, {result['policy']} (target <= {result['target_ms']:g} ms)",
            f"per round: {counts['payloads_sent']:.0f} reports sent ({counts['groups_reported']:.0f} groups),"
            f" {counts['payloads_received']:.0f} received; {result['runs'][0]['slots']} slots a group,"
            f" {result['runs'][0]['brokers_heard_of']} brokers heard of",
            "median ms: " + ", ".join(f"{name} {ms[name]:.3f}" for name in PHASES),
            f"total {ms['total']:.3f} ms (cpu {ms['cpu']:.3f}, p90 {result['p90_total_ms']:.3f}; per run "
            + ", ".join(f"{r['median_total_ms']:.3f}" for r in result["runs"])
            + f") {'met' if result['met'] else 'MISSED'}",
            f"load average (1 min) {load['before']:.2f} -> {load['after']:.2f} on {result['cpus']} CPUs",
        ]
    )


if __name__ == "__main__":
    command_line(__doc__).parse_args()
    result = run()
    save_results(RESULTS, result, f"Python {result['python']}, numpy {result['versions']['numpy']}", _table(result))
