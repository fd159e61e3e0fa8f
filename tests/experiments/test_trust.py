"""What a careless file or a loose key still cannot do (issue 22): key files and folders keep their modes whatever
the umask, a key others may read is refused, a run signed with the shared cluster key says once what that
allows, and a file a scenario names cannot block the loader or fill its memory."""

from __future__ import annotations

import os
import resource
import stat
import threading
from pathlib import Path

import pytest
import yaml

from experiments.cli import main
from experiments.scenario import load_scenario
from experiments.scenario.keys import SHARED_KEY_WARNING
from experiments.user_files import UnreadableFileError, read_capped

SCENARIO = {
    "name": "trust",
    "rounds": 3,
    "backend": "local",
    "groups": [{"name": "g", "quota": {"publish_msgs_per_s": 100}}],
    "brokers": [
        {"name": "b1", "workload": [{"group": "g", "msgs_per_s": 80}]},
        {"name": "b2", "workload": [{"group": "g", "msgs_per_s": 40}]},
    ],
}


def write_scenario(folder: Path, **changes: object) -> Path:
    path = folder / "trust.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, **changes}, sort_keys=False))
    return path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_000():
    previous = os.umask(0)
    yield
    os.umask(previous)


def test_quotalab_keys_writes_0700_and_0600_under_umask_000(tmp_path, capsys, umask_000):
    out = tmp_path / "keys"
    assert main(["keys", "--out", str(out), "--scenario", str(write_scenario(tmp_path))]) == 0
    assert mode(out) == 0o700
    assert {path.name: mode(path) for path in out.iterdir()} == {
        "b1.key": 0o600,
        "b1.pub": 0o644,
        "b2.key": 0o600,
        "b2.pub": 0o644,
    }
    assert "wrote 4 files" in capsys.readouterr().out
    scenario = load_scenario(write_scenario(tmp_path, reporting={"key_dir": "keys"}))
    assert sorted(scenario.reporting.broker_keys) == ["b1", "b2"]


def test_quotalab_keys_reads_the_brokers_of_a_scenario_whose_keys_do_not_exist_yet(tmp_path):
    path = write_scenario(tmp_path, reporting={"key_dir": "keys"})
    assert main(["keys", "--out", str(tmp_path / "keys"), "--scenario", str(path)]) == 0
    assert load_scenario(path).reporting.broker_keys is not None


def test_quotalab_keys_refuses_a_folder_others_may_write_in(tmp_path, capsys):
    out = tmp_path / "shared"
    out.mkdir()
    out.chmod(0o777)
    assert main(["keys", "--out", str(out), "--brokers", "b1"]) == 2
    err = capsys.readouterr().err
    assert err == f"quotalab keys: --out: others may replace the keys in '{out}' (mode 0777): run chmod 700 {out}\n"
    assert not any(out.iterdir())


def test_a_key_others_may_read_is_refused_with_the_fix(tmp_path, capsys):
    assert main(["keys", "--out", str(tmp_path / "keys"), "--brokers", "b1", "b2"]) == 0
    (tmp_path / "keys" / "b2.key").chmod(0o644)
    path = write_scenario(tmp_path, reporting={"key_dir": "keys"})
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    fix = f"run chmod 600 {tmp_path / 'keys' / 'b2.key'}"
    assert capsys.readouterr().err.splitlines() == [
        f"quotalab run: {path}: reporting.key_dir: b2.key: a key its group or others may read (mode 0644): {fix}"
    ]
    (tmp_path / "keys" / "b2.key").chmod(0o600)  # the fix it names works
    assert load_scenario(path).reporting.broker_keys is not None


def test_a_run_signed_with_the_cluster_key_warns_once(tmp_path, capsys):
    (tmp_path / "cluster.key").write_text("a-cluster-key\n")
    (tmp_path / "cluster.key").chmod(0o600)
    path = write_scenario(tmp_path, reporting={"hmac_key_file": "cluster.key"})
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and f"warning: {SHARED_KEY_WARNING}\n" in err
    assert "any broker" in SHARED_KEY_WARNING and "reporting.key_dir" in SHARED_KEY_WARNING


def test_a_run_with_per_broker_keys_or_none_does_not_warn(tmp_path, capsys):
    assert main(["keys", "--out", str(tmp_path / "keys"), "--brokers", "b1", "b2"]) == 0
    for index, reporting in enumerate([{"key_dir": "keys"}, {}]):
        path = write_scenario(tmp_path, reporting=reporting)
        capsys.readouterr()
        assert main(["run", str(path), "--out", str(tmp_path / f"run-{index}")]) == 0
        assert "warning" not in capsys.readouterr().err


def test_a_trace_that_is_a_named_pipe_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "day.csv")
    refused: list[str] = []

    def load() -> None:
        try:
            read_capped(tmp_path / "day.csv", 1024)
        except UnreadableFileError as problem:
            refused.append(str(problem))

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(timeout=30)  # the open must not wait for a writer
    assert refused == ["not a regular file (a named pipe)"]


def test_a_huge_sparse_trace_is_refused_before_a_byte_is_read(tmp_path):
    trace = tmp_path / "day.csv"
    with trace.open("wb") as file:
        file.truncate(2**40)  # 1 TiB, sparse: no disk used
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(UnreadableFileError, match=r"^file too large \(more than 16 MiB\)$"):
        read_capped(trace, 16 * 2**20)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_kb < 16 * 1024  # no 16 MiB read either


def test_a_file_whose_size_says_less_than_it_holds_is_still_capped(tmp_path):
    """/proc's files are regular files of size 0: the cap holds on what is read (`read` stops one byte past it),
    not only on the size the file claims."""
    assert Path("/proc/self/status").stat().st_size == 0
    with pytest.raises(UnreadableFileError, match=r"^file too large \(more than 64 bytes\)$"):
        read_capped(Path("/proc/self/status"), 64)
    path = tmp_path / "day.csv"
    path.write_bytes(b"x" * 64)
    assert read_capped(path, 64) == b"x" * 64
