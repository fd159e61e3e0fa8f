"""`quotalab sweep SWEEP.yaml [--out DIR] [--address RAY_ADDRESS] [--max-parallel N] [--master SPARK_MASTER]`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from experiments.sweep.expand import SweepPlan

DESCRIPTION = """\
Tune scenario keys: a base scenario, seeds, optional conditions every candidate must survive (e.g. report
loss), and the knobs to choose, as a grid, a random sample or an Optuna search (see experiments/sweeps/ and
docs/tuning.md). The whole file and every candidate are checked before anything runs. Each candidate is a Ray
Tune trial that runs the scenario under every condition and seed into DIR/runs/ and scores it: the worst (or
mean, `aggregate:`) of each objective over its runs. Running the same command again resumes the Tune
experiment in DIR/tune/: finished candidates and complete runs are not run again. A Spark job then ranks the
candidates and marks the Pareto front: DIR/ranking.csv, DIR/runs.csv, DIR/sweep.json and DIR/report.html. The
best candidate's knobs are printed as a scenario fragment. Exit status 1 if a run failed.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `sweep` subcommand."""
    parser = subparsers.add_parser(
        "sweep",
        help="tune scenario keys on Ray Tune (grid, random or Optuna, under conditions) and rank them (Spark)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sweep", metavar="SWEEP", help="a sweep file, or a shipped sweep by name (quotalab scenarios)")
    parser.add_argument("--out", type=Path, metavar="DIR", help="output directory (default: runs/sweeps/<name>)")
    parser.add_argument(
        "--address",
        metavar="RAY_ADDRESS",
        help="Ray cluster to join, e.g. 'auto' on its head node; trials run on any node, runs come back to DIR "
        "on this machine (default: start a local Ray instance)",
    )
    parser.add_argument(
        "--max-parallel",
        type=_positive,
        metavar="N",
        help="candidates (Tune trials) at once, each running its runs one after the other (default: the "
        "cluster's CPUs; 1 makes an Optuna search reproducible)",
    )
    parser.add_argument(
        "--master",
        default="local[*]",
        metavar="SPARK_MASTER",
        help="Spark master for the metrics and the ranking (default: local[*])",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Check, run, rank; print the best configuration and where the outputs are."""
    from experiments.catalog import sweep_file
    from experiments.sweep import default_out, run_sweep
    from experiments.sweep.expand import plan_sweep
    from experiments.sweep.sweep_file import load_sweep

    plan = plan_sweep(load_sweep(sweep_file(args.sweep)))
    out = args.out or default_out(plan.sweep.name)
    print(describe_plan(plan, out))
    outcome = run_sweep(plan, out, address=args.address, max_parallel=args.max_parallel, master=args.master)
    execution, summary = outcome.execution, outcome.results.summary
    stopped = f", {len(execution.stopped_early)} candidates stopped early" if execution.stopped_early else ""
    repeated = f", {len(execution.repeated)} run more than once" if execution.repeated else ""
    print(
        f"ran {len(execution.ran)} runs in {execution.wall_s:.1f} s, {len(execution.skipped)} already complete, "
        f"{len(execution.failed)} failed{stopped}{repeated}"
    )
    print(describe_best(summary))
    print(summary["best"]["fragment"], end="")
    print(f"ranking: {out / 'ranking.csv'}\nsummary: {out / 'sweep.json'}\nreport: {outcome.results.report}")
    return 1 if execution.failed else 0


def describe_plan(plan: SweepPlan, out: Path) -> str:
    """`sweep NAME: C candidates x K conditions x S seeds = R runs into DIR/runs (the search)`."""
    sweep = plan.sweep
    counts = f"{plan.candidates} candidates x {len(plan.conditions)} conditions x {len(sweep.seeds)} seeds"
    search = {"grid": "grid", "random": "random sample", "optuna": "Optuna search"}[sweep.search.kind]
    return f"sweep {sweep.name}: {counts} = {plan.planned_runs} runs into {out / 'runs'} ({search})"


def describe_best(summary: dict[str, Any]) -> str:
    """One comment line above the fragment: which candidate, and its objectives aggregated over its runs."""
    best = summary["best"]
    objectives = [*summary["objective"]["minimize"], *summary["objective"]["maximize"]]
    values = ", ".join(f"{name} {_show(best['metrics'][name]['mean'])}" for name in objectives)
    front = f"; {len(summary['pareto'])} on the Pareto front"
    over = f"{summary['aggregate']} over {best['runs']} runs"
    return f"# best of {len(summary['ranked'])} ({best['config_id']}, {over}: {values}){front}"


def _show(value: float | None) -> str:
    """A number as a person reads it: 4 significant digits, and 0 for a float's rounding dust (2.2e-16)."""
    if value is None:
        return "n/a"
    return "0" if abs(value) < 1e-9 else f"{value:.4g}"


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value
