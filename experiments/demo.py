"""`quotalab demo`: one scenario with churn and loss under three policies on a local Ray instance, then the
Spark report comparing them: Pulsar's rule (the reference), PIP-82's steal, and the recommended policy."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

from allocator.policies import RECOMMENDED
from experiments import prerequisites
from experiments.catalog import SCENARIOS
from experiments.run import run_scenario
from experiments.scenario import load_scenario

DEMO_SCENARIO = SCENARIOS / "churn-and-loss.yaml"
DEMO_POLICIES = ("pulsar", "pip82-steal", RECOMMENDED)


def run_demo(
    out_dir: Path, backend: str = "ray", master: str = "local[2]", progress: bool = True, verbose: bool = False
) -> Path:
    """Run the demo scenario once per policy into `out_dir/<policy>/`, then report; returns report.html.

    Java (for the report) is checked first: a missing one fails before minutes of runs, not after."""
    from experiments.report import build_report
    from experiments.report.command import stderr_line

    prerequisites.check_java()  # looked up when called: a test's stand-in for it never sticks here
    run_dirs = []
    for policy in DEMO_POLICIES:
        scenario = load_scenario(DEMO_SCENARIO, {"policy.name": policy, "policy.params": {}, "backend": backend})
        run_dirs.append(run_scenario(scenario, out_dir / policy, progress=progress))
        if progress:
            print(f"ran {scenario.name} under {policy}: {out_dir / policy}")
    say = stderr_line if progress else None
    return build_report(run_dirs, out_dir / "report", master=master, progress=say, verbose=verbose)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the churn-and-loss scenario under three policies on Ray, then the Spark report",
        description=(
            f"Runs {DEMO_SCENARIO.name} under {', '.join(DEMO_POLICIES)} on a local Ray instance, then the Spark "
            "report comparing them. Takes a few minutes on two cores."
        ),
    )
    parser.add_argument("--out", type=Path, help="output directory (default: runs/demo-<time>)")
    parser.add_argument("--backend", choices=["ray", "local"], default="ray", help="where brokers run (default: ray)")
    parser.add_argument("--master", default="local[2]", help="Spark master for the report (default: local[2])")
    parser.add_argument("--verbose", action="store_true", help="show Spark's own start-up and log lines")
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    out_dir = args.out or Path("runs") / f"demo-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"
    report = run_demo(out_dir, backend=args.backend, master=args.master, verbose=args.verbose)
    print(f"report: {report}")
    return 0
