"""`quotalab report`: Spark jobs that turn runs' Parquet telemetry into summary.json, CSV tables and report.html.

`build_report` is the whole pipeline: load (load.py), compute in Spark (metrics.py, groups.py), write the full
tables as Parquet and collect the small aggregates (summary.py), shape summary.json (summary.py), write the
conclusion (conclusion.py), draw (figures.py, plotly) and write the page (html.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["build_report"]


def build_report(
    run_dirs: list[Path] | list[str],
    out_dir: Path | str,
    master: str = "local[*]",
    spark: SparkSession | None = None,
    progress: Callable[[str], None] | None = None,
    verbose: bool = False,
) -> Path:
    """Report on `run_dirs` into `out_dir` and return the path of report.html.

    Writes summary.json, report.html and, by Spark, the full tables as Parquet under `tables/` (per_round,
    groups, convergence, quota_telemetry, throttled_by_reason: `summary.PARQUET_TABLES`); bandwidth.csv (per
    run and round) and per_broker.csv (per run and broker), producers.csv (per producer and run, for runs with
    producers); and, when every group of every run is on the page (small runs), the per-group tables as CSV
    too (per_round.csv, convergence.csv, quota_telemetry.csv, throttled_by_reason.csv). report.html also
    compares the fallbacks when a run had a silence (`outages`) and draws the ramped quotas of runs that have
    some (`ramps`). Uses `spark` when given, else the shared session on `master` (its start-up lines shown only
    when `verbose`). `progress` is told each step.

    The run directories are checked first (every Parquet page read: `load.read_manifests`), then Java, when the
    report is to start Spark: a mistake in the runs is named before what is missing outside them.
    """
    from experiments import prerequisites
    from experiments.report.load import read_manifests, runs_of
    from experiments.report.session import rounds_partitions, spark_session

    say = progress or (lambda text: None)
    started = time.perf_counter()
    located = read_manifests(run_dirs)  # a missing run or table fails here, before Spark starts
    rows = sum(run.rows["rounds"] for run in located.values())
    if spark is None:
        prerequisites.check_java()  # looked up when called: a test's stand-in for it holds here
        say(f"starting Spark ({master})")
    with ThreadPoolExecutor(max_workers=1) as starter:
        starting = None if spark else starter.submit(spark_session, master, verbose, rows, record_classes=True)
        # Imported while the JVM starts (a second process: the wait frees the interpreter), not at the top: the
        # CLI imports this package to register `report`, and every other subcommand would otherwise pay for
        # loading pyspark, pandas and plotly (about 2 s).
        from experiments.report.explanations import explain_named
        from experiments.report.html import Extras, render_report
        from experiments.report.outages import fallback_comparison, fallback_section
        from experiments.report.producer_section import producer_rounds, producer_summary, producers_section
        from experiments.report.ramps import ramp_rounds, ramp_sections, ramped_groups
        from experiments.report.summary import TABLES_DIR, build_summary, collect_results

        session = spark or starting.result()
    runs = runs_of(session, located)
    say(f"computing the metrics of {len(located)} run(s), {rows:,} rounds rows, in Spark")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    extra = {}
    ramped = ramped_groups(runs.manifests)
    if ramped:
        extra["ramps"] = ramp_rounds(runs.rounds, ramped)
    has_producers = any(run.rows["producers"] for run in located.values())
    if has_producers:  # runs with producers (PIP-385): producers.csv and a section of their own
        extra["producers"] = producer_summary(runs.producers)
        extra["producer_rounds"] = producer_rounds(runs.producers)
    results = collect_results(runs, out / TABLES_DIR, extra, say, rounds_partitions(rows))
    summary = build_summary(runs.manifests, results)

    say("explaining the overshoots and starvation the conclusion names (a lockstep run is replayed once)")
    explained = explain_named(
        summary["runs"],
        results.per_round,
        results.run_rounds,
        results.events,
        {run_id: run.path for run_id, run in located.items()},
        {run_id: run.rows["rounds"] for run_id, run in located.items()},
        out,
    )
    say("writing the page")
    fallbacks = fallback_comparison(results.run_rounds, results.event_convergence, results.events, runs.manifests)
    extras = Extras(
        explained=explained,
        comparison=fallback_section(fallbacks),
        per_run=ramp_sections(results.extra["ramps"], ramped) if ramped else {},
        sections=[producers_section(results.extra["producers"], results.extra["producer_rounds"])]
        if has_producers
        else [],
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    tables = {"bandwidth.csv": results.bandwidth, "per_broker.csv": results.per_broker}
    if results.every_group_shown():  # small: the per-group tables as CSV too
        tables |= {
            "per_round.csv": results.per_round,
            "convergence.csv": results.convergence,
            "quota_telemetry.csv": results.quota.groups,
            "throttled_by_reason.csv": results.quota.reasons,
        }
    if has_producers:
        tables["producers.csv"] = results.extra["producers"]
    for name, table in tables.items():
        table.to_csv(out / name, index=False)
    report = out / "report.html"
    report.write_text(render_report(summary, results, runs.manifests, extras))
    say(f"done in {time.perf_counter() - started:.1f} s")
    return report
