"""Where a sweep's runs live (the run directories on the driver's machine) and the Spark jobs that measure them.

A run directory is `runs_dir/<run_id>/`: the run's telemetry, `manifest.json`, and `sweep-run.json` (the
sweep, candidate, knobs, condition, seed and `fixed` it was run with, then its metrics once measured). A trial
runs its scenario in a scratch directory of whatever node it is on and sends the files here (`put`): they are
written under `.<run_id>.partial/` and renamed to `<run_id>/`, so every run directory is on the driver's disk
(the nodes of a cluster need no shared storage) and appears whole or not at all. `measure` then has the runs'
metrics computed by the Spark jobs (`experiments.sweep.spark_jobs`) and writes them
into their records. A run counts as done when its manifest says `complete` and its record matches the plan and holds its
metrics; one complete but not measured (its trial was lost, with its node, between `put` and `measure`) is
measured by the trial that retries it, not run again (`unmeasured`); anything else at its place (a run made
from other settings, a run interrupted) is replaced when the run is done again. A record also says where its
run ran (`ran_on`: the Ray node's id and address), and the tally counts a run stored twice (`repeated`), so
that a sweep that lost a node shows every run stored once.

`RunStore` is a plain class (usable in-process); a sweep on Ray holds it as an actor on the driver's node, one
per sweep (`store_actor`), which every trial calls, so its `tally` is what that sweep command ran, found
complete and saw fail (the driver shows it as the progress bar).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.sweep.expand import PlannedRun, SweepPlan

if TYPE_CHECKING:
    pass

RECORD = "sweep-run.json"
Metrics = dict[str, float | None]


def run_record(plan: SweepPlan, run: PlannedRun) -> dict[str, Any]:
    """What `sweep-run.json` holds for `run` before its metrics: what the run was made from."""
    record = {
        "sweep": plan.sweep.name,
        "run_id": run.run_id,
        "config_id": run.config_id,
        "knobs": run.knobs,
        "condition": run.condition.overrides,
        "condition_id": run.condition.condition_id,
        "seed": run.seed,
        "fixed": plan.sweep.fixed,
    }
    return json.loads(json.dumps(record, default=str))  # as JSON stores it (tuples become lists)


@dataclass
class Tally:
    """What the trials did through this store: runs ran (-> their own seconds), found complete, failed (-> the
    error line), stored more than once (-> how many times more), and the seconds spent measuring (Spark)."""

    ran: dict[str, float] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)
    measure_s: float = 0.0
    repeated: dict[str, int] = field(default_factory=dict)


class RunStore:
    """The run directories under `runs_dir` (see the module docstring); `spark_jobs` is a `SparkJobs` or its actor
    handle. Thread-safe: as an actor it serves several trials at once."""

    def __init__(self, runs_dir: Path | str, spark_jobs: Any) -> None:
        self.runs_dir = Path(runs_dir).resolve()
        self.spark_jobs = spark_jobs
        self._lock = threading.Lock()
        self._tally = Tally()

    def __repr__(self) -> str:
        return f"RunStore({str(self.runs_dir)!r}, ran={len(self._tally.ran)}, failed={len(self._tally.failed)})"

    def done(self, record: dict[str, Any], *, skipping: bool = False) -> Metrics | None:
        """The metrics of the complete, measured run made from `record`, or None if there is none; `skipping`:
        a trial will not run it again (counted in the tally)."""
        found = self._complete(record)
        metrics = None if found is None else found.get("metrics")
        if not isinstance(metrics, dict):
            return None
        if skipping:
            self._skip(record)
        return metrics

    def unmeasured(self, record: dict[str, Any], *, skipping: bool = False) -> bool:
        """Whether the run made from `record` is complete but not measured (its trial was lost before it could
        measure it): the trial that retries it measures it instead of running it again."""
        found = self._complete(record)
        if found is None or found.get("metrics") is not None:
            return False
        if skipping:
            self._skip(record)
        return True

    def _complete(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """The stored record of the complete run made from `record` (with its metrics and `ran_on` when it has
        them), or None."""
        run_dir = self.runs_dir / record["run_id"]
        try:
            manifest = json.loads((run_dir / "manifest.json").read_text())
            found = json.loads((run_dir / RECORD).read_text())
        except (OSError, ValueError):
            return None
        made_from = {key: value for key, value in found.items() if key not in ("metrics", "ran_on")}
        return found if manifest.get("status") == "complete" and made_from == record else None

    def _skip(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._tally.skipped.add(record["run_id"])

    def complete(self, records: list[dict[str, Any]]) -> list[str]:
        """The run ids of `records` whose runs are complete and measured."""
        return [record["run_id"] for record in records if self.done(record) is not None]

    def put(
        self, record: dict[str, Any], files: dict[str, bytes], seconds: float, ran_on: dict[str, str] | None = None
    ) -> None:
        """Write a finished run's files (path relative to the run directory -> bytes) and its record (no
        metrics yet; `ran_on`: the node that ran it) to `runs_dir/<run_id>/`, replacing whatever was there in
        one rename; `seconds` is the run's own time."""
        run_id = record["run_id"]
        partial = self.runs_dir / f".{run_id}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        for name, data in files.items():
            (partial / name).parent.mkdir(parents=True, exist_ok=True)
            (partial / name).write_bytes(data)
        stored = record if ran_on is None else {**record, "ran_on": ran_on}
        (partial / RECORD).write_text(json.dumps(stored, indent=2) + "\n")
        final = self.runs_dir / run_id
        if final.is_dir():
            shutil.rmtree(final)
        elif final.exists():
            final.unlink()
        os.replace(partial, final)
        with self._lock:
            if run_id in self._tally.ran:
                self._tally.repeated[run_id] = self._tally.repeated.get(run_id, 0) + 1
            self._tally.ran[run_id] = seconds
            self._tally.failed.pop(run_id, None)

    def fail(self, run_id: str, line: str) -> None:
        """A run that raised: counted in the tally with its error line."""
        with self._lock:
            self._tally.failed[run_id] = line

    def tally(self) -> Tally:
        with self._lock:
            tally = self._tally
            return Tally(dict(tally.ran), set(tally.skipped), dict(tally.failed), tally.measure_s, dict(tally.repeated))

    def measure(self, run_ids: list[str]) -> dict[str, Metrics]:
        """The metrics of runs already `put`, computed by the Spark jobs and written into their records."""
        started = time.perf_counter()
        measured = call(self.spark_jobs, "measure", [self.runs_dir / run_id for run_id in run_ids])
        for run_id in run_ids:
            path = self.runs_dir / run_id / RECORD
            record = json.loads(path.read_text())
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps({**record, "metrics": measured[run_id]}, indent=2) + "\n")
            os.replace(temporary, path)
        with self._lock:
            self._tally.measure_s += time.perf_counter() - started
        return measured


def call(target: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call `method` on a plain object or on its actor handle, and wait for the answer."""
    bound = getattr(target, method)
    if not hasattr(bound, "remote"):
        return bound(*args, **kwargs)
    import ray

    return ray.get(bound.remote(*args, **kwargs))


def store_actor(runs_dir: Path, spark_jobs: Any) -> Any:
    """A `RunStore` as a Ray actor on this (the driver's) node, so the run directories are written here; it
    takes no CPU of the trials' and serves several of them at once."""
    import ray

    options = {"num_cpus": 0, "max_concurrency": 8, "scheduling_strategy": this_node()}
    return ray.remote(RunStore).options(**options).remote(Path(runs_dir).resolve(), spark_jobs)  # own cwd there


def this_node() -> Any:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
