"""A real `quotalab run` killed with SIGKILL: its manifest still says `running`, and every reader says `died`
with the rounds whose rows are on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

import experiments
from actors.telemetry.liveness import run_status
from experiments.report import build_report
from experiments.report.load import read_manifests

ROOT = Path(experiments.__file__).resolve().parents[1]
SCENARIO = ROOT / "experiments" / "scenarios" / "churn-and-loss.yaml"
KILL_AFTER_ROUNDS = 20


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("killed") / "run"
    command = [
        sys.executable, "-m", "experiments", "run", str(SCENARIO), "--backend", "local", "--mode", "realtime",
        "--set", "interval_s=0.05", "--rounds", "20000", "--out", str(run_dir),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and driver.poll() is None:
            manifest = _manifest(run_dir)
            if manifest and manifest["rounds_completed"] >= KILL_AFTER_ROUNDS:
                break
            time.sleep(0.05)
        assert driver.poll() is None, "the run ended before it could be killed"
        os.kill(driver.pid, signal.SIGKILL)
    finally:
        driver.kill()
        driver.wait()
    return run_dir


def _manifest(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def test_a_killed_driver_leaves_a_run_that_reads_as_died_with_its_rounds(killed_run):
    manifest = _manifest(killed_run)
    assert manifest["status"] == "running"  # nobody could mark it
    assert run_status(manifest) == "died"
    read_manifests([killed_run])  # every part on disk has a readable footer: none was left half-written
    rounds_on_disk = ds.dataset(killed_run / "rounds", format="parquet").to_table().column("round").to_pylist()
    completed = manifest["rounds_completed"]
    assert completed >= KILL_AFTER_ROUNDS
    assert set(range(completed)) <= set(rounds_on_disk)


@pytest.mark.spark
def test_the_report_shows_a_died_run_with_its_rounds(killed_run, spark, tmp_path):
    report = build_report([killed_run], tmp_path / "report", spark=spark)
    (run,) = json.loads((tmp_path / "report" / "summary.json").read_text())["runs"]
    assert run["status"] == "died" and run["rounds"] >= _manifest(killed_run)["rounds_completed"]
    assert f"died (driver gone) after {run['rounds']} rounds" in report.read_text()
