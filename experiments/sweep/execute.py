"""Run a sweep's runs as Ray tasks, a few at a time, skipping the runs already complete (resume).

Each run is one task of one CPU running the scenario on the in-process backend: a run is a single-threaded
loop, so one task per core keeps a 2-core machine busy without the overhead of one actor per broker, and on a
cluster the tasks spread over every node. At most `max_parallel` tasks are in flight (default: the cluster's
CPUs), the next submitted as one finishes (`ray.wait`), so the driver builds each scenario only when its
run is about to start and a failure is reported while the others go on.

A run directory is `runs_dir/<run_id>/`: the run's telemetry, `manifest.json`, and `sweep-run.json` (the
sweep, configuration, seed and overrides it was run with). A task runs its scenario in a scratch directory of
the node it runs on and returns the files; the driver writes them under `.<run_id>.partial/` and renames that
to `<run_id>/`, so every run directory is on the driver's disk (the nodes of a cluster need no shared
storage) and appears whole or not at all. A run counts as done when its manifest says `complete` and its
`sweep-run.json` matches the plan; anything else found at its place (a run made from other settings, a
manifest that says `running`, `interrupted` or `failed`) is replaced when the run is done again.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from tqdm import tqdm

from actors.backends import init_ray
from experiments.run import run_scenario
from experiments.scenario.spec import Scenario
from experiments.sweep.expand import PlannedRun, SweepPlan

RECORD = "sweep-run.json"


@dataclass(frozen=True)
class ExecutionSummary:
    """What `execute_sweep` did: run ids it ran, skipped (already complete) and failed (with the error line)."""

    ran: tuple[str, ...]
    skipped: tuple[str, ...]
    failed: dict[str, str]
    wall_s: float
    run_seconds: dict[str, float] = field(default_factory=dict)  # ran: the time inside each task


def run_record(plan: SweepPlan, run: PlannedRun) -> dict[str, Any]:
    """What `sweep-run.json` holds for `run`: enough to check, by eye or by code, what the run was made from."""
    return {
        "sweep": plan.sweep.name,
        "run_id": run.run_id,
        "config_id": run.config_id,
        "seed": run.seed,
        "overrides": run.overrides,
        "fixed": plan.sweep.fixed,
    }


def is_complete(run_dir: Path, record: dict[str, Any]) -> bool:
    """A run directory that holds a complete run made from `record`'s settings."""
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        found = json.loads((run_dir / RECORD).read_text())
    except (OSError, ValueError):
        return False
    # The record is compared as JSON would store it (tuples become lists).
    return manifest.get("status") == "complete" and found == json.loads(json.dumps(record, default=str))


def execute_sweep(
    plan: SweepPlan,
    runs_dir: Path,
    *,
    address: str | None = None,
    max_parallel: int | None = None,
    progress: bool = True,
) -> ExecutionSummary:
    """Run every planned run not already complete in `runs_dir`. When Ray is not initialized yet, a local
    instance is started (or the cluster at `address` joined, e.g. "auto") and shut down again at the end."""
    started = time.perf_counter()
    runs_dir = Path(runs_dir).resolve()  # workers need not share the driver's working directory
    records = {run.run_id: run_record(plan, run) for run in plan.runs}
    skipped = tuple(run.run_id for run in plan.runs if is_complete(runs_dir / run.run_id, records[run.run_id]))
    pending = [run for run in plan.runs if run.run_id not in skipped]
    if not pending:
        return ExecutionSummary(ran=(), skipped=skipped, failed={}, wall_s=time.perf_counter() - started)

    owns_ray = not ray.is_initialized()
    if owns_ray:
        init_ray(address)
    try:
        run_seconds, failed = _run_all(plan, pending, runs_dir, records, max_parallel, progress, len(skipped))
    finally:
        if owns_ray:
            ray.shutdown()
    return ExecutionSummary(
        ran=tuple(run.run_id for run in pending if run.run_id in run_seconds),
        skipped=skipped,
        failed=failed,
        wall_s=time.perf_counter() - started,
        run_seconds=run_seconds,
    )


def _run_all(
    plan: SweepPlan,
    pending: list[PlannedRun],
    runs_dir: Path,
    records: dict[str, dict[str, Any]],
    max_parallel: int | None,
    progress: bool,
    done_before: int,
) -> tuple[dict[str, float], dict[str, str]]:
    """Keep at most `max_parallel` tasks in flight until every pending run has finished or failed."""
    limit = max_parallel or max(1, int(ray.cluster_resources().get("CPU", 1)))
    bar = tqdm(
        total=len(plan.runs), initial=done_before, desc=f"sweep {plan.sweep.name}", unit="run", disable=not progress
    )
    queue = list(reversed(pending))  # popped from the end: plan order
    in_flight: dict[ray.ObjectRef, str] = {}
    run_seconds: dict[str, float] = {}
    failed: dict[str, str] = {}
    try:
        while queue or in_flight:
            while queue and len(in_flight) < limit:
                run = queue.pop()
                task = _run_task.remote(plan.sweep.scenario(run.overrides, run.seed), run.run_id)
                in_flight[task] = run.run_id
            (done,), _ = ray.wait(list(in_flight), num_returns=1)
            run_id = in_flight.pop(done)
            try:
                seconds, files = ray.get(done)
                store_run(runs_dir, run_id, files, records[run_id])
                run_seconds[run_id] = seconds
            except ray.exceptions.RayError as error:
                failed[run_id] = error_line(error)
            except OSError as error:  # the driver could not write the run directory
                failed[run_id] = f"{type(error).__name__}: {error}"
            if run_id in failed:
                bar.write(f"run {run_id} failed: {failed[run_id]}")
            bar.update()
            bar.set_postfix(failed=len(failed), refresh=False)
    except KeyboardInterrupt:
        for task in in_flight:  # their runs are not stored, so a resumed sweep runs them
            ray.cancel(task, force=True)
        raise
    finally:
        bar.close()
    return run_seconds, failed


def error_line(error: ray.exceptions.RayError) -> str:
    """The one line that says why a task failed: the exception raised inside it, not Ray's wrapping."""
    cause = getattr(error, "cause", None)
    if cause is not None:
        text = str(cause).strip()
        return f"{type(cause).__name__}: {text.splitlines()[0]}" if text else type(cause).__name__
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def store_run(runs_dir: Path, run_id: str, files: dict[str, bytes], record: dict[str, Any]) -> None:
    """Write a finished run's files and `sweep-run.json` to `runs_dir/<run_id>/`, replacing whatever was there
    in one rename (a sweep killed while writing leaves only a `.partial` directory, rewritten next time)."""
    partial = runs_dir / f".{run_id}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name, data in files.items():
        (partial / name).parent.mkdir(parents=True, exist_ok=True)
        (partial / name).write_bytes(data)
    (partial / RECORD).write_text(json.dumps(record, indent=2, default=str) + "\n")
    final = runs_dir / run_id
    if final.is_dir():
        shutil.rmtree(final)
    os.replace(partial, final)


@ray.remote(num_cpus=1)
def _run_task(scenario: Scenario, run_id: str) -> tuple[float, dict[str, bytes]]:
    """One run in a scratch directory of this node; returns the seconds it took and its files (path relative
    to the run directory -> bytes). A sweep's runs are small (a few hundred kB of telemetry each), so sending
    them back through the object store costs little and spares a cluster the need for shared storage."""
    with tempfile.TemporaryDirectory(prefix="quotalab-sweep-") as scratch:
        run_dir = Path(scratch) / run_id
        start = time.perf_counter()
        run_scenario(scenario, run_dir, progress=False)
        seconds = time.perf_counter() - start
        files = [path for path in run_dir.rglob("*") if path.is_file()]
        return seconds, {str(path.relative_to(run_dir)): path.read_bytes() for path in files}
