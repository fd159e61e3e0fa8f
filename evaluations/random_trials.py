"""Does the recommended policy hold the quota on random trials the quality suite was not built from?

Each trial is one group on 2-5 in-process brokers for 18 lockstep rounds with a membership registry
(`allocator.node.one_group`), everything drawn at random: each broker's start round (0-6), demand (1-200 msgs/s, a
few idle) and a shift of it for half of them, up to two pauses (the broker stops serving for 1-3 rounds and comes
back), a quota of 20-500 and up to two changes of it that each broker sees in its round or the next (as on timers),
and the loss of each report between two brokers, independent (0, 10, 30 or 50%) or in Gilbert-Elliott bursts (10% in
the good state, 90% in the bad one). A round goes over when the group admits more than the largest quota a broker
holds plus the floor of 1 per broker; each trial gives its worst round, `max(U - Q - n, 0) / Q`.

Run from the repository root: `python -m evaluations.random_trials` (prints the figures, writes
`evaluations/results/trials.json` and the sentence of docs/policies.md between its `random-trials` markers).
"""

from __future__ import annotations

import random
import textwrap
from typing import Any

import numpy as np

from allocator import policies
from allocator.node.broker_node import MIN_LIMIT, BrokerNode
from allocator.node.node_settings import NodeSettings
from allocator.node.one_group import registry_round
from allocator.policies import RECOMMENDED
from benchmarks.common import ROOT, command_line, environment, replace_marked, results_path, save_results

RESULTS = results_path("trials", "evaluations")
TRIALS, SEED, ROUNDS = 1500, 2, 18
LOSSES = (0.0, 0.1, 0.3, 0.5)
BURST = {"p_enter": 0.3, "p_stay": 0.9, "loss_good": 0.1, "loss_bad": 0.9}


def broker(name: str, quota: float) -> BrokerNode:
    settings = NodeSettings(dimensions=("publish_msgs_per_s",), policy=policies.bind(RECOMMENDED), threshold_pct=0.0)
    return BrokerNode(name, np.array([1]), np.array([[quota]]), settings)


def trial(rng: random.Random) -> tuple[float, str]:
    """One random trial: its worst round (the share of the quota over quota + floors, 0 if none) and its loss."""
    names = [f"b{i}" for i in range(rng.randint(2, 5))]

    def a_demand() -> float:
        return rng.choice([rng.uniform(1, 200), float(rng.randint(1, 20)), 0.0 if rng.random() < 0.2 else 50.0])

    demand = {name: a_demand() for name in names}
    shift = {name: (rng.randint(3, 14), a_demand()) for name in names if rng.random() < 0.5}
    start = {name: rng.randint(0, 6) for name in names}
    pauses = {name: [(rng.randint(1, 14), rng.randint(1, 3)) for _ in range(rng.randint(0, 2))] for name in names}
    quotas = [rng.uniform(20, 500)]
    changes = sorted(rng.sample(range(2, 15), rng.randint(0, 2)))
    quotas += [rng.uniform(20, 500) for _ in changes]
    late = {name: rng.random() < 0.5 for name in names}
    loss = rng.choice(LOSSES)
    bursty = rng.random() < 0.4
    bad: dict[tuple[str, str], bool] = {}
    brokers: dict[str, BrokerNode] = {}
    worst = 0.0
    for round_index in range(ROUNDS):
        for name in names:
            seen = sum(round_index >= at + late[name] for at in changes)
            if start[name] == round_index:
                brokers[name] = broker(name, quotas[seen])
            elif name in brokers and brokers[name].quota[0, 0] != quotas[seen]:
                brokers[name].set_quota(np.array([[quotas[seen]]]))
        if not brokers:
            continue
        lost = set()
        for link in ((s, r) for s in brokers for r in brokers if s != r):
            if bursty:
                bad[link] = rng.random() < (BURST["p_stay"] if bad.get(link) else BURST["p_enter"])
                chance = BURST["loss_bad"] if bad[link] else BURST["loss_good"]
            else:
                chance = loss
            if rng.random() < chance:
                lost.add(link)
        wanted = {}
        for name in brokers:
            rate = shift[name][1] if name in shift and round_index >= shift[name][0] else demand[name]
            wanted[name] = 0.0 if any(0 <= round_index - at < n for at, n in pauses[name]) else rate
        usage = registry_round(brokers, wanted, float(round_index), lost)
        quota = max(b.quota[0, 0] for b in brokers.values())
        worst = max(worst, (sum(usage.values()) - quota - MIN_LIMIT * len(brokers)) / quota)
    return max(worst, 0.0), "bursts" if bursty else f"{loss:.0%}"


def run(trials: int = TRIALS, seed: int = SEED) -> dict[str, Any]:
    worst_by_trial, kinds = {}, {}
    for index in range(trials):
        worst_by_trial[index], kinds[index] = trial(random.Random(seed * 100_003 + index))
    over = {index: value for index, value in worst_by_trial.items() if value > 1e-9}
    by_loss = {
        kind: {"trials": sum(k == kind for k in kinds.values()), "over": sum(kinds[i] == kind for i in over)}
        for kind in sorted(set(kinds.values()))
    }
    worst_trial = max(worst_by_trial, key=worst_by_trial.get)
    return {
        **environment("numpy"),
        "policy": RECOMMENDED,
        "trials": trials,
        "seed": seed,
        "over": len(over),
        "worst": round(worst_by_trial[worst_trial], 5),
        "worst_trial": worst_trial,
        "worst_loss": kinds[worst_trial],
        "over_by_trial": {str(index): round(value, 5) for index, value in over.items()},
        "by_loss": by_loss,
    }


def sentence(result: dict[str, Any]) -> str:
    bursts = result["by_loss"].get("bursts", {"over": 0})["over"]
    return (
        f"On {result['trials']:,} random trials (`evaluations/random_trials.py`, seed {result['seed']}) "
        f"{result['over']} went over the quota plus the floors in some round ({bursts} of them in bursts); the "
        f"worst by {result['worst']:.1%} of the quota (trial {result['worst_trial']}, {result['worst_loss']} loss)."
    )


def main() -> None:
    parser = command_line(__doc__)
    parser.add_argument("--trials", type=int, default=TRIALS, help=f"how many (default {TRIALS})")
    parser.add_argument("--seed", type=int, default=SEED, help=f"the trials' seed (default {SEED})")
    args = parser.parse_args()
    result = run(args.trials, args.seed)
    save_results(RESULTS, result, sentence(result))
    if (args.trials, args.seed) == (TRIALS, SEED):
        replace_marked(ROOT / "docs" / "policies.md", "random-trials", textwrap.fill(sentence(result), width=114))


if __name__ == "__main__":
    main()
