"""Runs as Ray tasks: everything runs once, a resumed sweep reruns only what is missing, a failure is reported."""

from __future__ import annotations

import json
import shutil

import pytest

from experiments.sweep.execute import RECORD, execute_sweep
from experiments.sweep.expand import plan_sweep
from experiments.sweep.spec import load_sweep

from .sweeps import write_sweep

pytestmark = pytest.mark.ray
SWEEP = {"seeds": [1, 2], "fixed": {"rounds": 8}, "grid": {"policy.params.steal_fraction": [0.25, 0.75]}}


def test_a_resumed_sweep_reruns_only_the_runs_not_complete(ray_session, tmp_path):
    plan = plan_sweep(load_sweep(write_sweep(tmp_path, SWEEP)))
    runs_dir = tmp_path / "out" / "runs"
    first = execute_sweep(plan, runs_dir, progress=False)
    run_ids = [run.run_id for run in plan.runs]
    assert sorted(first.ran) == sorted(run_ids) and first.skipped == () and first.failed == {}
    for run_id in run_ids:
        manifest = json.loads((runs_dir / run_id / "manifest.json").read_text())
        record = json.loads((runs_dir / run_id / RECORD).read_text())
        assert manifest["status"] == "complete" and manifest["rounds_completed"] == 8
        assert record["overrides"] == plan.runs[run_ids.index(run_id)].overrides

    again = execute_sweep(plan, runs_dir, progress=False)
    assert again.ran == () and sorted(again.skipped) == sorted(run_ids)

    deleted, interrupted, tampered, kept = run_ids
    shutil.rmtree(runs_dir / deleted)
    manifest_path = runs_dir / interrupted / "manifest.json"
    manifest_path.write_text(json.dumps({**json.loads(manifest_path.read_text()), "status": "interrupted"}))
    record_path = runs_dir / tampered / RECORD
    record_path.write_text(json.dumps({**json.loads(record_path.read_text()), "overrides": {"channel.loss": 0.5}}))

    resumed = execute_sweep(plan, runs_dir, progress=False)
    assert sorted(resumed.ran) == sorted([deleted, interrupted, tampered])
    assert resumed.skipped == (kept,)
    assert json.loads(manifest_path.read_text())["status"] == "complete"


def test_a_failed_run_is_reported_and_the_others_still_run(ray_session, tmp_path):
    plan = plan_sweep(load_sweep(write_sweep(tmp_path, {**SWEEP, "seeds": [1]})))
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    blocked, other = (run.run_id for run in plan.runs)
    (runs_dir / blocked).write_text("not a directory")  # the task cannot make its run directory
    summary = execute_sweep(plan, runs_dir, progress=False)
    assert summary.ran == (other,)
    assert list(summary.failed) == [blocked]
    assert summary.failed[blocked].startswith("FileExistsError: ")
    assert "\n" not in summary.failed[blocked]
