"""Run every evaluation's `run()` and write `evaluations/results/all.json`.

Modules, in order: quality (the quality suite: every policy under disturbances and loss, with the report's Spark
jobs), demo (the demo's worst round over 30 seeds), trials (random trials of the recommended policy) and
adversaries (a liar and forgeries). `pulsar_replay`, `tune` and `policy_figures` run only on their own. As with
the benchmarks (`benchmarks/run_all.py`), a failure is recorded with its error and the others still run, and
each module's own results (and the docs it writes) are written when it runs on its own (adversaries writes them
in either case).

Run from the repository root:

    python -m evaluations.run_all                 # everything (the quality suite takes the longest)
    python -m evaluations.run_all --quick         # one seed of the quality suite, 200 random trials
    python -m evaluations.run_all --only demo trials
"""

from __future__ import annotations

import sys
from typing import Any

from benchmarks.common import results_path
from benchmarks.run_all import failed, run_all, run_all_command_line

MODULES = {
    "quality": "evaluations.quality",
    "demo": "evaluations.demo_seeds",
    "trials": "evaluations.random_trials",
    "adversaries": "evaluations.adversary_outcomes",
}

QUICK: dict[str, dict[str, Any]] = {"quality": {"quick": True}, "trials": {"trials": 200}}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = run_all_command_line(__doc__, tuple(MODULES), "one quality seed, 200 random trials")
    args = parser.parse_args(argv)
    chosen = {name: module for name, module in MODULES.items() if name in (args.only or MODULES)}
    modules = {name: module for name, module in chosen.items() if name not in args.skip}
    kwargs = {name: dict(QUICK.get(name, {})) if args.quick else {} for name in modules}
    return run_all(modules, kwargs, args.quick, results_path("all", "evaluations"))


if __name__ == "__main__":
    sys.exit(1 if failed(main()) else 0)
