"""The class archive of Spark's driver JVM (`experiments.report.class_archive`): recorded once, by one process at a
time, kept only from a JVM that exited cleanly, and a damaged one deleted instead of stopping a report."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.errors import UserError
from experiments.report import build_report, class_archive

from .tables import rounds_row, write_run

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def archive(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return class_archive.archive_path("4.3.0", "/usr/bin/java")


def dead_pid() -> int:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(finished.stdout)


def test_the_archive_lives_in_the_users_cache_one_per_pyspark_and_java(archive, tmp_path):
    assert archive.parent == tmp_path / "cache" / "quotalab" / "class-archives"
    assert archive.name.startswith("spark-4.3.0-") and archive.suffix == ".jsa"
    assert class_archive.archive_path("4.3.0", "/opt/other/java") != archive
    assert class_archive.archive_path("4.2.0", "/usr/bin/java") != archive


def test_no_archive_records_one_kept_once_its_jvm_has_ended(archive):
    use = class_archive.archive_use(archive, record=True)
    recorded = archive.with_suffix(".recording")
    assert use.recording and use.java_options.startswith(f"-XX:ArchiveClassesAtExit={recorded} ")
    lock = archive.with_suffix(".lock")
    assert lock.read_text() == str(os.getpid())  # held while the JVM starts
    jvm = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    class_archive.recording_by(use, jvm.pid)
    recorded.write_bytes(b"classes")  # what the JVM writes as it exits
    # while the recording JVM lives: no archive, and nobody else records
    assert class_archive.archive_use(archive, record=True) == class_archive.ArchiveUse(archive, "")
    jvm.stdin.close()
    jvm.wait()
    kept = class_archive.archive_use(archive, record=True)
    assert kept.java_options.startswith(f"-XX:SharedArchiveFile={archive} ") and kept.maps
    assert archive.read_bytes() == b"classes"
    assert [p.name for p in archive.parent.iterdir()] == [archive.name]  # no lock, no recording left


def test_a_recording_jvm_that_wrote_nothing_leaves_no_archive_and_the_next_report_records(archive):
    use = class_archive.archive_use(archive, record=True)
    class_archive.recording_by(use, dead_pid())  # it ended without writing (killed before it exited)
    again = class_archive.archive_use(archive, record=True)
    assert again.recording and not archive.exists()
    assert archive.with_suffix(".lock").read_text() == str(os.getpid())


def test_a_jvm_that_did_not_start_releases_the_lock(archive):
    use = class_archive.archive_use(archive, record=True)
    class_archive.recording_by(use, None)
    assert list(archive.parent.iterdir()) == []


def test_without_record_or_with_a_cache_it_cannot_write_nothing_is_recorded(archive, monkeypatch):
    assert class_archive.archive_use(archive, record=False) == class_archive.ArchiveUse(archive, "")
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/no-such-cache")  # mkdir fails, even as root
    unwritable = class_archive.archive_path("4.3.0", "/usr/bin/java")
    assert class_archive.archive_use(unwritable, record=True) == class_archive.ArchiveUse(unwritable, "")


def test_a_report_that_starts_its_own_session_records_the_archive(tmp_path, monkeypatch):
    asked = {}

    def spark_session(*args: object, **kwargs: object) -> None:
        asked.update(kwargs)
        raise UserError("stop here")

    monkeypatch.setattr("experiments.report.session.spark_session", spark_session)
    run = write_run(tmp_path, "r1", [rounds_row(0, "b1", usage=1.0, demand=1.0, quota=2.0)], [], [])
    with pytest.raises(UserError, match="stop here"):
        build_report([run], tmp_path / "out")
    assert asked == {"record_classes": True}


START = """
import sys
from experiments.report.session import spark_session
spark_session("local[1]", record_classes=sys.argv[1] == "record").range(3).count()
"""


@pytest.mark.spark
@pytest.mark.slow
def test_a_recorded_archive_is_kept_started_from_and_deleted_when_damaged(tmp_path):
    """Three JVMs, each in a process of its own (a session is one per process): the first records (it writes
    the archive as it exits, after its process), the second keeps the archive and starts from it, the third
    finds it cut in half (a JVM crashes mapping such a file), deletes it and starts without."""
    env = os.environ | {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    archives = tmp_path / "cache" / "quotalab" / "class-archives"

    def start(record: bool) -> None:
        command = [sys.executable, "-c", START, "record" if record else "use"]
        finished = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert finished.returncode == 0, finished.stderr[-3000:]

    start(record=True)
    archive = next(archives.glob("*.lock")).with_suffix(".jsa")
    recording_jvm = class_archive.recording_jvm(archive)
    assert Path(f"/proc/{recording_jvm}/comm").read_text().strip() == "java"  # the JVM itself, not its launcher
    while class_archive.recording_jvm(archive) is not None:  # it writes the archive as it exits
        time.sleep(0.2)
    start(record=False)
    assert list(archives.iterdir()) == [archive]  # kept: no lock, no recording left
    assert archive.suffix == ".jsa" and archive.stat().st_size > 10 * 2**20
    archive.chmod(0o644)
    with open(archive, "r+b") as damaged:
        damaged.truncate(archive.stat().st_size // 2)
    start(record=False)
    assert list(archives.iterdir()) == []  # its crash log too
    assert not list(ROOT.glob("hs_err_pid*.log"))  # none in the working directory
