"""The cluster key comes from a file or an environment variable named in the scenario, and is written nowhere:
not in the manifest, the telemetry, the command's output, nor a scenario's repr."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from experiments.cli import main
from experiments.planner import build_plan
from experiments.scenario import load_scenario

SIGNED = {
    "name": "signed",
    "rounds": 4,
    "backend": "local",
    "groups": [{"name": "g", "quota": {"publish_msgs_per_s": 100}}],
    "brokers": [
        {"name": "b1", "workload": [{"group": "g", "msgs_per_s": 80}]},
        {"name": "b2", "workload": [{"group": "g", "msgs_per_s": 40}]},
    ],
}


def write_signed(folder: Path, reporting: dict) -> Path:
    path = folder / "signed.yaml"
    path.write_text(yaml.safe_dump({**SIGNED, "reporting": reporting}, sort_keys=False))
    return path


def test_key_file_is_relative_to_the_scenario(tmp_path, monkeypatch):
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "cluster.key").write_bytes(b"  file-key\n")
    (tmp_path / "keys" / "cluster.key").chmod(0o600)  # a key others may read is refused
    path = write_signed(tmp_path, {"hmac_key_file": "keys/cluster.key"})
    monkeypatch.chdir("/")
    scenario = load_scenario(path)
    assert scenario.reporting.hmac_key == b"file-key"  # surrounding whitespace is not part of the key
    assert build_plan(scenario).node.hmac_key == b"file-key"


def test_key_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("QUOTALAB_TEST_KEY", "env-key")
    scenario = load_scenario(write_signed(tmp_path, {"hmac_key_env": "QUOTALAB_TEST_KEY"}))
    assert scenario.reporting.hmac_key == b"env-key"
    assert scenario.reporting.hmac_key_env == "QUOTALAB_TEST_KEY"


def test_no_key_no_signing(tmp_path):
    scenario = load_scenario(write_signed(tmp_path, {}))
    assert scenario.reporting.hmac_key is None and build_plan(scenario).node.hmac_key is None


def test_the_key_is_not_in_the_dict_nor_the_repr(tmp_path, monkeypatch):
    monkeypatch.setenv("QUOTALAB_TEST_KEY", "key-that-must-not-show")
    scenario = load_scenario(write_signed(tmp_path, {"hmac_key_env": "QUOTALAB_TEST_KEY"}))
    reporting = scenario.to_dict()["reporting"]
    assert "hmac_key" not in reporting and reporting["hmac_key_env"] == "QUOTALAB_TEST_KEY"
    assert "key-that-must-not-show" not in repr(scenario) + json.dumps(scenario.to_dict())


def test_a_signed_run_writes_the_key_nowhere(tmp_path, capsys):
    key = f"quotalab-test-key-{secrets.token_hex(16)}"
    (tmp_path / "cluster.key").write_text(key + "\n")
    (tmp_path / "cluster.key").chmod(0o600)
    path = write_signed(tmp_path, {"hmac_key_file": "cluster.key"})
    assert build_plan(load_scenario(path)).node.hmac_key == key.encode()  # the run signs with it
    out = tmp_path / "run"

    code = main(["run", str(path), "--backend", "local", "--out", str(out)])
    captured = capsys.readouterr()

    assert code == 0, captured.err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["scenario"]["reporting"]["hmac_key_file"] == "cluster.key"  # the source, not the key
    files = [file for file in out.rglob("*") if file.is_file()]
    assert {file.suffix for file in files} >= {".json", ".parquet"}
    for file in files:
        assert key.encode() not in file.read_bytes(), file
    for part in out.rglob("*.parquet"):  # values as written, in case a page were compressed
        assert key not in str(pq.read_table(part).to_pylist()), part
    assert key not in captured.out + captured.err
    rounds = pq.read_table(out / "rounds").to_pandas()
    assert (rounds[rounds["round"] == 3].view_brokers == 2).all()  # the signed reports were accepted


def test_a_run_with_per_broker_keys_writes_no_key_anywhere(tmp_path, capsys):
    assert main(["keys", "--out", str(tmp_path / "keys"), "--brokers", "b1", "b2"]) == 0
    private = {name: (tmp_path / "keys" / f"{name}.key").read_text().strip() for name in ("b1", "b2")}
    path = write_signed(tmp_path, {"key_dir": "keys"})
    scenario = load_scenario(path)
    assert build_plan(scenario).node.public_keys is not None
    assert not any(key in repr(scenario) + json.dumps(scenario.to_dict()) for key in private.values())
    out = tmp_path / "run"

    code = main(["run", str(path), "--backend", "local", "--out", str(out)])
    captured = capsys.readouterr()

    assert code == 0, captured.err
    assert json.loads((out / "manifest.json").read_text())["scenario"]["reporting"]["key_dir"] == "keys"
    for file in (file for file in out.rglob("*") if file.is_file()):
        for key in private.values():
            assert key.encode() not in file.read_bytes() and bytes.fromhex(key) not in file.read_bytes(), file
    assert not any(key in captured.out + captured.err for key in private.values())
    rounds = pq.read_table(out / "rounds").to_pandas()
    assert (rounds[rounds["round"] == 3].view_brokers == 2).all()  # the reports signed per broker were accepted
