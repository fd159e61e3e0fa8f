"""`quotalab report --master spark://...` on a Spark standalone cluster gives the summary `local[2]` gives.

A master and a worker are started from the installed pyspark (`bin/spark-class`, on 127.0.0.1, free ports, a
worker of 2 cores and 1 GiB), the report runs on two runs in a process of its own (a session is one per
process, and the test session's is on `local[2]`), and both JVMs are stopped whatever happens: their process
groups are ended in the fixture's `finally`. Readiness is read from their logs, not waited for by the clock.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from experiments.report import build_report
from experiments.report.session import JAVA_OPTIONS

from .tables import messages_row, rounds_row, write_run

pytestmark = [pytest.mark.spark, pytest.mark.slow]
SPARK_HOME = Path(pyspark.__file__).parent
READY_WITHIN_S = 120  # a JVM's start on a busy 2-core machine; a log line ends the wait as soon as it is written
ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(log: Path, *arguments: str) -> subprocess.Popen:
    """`bin/spark-class ARGUMENTS` in a process group of its own (spark-class execs the JVM in it)."""
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    with log.open("w") as out:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *arguments],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip


def wait_for(log: Path, text: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_WITHIN_S
    while text not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"no {text!r} in {log.name}:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def standalone_master(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """The URL of a running standalone master with one registered worker, and the worker's work directory (an
    application's executor logs); both stopped at the end."""
    logs = tmp_path_factory.mktemp("spark-standalone")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    started: list[subprocess.Popen] = []
    try:
        master = start(logs / "master.log", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                       "--port", str(port), "--webui-port", str(free_port()))  # fmt: skip
        started.append(master)
        wait_for(logs / "master.log", "I have been elected leader", master)
        worker = start(logs / "worker.log", "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                       "--cores", "2", "--memory", "1g", "--webui-port", str(free_port()),
                       "--work-dir", str(logs / "work"))  # fmt: skip
        started.append(worker)
        wait_for(logs / "worker.log", "Successfully registered with master", worker)
        yield url, logs / "work"
    finally:
        for process in reversed(started):
            stop(process)


def flat(value, path: str = "") -> dict:
    """A JSON document as {path: leaf}: sums over groups may add in another order on another master, so numbers
    are compared to 1e-6, the rest exactly."""
    if isinstance(value, dict):
        return {key: leaf for name, inner in value.items() for key, leaf in flat(inner, f"{path}.{name}").items()}
    if isinstance(value, list):
        return {key: leaf for index, inner in enumerate(value) for key, leaf in flat(inner, f"{path}[{index}]").items()}
    return {path: value}


def run_rows(shift: float) -> list[dict]:
    """Two groups on three brokers over 12 rounds: g over its quota in rounds 2-3, h never."""
    rows = []
    for r in range(12):
        for broker in ("b1", "b2", "b3"):
            usage = 40.0 + shift if r in (2, 3) else 30.0
            rows.append(rounds_row(r, broker, usage=usage, demand=50.0, quota=100.0, group="g"))
            rows.append(rounds_row(r, broker, usage=10.0, demand=10.0 + r, quota=60.0, group="h"))
    return rows


def test_a_report_on_a_standalone_cluster_has_the_summary_of_local_2(standalone_master, spark, tmp_path):
    url, work = standalone_master
    messages = [messages_row(r, b, 100, 200) for r in range(12) for b in ("b1", "b2", "b3")]
    runs = [write_run(tmp_path, name, run_rows(shift), messages, []) for name, shift in (("r1", 5.0), ("r2", 9.0))]
    out = tmp_path / "cluster"
    command = [sys.executable, "-m", "experiments", "report", *map(str, runs), "--out", str(out),
               "--master", url]  # fmt: skip
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    local = build_report(runs, tmp_path / "local", spark=spark)

    on_cluster = json.loads((out / "summary.json").read_text())
    assert flat(on_cluster) == pytest.approx(flat(json.loads((local.parent / "summary.json").read_text())))
    assert [run["overall"]["peak_overshoot"] for run in on_cluster["runs"]] == pytest.approx(
        [0.35, 0.47]
    )  # 3 x 45, 3 x 49 of 100
    # the executors wrote the full tables where the driver said (a path both see)
    assert list((out / "tables" / "per_round.parquet").glob("part-*.parquet"))
    # its executor's JVM was started with the driver's options (the worker logs the command it ran)
    (executor_log,) = work.glob("app-*/*/stderr")
    launched = executor_log.read_text(errors="replace").split("========")[0]
    assert all(f'"{option}"' in launched for option in JAVA_OPTIONS.split())
