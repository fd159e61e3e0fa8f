"""`quotalab sweep SWEEP.yaml [--out DIR] [--address RAY_ADDRESS] [--max-parallel N] [--master SPARK_MASTER]`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DESCRIPTION = """\
Run a parameter sweep: a base scenario, seeds, and a grid or a random sample of scenario keys (see
experiments/sweeps/ for examples). The whole file and every configuration are checked before anything runs.
Runs execute in parallel as Ray tasks into DIR/runs/; a run already complete there is not run again, so an
interrupted sweep resumes when the same command is run again. A Spark job then aggregates the metrics over
seeds, ranks the configurations and marks the Pareto front: DIR/ranking.csv, DIR/runs.csv, DIR/sweep.json and
DIR/report.html. The best configuration is printed as a scenario fragment. Exit status 1 if a run failed.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `sweep` subcommand."""
    parser = subparsers.add_parser(
        "sweep",
        help="run a grid or random sweep of scenario keys on Ray and rank the configurations (Spark)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sweep", metavar="SWEEP", help="a sweep file, or a shipped sweep by name (quotalab scenarios)")
    parser.add_argument("--out", type=Path, metavar="DIR", help="output directory (default: runs/sweeps/<name>)")
    parser.add_argument(
        "--address",
        metavar="RAY_ADDRESS",
        help="Ray cluster to join, e.g. 'auto' or ray://host:10001; runs come back to DIR on this machine "
        "(default: start a local Ray instance)",
    )
    parser.add_argument(
        "--max-parallel", type=_positive, metavar="N", help="runs in flight at once (default: the cluster's CPUs)"
    )
    parser.add_argument(
        "--master", default="local[*]", metavar="SPARK_MASTER", help="Spark master for the ranking (default: local[*])"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Check, run, rank; print the best configuration and where the outputs are."""
    from experiments.catalog import sweep_file
    from experiments.sweep import default_out, run_sweep
    from experiments.sweep.expand import plan_sweep
    from experiments.sweep.spec import load_sweep

    plan = plan_sweep(load_sweep(sweep_file(args.sweep)))
    out = args.out or default_out(plan.sweep.name)
    print(
        f"sweep {plan.sweep.name}: {len(plan.configurations)} configurations x {len(plan.sweep.seeds)} seeds = "
        f"{len(plan.runs)} runs into {out / 'runs'}"
    )
    outcome = run_sweep(plan, out, address=args.address, max_parallel=args.max_parallel, master=args.master)
    execution, summary = outcome.execution, outcome.results.summary
    print(
        f"ran {len(execution.ran)} runs in {execution.wall_s:.1f} s, {len(execution.skipped)} already complete, "
        f"{len(execution.failed)} failed"
    )
    print(describe_best(summary))
    print(summary["best"]["fragment"], end="")
    print(f"ranking: {out / 'ranking.csv'}\nsummary: {out / 'sweep.json'}\nreport: {outcome.results.report}")
    return 1 if execution.failed else 0


def describe_best(summary: dict[str, Any]) -> str:
    """One comment line above the fragment: which configuration, and its objectives' means over seeds."""
    best = summary["best"]
    objectives = [*summary["objective"]["minimize"], *summary["objective"]["maximize"]]
    means = ", ".join(f"{name} {_show(best['metrics'][name]['mean'])}" for name in objectives)
    front = f"; {len(summary['pareto'])} on the Pareto front"
    return f"# best of {len(summary['ranked'])} ({best['config_id']}, mean over {best['runs']} runs: {means}){front}"


def _show(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value
