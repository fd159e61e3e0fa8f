"""`quotalab run`: a good scenario runs and prints its final table; a bad one is refused with one line naming
the key (exit status 2, no traceback, nothing started); Ctrl-C leaves an interrupted, readable run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import yaml

import experiments
from experiments.cli import main

SCENARIOS = Path(experiments.__file__).parent / "scenarios"
MAIN = Path(experiments.__file__).resolve().parents[1]

GOOD = {
    "name": "cli",
    "rounds": 10,
    "backend": "local",
    "policy": {"name": "pip82-proportional"},
    "groups": [
        {"name": "tenant-a/ns-1", "quota": {"publish_msgs_per_s": 100}},
        {"name": "tenant-b/ns-1", "quota": {"publish_msgs_per_s": 50}},
    ],
    "brokers": [
        {"name": "broker-1", "workload": [{"group": "tenant-a/ns-1", "msgs_per_s": 80}]},
        {"name": "broker-2", "workload": [{"group": "tenant-a/ns-1", "msgs_per_s": 40},
                                          {"group": "tenant-b/ns-1", "msgs_per_s": 20}]},
    ],
}  # fmt: skip


def write(tmp_path: Path, data: dict, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def changed(edit) -> dict:
    data = json.loads(json.dumps(GOOD))
    edit(data)
    return data


def test_run_a_shipped_scenario_with_overrides(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["run", str(SCENARIOS / "pip82-equal-example.yaml"), "--backend", "local", "--rounds", "5",
                 "--seed", "9", "--out", str(out)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "broker-1=20.0, broker-2=60.0, broker-3=40.0" in captured.out  # PIP-82's equal example
    assert f"telemetry: {out}" in captured.out
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["status"], manifest["rounds_completed"], manifest["seed"], manifest["backend"]) == (
        "complete",
        5,
        9,
        "local",
    )
    rounds = ds.dataset(out / "rounds", format="parquet").to_table()
    assert rounds.num_rows == 5 * 3 and sorted(set(rounds.column("round").to_pylist())) == list(range(5))


def test_run_a_written_scenario(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", str(write(tmp_path, GOOD)), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "tenant-a/ns-1" in printed and "tenant-b/ns-1" in printed
    assert "round 9: 9 rounds since the last event" in printed
    rounds = ds.dataset(out / "rounds", format="parquet").to_table().to_pandas()
    assert len(rounds) == 10 * 3  # broker-1: one group, broker-2: two


BAD = {
    "unknown top-level key": (
        changed(lambda d: d.update(colour="blue")), "colour", "unknown key",
    ),
    "unknown nested key": (
        changed(lambda d: d.update(cleanup={"stale_rounds": 3})), "cleanup.stale_rounds", "unknown key",
    ),
    "negative quota": (
        changed(lambda d: d["groups"][1]["quota"].update(publish_msgs_per_s=-5)),
        "groups[1].quota.publish_msgs_per_s", "-5",
    ),
    "broker naming a missing group": (
        changed(lambda d: d["brokers"][1]["workload"][1].update(group="tenant-z/ns-9")),
        "brokers[1].workload[1].group", "tenant-z/ns-9",
    ),
    "unknown policy": (
        changed(lambda d: d["policy"].update(name="fastest-wins")), "policy.name", "fastest-wins",
    ),
    "unknown policy parameter": (
        changed(lambda d: d["policy"].update(params={"steal_fraction": 0.5})), "policy.params", "steal_fraction",
    ),
    "event after the last round": (
        changed(lambda d: d.update(events=[{"at": 10, "crash": "broker-1"}])), "events[0].at", "10",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_scenario_is_one_line_naming_the_key(tmp_path, capsys, case):
    data, key, detail = BAD[case]
    out = tmp_path / "run"
    path = write(tmp_path, data)
    code = main(["run", str(path), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    line = lines[0]
    assert line.startswith(f"quotalab run: {path}: {key}: "), line
    assert detail in line and "Traceback" not in captured.err
    assert not out.exists()  # refused before anything started


def test_set_overrides_any_key_and_is_checked_like_the_file(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["run", str(SCENARIOS / "pip82-equal-example.yaml"), "--backend", "local", "--rounds", "3"]
    assert main([*args, "--set", "channel.routing=interest", "--set", "channel.loss=0.5", "--out", str(out)]) == 0
    channel = json.loads((out / "manifest.json").read_text())["scenario"]["channel"]
    assert (channel["routing"], channel["loss"]) == ("interest", 0.5)
    capsys.readouterr()
    assert main([*args, "--set", "channel.routing=mesh", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "channel.routing: must be one of broadcast, interest" in err
    assert main([*args, "--set", "channel.routing"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "expected KEY=VALUE" in err


def test_a_bad_override_and_a_missing_file_are_one_line_too(tmp_path, capsys):
    assert main(["run", str(write(tmp_path, GOOD)), "--rounds", "0", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "rounds: must be >= 1" in err
    assert main(["run", str(tmp_path / "nowhere.yaml"), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no such file" in err
    # an event beyond a shortened run is named, not silently dropped
    assert main(["run", str(SCENARIOS / "crash-restart.yaml"), "--backend", "local", "--rounds", "20",
                 "--out", str(tmp_path / "c")]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert "events[1].at" in err and len(err.splitlines()) == 1
    assert not any((tmp_path / name).exists() for name in "abc")


def test_ctrl_c_leaves_an_interrupted_readable_run(tmp_path):
    """SIGINT to a real `quotalab run` process (realtime, 0.1 s rounds): exit status 130, a one-line
    message, and a manifest saying `interrupted` next to Parquet parts that read back."""
    data = changed(lambda d: d.update(rounds=400, mode="realtime", interval_s=0.1))
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "experiments", "run", str(write(tmp_path, data)), "--out", str(out)],
        cwd=MAIN, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # wait for the first flush (every 10 rounds)
            manifest = out / "manifest.json"
            if manifest.exists() and json.loads(manifest.read_text())["rounds_completed"] >= 12:
                break
            assert process.poll() is None, process.communicate()
            time.sleep(0.1)
        else:
            pytest.fail("the run did not get going")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "quotalab run: interrupted" in stderr and "Traceback" not in stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["ended_at"] is not None
    completed = manifest["rounds_completed"]
    assert 12 <= completed < 400
    rounds = ds.dataset(out / "rounds", format="parquet").to_table().to_pandas()
    assert set(rounds.broker) == {"broker-1", "broker-2"}
    assert set(range(10)) <= set(rounds["round"]) and rounds["round"].max() <= completed
    for table in ("rounds", "messages", "events"):
        for part in (out / table).glob("*.parquet"):
            pq.read_table(part)
