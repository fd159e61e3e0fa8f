"""`quotalab report RUN_DIR... [--out DIR] [--master SPARK_MASTER] [--verbose]`."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

DESCRIPTION = """\
Run Spark jobs over the Parquet telemetry of one or more runs (run directories written by `quotalab run`)
and write summary.json, the full tables as Parquet under tables/ (per_round, groups, convergence, quota
telemetry; written by Spark), small CSV tables (bandwidth, per_broker; the per-group ones too for small runs) and
report.html: one page that opens with what the runs show (which policy held the quota, how far the others
went over and when, at what cost), then interactive figures. Several runs are compared side by side. Past 40
groups a run (PIP-82's 100,000), the page shows the distributions over the groups and the worst 8 in detail.
On a cluster (--master spark://HOST:7077), the run directories and --out must be on a path every executor
reads and writes at the same place (docs/reports.md).
Metrics: overshoot, rounds over quota, utilization, max-min fair reference, Jain's index, fairness error,
starvation, rounds to converge after each event, bandwidth (definitions at the end of the page and in
docs/reports.md). Needs Java 17 or later.
"""
MAX_STATUS_LINES = 10  # runs listed one per line; beyond, the counts and the runs that did not complete


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `report` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="turn runs' telemetry into summary.json, Parquet and CSV tables and report.html (Spark)",
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
    parser.add_argument("--verbose", action="store_true", help="show Spark's own start-up and log lines")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Build the report, print each run's status and where report.html is."""
    from experiments.report import build_report  # pyspark loads only when the command runs

    report = build_report(
        args.run_dirs, args.out or default_out(args.run_dirs), master=args.master, progress=stderr_line,
        verbose=args.verbose,
    )  # fmt: skip
    for line in status_lines(report.parent / "summary.json"):
        print(line)
    print(report)
    return 0


def stderr_line(text: str) -> None:
    print(f"report: {text}", file=sys.stderr, flush=True)


def status_lines(summary_path: Path) -> list[str]:
    """One line per run (`RUN: complete, 60 rounds`, `RUN: died (driver gone) after 12 rounds`); with many runs,
    the counts by status, then the runs that did not complete."""
    from experiments.report.html import run_status_text

    runs = json.loads(summary_path.read_text())["runs"]
    lines = [f"{run['run_id']}: {run_status_text(run)}" for run in runs]
    if len(runs) <= MAX_STATUS_LINES:
        return lines
    counts: dict[str, int] = {}
    for run in runs:
        counts[run["status"]] = counts.get(run["status"], 0) + 1
    summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
    return [f"{len(runs)} runs: {summary}"] + [
        line for run, line in zip(runs, lines, strict=True) if run["status"] != "complete"
    ]


def default_out(run_dirs: list[Path]) -> Path:
    """RUN_DIR/report for one run; reports/<UTC timestamp> for several."""
    if len(run_dirs) == 1:
        return run_dirs[0] / "report"
    return Path("reports") / dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
