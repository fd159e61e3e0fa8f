"""`quotalab report RUN_DIR... [--out DIR] [--master SPARK_MASTER]`."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

DESCRIPTION = """\
Run Spark jobs over the Parquet telemetry of one or more runs (runs/<run_id>/ directories written by
`quotalab run`) and write summary.json, CSV tables (per_round, convergence, bandwidth, per_broker) and
report.html, a self-contained page with figures. Several runs are compared side by side.
Metrics: overshoot, utilization, max-min fair reference, Jain's index, fairness error, rounds to converge
after each event, bandwidth and reports suppressed (definitions in DESIGN.md and at the end of the page).
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `report` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="turn runs' telemetry into summary.json, CSV tables and report.html (Spark)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="a run directory (runs/<run_id>)")
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where to write the report (default: RUN_DIR/report for one run, reports/<UTC timestamp> for several)",
    )
    parser.add_argument(
        "--master",
        default="local[*]",
        metavar="SPARK_MASTER",
        help="Spark master URL, e.g. local[2] or spark://host:7077 (default: local[*])",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Build the report and print where report.html is."""
    from experiments.report import build_report  # pyspark loads only when the command runs

    print(build_report(args.run_dirs, args.out or default_out(args.run_dirs), master=args.master))
    return 0


def default_out(run_dirs: list[Path]) -> Path:
    """RUN_DIR/report for one run; reports/<UTC timestamp> for several."""
    if len(run_dirs) == 1:
        return run_dirs[0] / "report"
    return Path("reports") / dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
