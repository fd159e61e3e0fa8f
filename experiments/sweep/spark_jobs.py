"""The sweeps' Spark jobs: each run's metrics and a sweep's ranking and outputs, in one SparkSession.

`SparkJobs` is a plain class (usable in-process); a sweep on Ray holds it as an actor on the driver's node
(`spark_actor`, its SparkSession started at the first measure), named so that a program running several sweeps
(the tests) can start it once, keep the handle, and have every sweep find it by name (`find_spark_actor`).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.sweep.expand import Configuration, SweepPlan
from experiments.sweep.rank import collect_run_metrics
from experiments.sweep.results import build_results
from experiments.sweep.store import Metrics, RunStore, this_node

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_ACTOR = "quotalab-sweep-spark"


class SparkJobs:
    """The sweeps' Spark jobs in one SparkSession, started on first use: each run's metrics (the report
    module's), and a sweep's ranking and outputs (`results.build_results`)."""

    def __init__(self, master: str = "local[*]", spark: SparkSession | None = None) -> None:
        self.master = master
        self._spark = spark
        self._owns_spark = spark is None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SparkJobs(master={self.master!r}, spark={'up' if self._spark else 'down'})"

    def measure(self, run_dirs: list[Path]) -> dict[str, Metrics]:
        """run_id -> metrics of each run directory (`rank.collect_run_metrics`)."""
        return collect_run_metrics(self.spark(), run_dirs)

    def results(
        self, plan: SweepPlan, candidates: list[Configuration], runs_dir: Path, out_dir: Path, **kwargs: Any
    ) -> Any:
        """`results.build_results` over the runs in `runs_dir` (read, not written: this may be another process
        than the sweep's store, on the same machine)."""
        reader = RunStore(runs_dir, self)
        return build_results(plan, candidates, reader, Path(out_dir), spark=self.spark(), **kwargs)

    def close(self) -> None:
        """Stop the SparkSession if these jobs started it."""
        with self._lock:
            if self._spark is not None and self._owns_spark:
                self._spark.stop()
            self._spark = None

    def spark(self) -> SparkSession:
        with self._lock:
            if self._spark is None:
                from experiments.report.session import spark_session

                self._spark = spark_session(self.master)
            return self._spark


def spark_actor(master: str) -> Any:
    """A `SparkJobs` actor on this node, named `SPARK_ACTOR` (`find_spark_actor`). Like any actor it lives as
    long as its handle: keep it to keep the JVM for the next sweep."""
    import ray

    options = {"name": SPARK_ACTOR, "num_cpus": 0, "max_concurrency": 8, "scheduling_strategy": this_node()}
    return ray.remote(SparkJobs).options(**options).remote(master)


def find_spark_actor() -> Any | None:
    """The `SparkJobs` actor this program started, if any."""
    import ray

    try:
        return ray.get_actor(SPARK_ACTOR)
    except ValueError:
        return None
