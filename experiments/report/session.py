"""The one SparkSession the report jobs, the CLI and the tests share."""

from __future__ import annotations

import os
import sys
import warnings

from pyspark.sql import SparkSession


def spark_session(master: str = "local[*]") -> SparkSession:
    """Get or create the `quotalab` SparkSession on `master`, sized for small aggregations on a laptop.

    getOrCreate semantics: when a session already runs (the tests' fixture, a notebook), it is returned as it
    is and `master` is ignored. Few shuffle partitions because the aggregated tables are small; no UI; UTC.
    """
    # The Python workers of local masters must be this interpreter (same pandas, pyarrow, allocator).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # PySpark warns on every pandas call that pandas 3 is "not yet fully supported"; the grouped UDF and
    # toPandas we use work, and the warning would bury the CLI's own output.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
    session = (
        SparkSession.builder.master(master)
        .appName("quotalab")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    return session
