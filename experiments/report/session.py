"""The one SparkSession the report jobs, the CLI and the tests share, started quietly.

Spark's JVM prints 8-9 lines as it starts (log4j's profile, the host name it resolved, the native-hadoop
library, the log level): nothing a user acts on. Unless `verbose`, the JVM is started with its standard
error on /dev/null (it inherits the file descriptor when it is launched), so those lines and its later WARN
lines are not shown; a failure still reaches Python as an exception, and `--verbose` shows everything.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator

from pyspark import SparkContext
from pyspark.sql import SparkSession

from experiments.errors import UserError
from experiments.report import class_archive

PANDAS_3_WARNING = "PySpark does not yet fully support pandas"
PANDAS_COPY_WARNING = "The copy keyword is deprecated"  # PySpark's own astype(copy=False), under pandas 3
# A report's JVM lives for one command and most of its time goes to loading classes and compiling the plans'
# code, not running it: C2's optimising compiler and the parallel GC's threads take cores from the two a laptop
# has, and the bytecode verifier checks each of the thousands of classes Spark loads from its own jars (those
# pip installed with pyspark: not code from outside). Measured with `benchmarks/bench_report.py`
# (results/report.json): the demo's report and a million rows both faster; without the verifier alone, the
# demo's report 14.4 -> 12.7 s (medians of 5, alternating, on a busy machine). With C1 alone the JVM reserves
# 48 MB for compiled code, which a long-lived session (the tests', a sweep's) filled with the code Spark generates
# for each query: compilation stopped, then Spark's scheduler, and its context with it. 256 MB is reserved
# address space, not memory used.
JAVA_OPTIONS = (
    "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m -XX:+UseSerialGC -XX:+UnlockDiagnosticVMOptions "
    "-XX:-BytecodeVerificationRemote"
)
# Past a million `rounds` rows the work outweighs the start: C2 compiles the hot loops (the sort, the
# water-filling's array functions, which Spark interprets per element) and pays for its threads. Measured on
# PIP-82's 7.5 million rows (a 15-round `scale-pip82` run, the same code, same load): the report 95.8 s with C1
# only, 74.5 s with C1 then C2; its per-round stage 45 s against 25 s. C2 compiles only the hottest code, the
# loops over every row: with the default thresholds its thread took 25 s of CPU from the two cores. At 10 times
# the defaults for calls and loops' back edges the report is shortest (alternating, the report given the
# machine: 59.4 s, against 62.7 s with the defaults, 62.2 s at 3 times, 60.6 s at 30 times, where the tasks slowed
# more than C2 saved). A million rows stay faster with C1 only.
LARGE_JAVA_OPTIONS = JAVA_OPTIONS.replace("-XX:TieredStopAtLevel=1 ", "") + (
    " -XX:Tier4InvocationThreshold=50000 -XX:Tier4CompileThreshold=66000 -XX:Tier4BackEdgeThreshold=400000"
)
C1_ONLY_UP_TO_ROWS = 1_000_000
SHUFFLE_PARTITIONS = 4  # the session's; the `rounds` rows' shuffle takes more for more rows (`rounds_partitions`)
ROWS_PER_SHUFFLE_PARTITION = 1_000_000  # `rounds` rows: a partition's sort of them fits the driver's memory


def spark_session(
    master: str = "local[*]", verbose: bool = False, rows: int = 0, record_classes: bool = False
) -> SparkSession:
    """Get or create the `quotalab` SparkSession on `master`, sized for the aggregations of `rows` `rounds` rows
    on a laptop.

    getOrCreate semantics: when a session already runs (the tests' fixture, a notebook), it is returned as it
    is and `master` and `rows` are ignored. Few shuffle partitions because the aggregated tables are small
    (`rounds_partitions` for the one shuffle of the rows); no UI; UTC. The driver's JVM collects with the serial
    GC and does not verify Spark's classes, and up to `C1_ONLY_UP_TO_ROWS` compiles with C1 only
    (`JAVA_OPTIONS`; past it `LARGE_JAVA_OPTIONS`), and so do a cluster's executors (`_start`). It maps Spark's
    classes from the class archive when there is one (`class_archive`); with `record_classes`, a new JVM records it
    as it exits when there is none (what `quotalab report` and `demo` ask: their JVM ends with their process).
    """
    java_options = JAVA_OPTIONS if rows <= C1_ONLY_UP_TO_ROWS else LARGE_JAVA_OPTIONS
    # Any Python worker of a local master must be this interpreter (same pandas, pyarrow, allocator).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName("quotalab")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.execution.replaceHashWithSortAgg", "true")  # metrics.round_cells
    )
    if SparkContext._active_spark_context is not None:  # no JVM to start: the running one takes the settings
        return _started(_start(builder, java_options, verbose), verbose)
    archive = class_archive.this_machines_archive()
    use = class_archive.archive_use(archive, record_classes)
    try:
        session = _start(builder, java_options, verbose, use.java_options)
    except Exception as error:  # PySparkRuntimeError (JAVA_GATEWAY_EXITED), Py4J errors: the JVM did not start
        if use.recording:
            class_archive.recording_by(use, None)
        if not use.maps:
            raise _not_started(master, verbose, error) from None
        class_archive.discard(archive)  # damaged: the JVM crashed as it mapped it
        try:
            session = _start(builder, java_options, verbose)
        except Exception as again:
            raise _not_started(master, verbose, again) from None
    if use.recording:
        class_archive.recording_by(use, SparkContext._gateway.proc.pid)
    return _started(session, verbose)


def _start(builder: SparkSession.Builder, java_options: str, verbose: bool, archive_options: str = "") -> SparkSession:
    """The session, its driver's JVM started with `java_options` and `archive_options` (`class_archive`'s).

    On a cluster the executors run the tasks in JVMs of their own, started for the report and ended with it (a
    standalone, YARN or Kubernetes master starts an application's executors for it): the driver's reasons hold for
    them, and they take its `java_options`, not the class archive, which is this machine's. Measured on PIP-82's 7.5
    million rows on a standalone master and worker of 2 cores, alternating on a busy machine: the executor's process
    took 100 and 105 s of CPU with Java's defaults (G1, C2 at its thresholds, Spark's classes verified), 86 and 84 s
    with these; its tasks' own CPU 60.6, 58.4 and 60.3 s against 53.5, 55.6 and 52.7 s (and 61.2 s with G1 and the
    other options).
    """
    with contextlib.nullcontext() if verbose else _stderr_to_devnull(), pandas_3_accepted():
        # PySpark checks the pandas version as it starts: the same warning
        return (
            builder.config("spark.driver.extraJavaOptions", f"{java_options} {archive_options}".strip())
            .config("spark.executor.extraJavaOptions", java_options)
            .getOrCreate()
        )


def _not_started(master: str, verbose: bool, error: Exception) -> UserError:
    hint = "" if verbose else "; run again with --verbose to see Spark's output"
    return UserError(f"Spark did not start on {master} ({' '.join(str(error).split())[:200]}){hint}")


def _started(session: SparkSession, verbose: bool) -> SparkSession:
    session.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    return session


def rounds_partitions(rows: int) -> int:
    """How many partitions the `rounds` rows are shuffled into (`metrics.round_cells`): one per
    `ROWS_PER_SHUFFLE_PARTITION`, at least `SHUFFLE_PARTITIONS`. At 1.9 million rows a partition its sort
    spilled; a bounded partition keeps the cost linear in the rows. The smaller tables after it keep the
    session's `SHUFFLE_PARTITIONS` (an approximate quantile's value depends on how its input is split)."""
    return max(SHUFFLE_PARTITIONS, -(-rows // ROWS_PER_SHUFFLE_PARTITION))


@contextlib.contextmanager
def _stderr_to_devnull() -> Iterator[None]:
    """File descriptor 2 on /dev/null while the JVM is launched (it keeps it), then back."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def pandas_3_accepted() -> Iterator[None]:
    """Around a call into PySpark's pandas API (`toPandas`) and the session's start: PySpark 4.3 warns on each
    that pandas 3 is "not yet fully supported", and its Arrow conversion passes pandas a `copy` keyword pandas 3
    deprecates. The one pandas feature used, `toPandas` of small tables with plain columns, is covered by the
    report's and the sweep's tests under pandas 3; the warnings say nothing more."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PANDAS_3_WARNING, category=FutureWarning)
        warnings.filterwarnings("ignore", message=PANDAS_COPY_WARNING, category=DeprecationWarning)
        yield
