"""Runs as Ray tasks: everything runs once, a resumed sweep reruns only what is missing, a failure is reported."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from experiments.sweep.execute import RECORD, execute_sweep
from experiments.sweep.expand import plan_sweep
from experiments.sweep.spec import Sweep, load_sweep

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


def test_failed_runs_are_reported_and_the_others_still_run(ray_session, tmp_path, monkeypatch):
    plan = plan_sweep(load_sweep(write_sweep(tmp_path, {**SWEEP, "grid": {"channel.loss": [0.0, 0.1, 0.2]}})))
    broken, blocked, fine = (run.run_id for run in plan.runs[::2])
    scenario = Sweep.scenario

    def break_one(sweep, overrides, seed):  # a scenario that fails inside its task, on an unknown backend
        made = scenario(sweep, overrides, seed)
        return dataclasses.replace(made, backend="bogus") if overrides == plan.runs[0].overrides else made

    monkeypatch.setattr(Sweep, "scenario", break_one)
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    (runs_dir / blocked).write_text("not a directory")  # the driver cannot store that run
    summary = execute_sweep(plan, runs_dir, progress=False)
    assert fine in summary.ran and len(summary.ran) == 3
    assert sorted(summary.failed) == sorted([broken, plan.runs[1].run_id, blocked])
    assert summary.failed[broken] == "ValueError: backend: unknown 'bogus' (known: local, ray)"
    assert summary.failed[blocked].startswith("NotADirectoryError: ")
    assert not (runs_dir / broken).exists()
