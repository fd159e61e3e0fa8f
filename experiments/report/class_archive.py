"""A class-data archive of the classes a report's JVM loads (the JDK's dynamic AppCDS), kept in the user's cache.

Why: a report's JVM spends its first seconds loading and linking the ~10,000 classes of Spark's jars. Mapped
from an archive instead, they are ready at once: a session and its first query 5.6 s -> 3.3 s (alternating, 2
each, this machine), the demo's report 16.4 s -> 13.5 s (3 each).

How: the first report on a machine (per pyspark version and `java`) records: its JVM runs with
`-XX:ArchiveClassesAtExit` and writes the classes it loaded as it exits, after the report has returned (some 13 s
of one core, once; recording also slows that report: the demo's 27.5 s on a fresh clone, the next 17.9 s). A lock
file holds the recording JVM's process id: while it lives, other reports start without an archive and do not
record; once it has ended, the next report keeps what it wrote as the archive and starts from it
(`-XX:SharedArchiveFile`). A JVM that cannot use the archive (another build of Java, other jars) ignores it. A
damaged archive (a JVM killed while it wrote) is the one case that stops a JVM from starting (it crashes as it maps
it): `session.spark_session` then deletes it and starts again without.

Nothing else depends on the archive: deleting the folder (`cache_dir()`) only costs the next report its
recording.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # the JVM's notes on classes it cannot archive: nothing to act on


@dataclass(frozen=True)
class ArchiveUse:
    """How a JVM is to start with `archive`: the options to add, and whether they record it."""

    archive: Path
    java_options: str
    recording: bool = False

    @property
    def maps(self) -> bool:
        """Whether the JVM maps the archive (rather than records it, or starts without one)."""
        return bool(self.java_options) and not self.recording


def cache_dir() -> Path:
    """Where the archives live: `$XDG_CACHE_HOME/quotalab/class-archives` (default `~/.cache/...`)."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "quotalab" / "class-archives"


def archive_path(pyspark_version: str, java: str | None) -> Path:
    """The archive of this pyspark and this `java` (the executable PySpark launches, resolved)."""
    java_id = str(Path(java).resolve()) if java else "no-java"
    digest = hashlib.sha256(f"{pyspark_version}\0{java_id}".encode()).hexdigest()[:16]
    return cache_dir() / f"spark-{pyspark_version}-{digest}.jsa"


def this_machines_archive() -> Path:
    """The archive of the installed pyspark and the `java` its launcher runs."""
    return archive_path(version("pyspark"), launched_java())


def launched_java() -> str | None:
    """The `java` PySpark's launcher runs: `$JAVA_HOME/bin/java`, else the first on the PATH."""
    java_home = os.environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")


def archive_use(archive: Path, record: bool) -> ArchiveUse:
    """Start with `archive` if there is one (kept from a recording that has ended); else, when `record` and no
    other JVM records it, record it (this process holds the lock until `recording_by` names the JVM)."""
    lock, recorded = _lock_path(archive), _recording_path(archive)
    if not archive.exists() and lock.exists() and not _holder_alive(lock):
        with contextlib.suppress(FileNotFoundError):  # nothing written, or another report kept it first
            if recorded.stat().st_size > 0:
                os.replace(recorded, archive)  # atomic: a report starting now sees no archive or the whole one
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
    if archive.exists():  # a JVM that crashes mapping it writes its crash log here, not in the working directory
        crash_log = archive.with_suffix(".crash-%p.log")
        return ArchiveUse(archive, f"-XX:SharedArchiveFile={archive} -XX:ErrorFile={crash_log} {QUIET}")
    if not record or not _take_lock(lock):
        return ArchiveUse(archive, "")
    recorded.unlink(missing_ok=True)
    return ArchiveUse(archive, f"-XX:ArchiveClassesAtExit={recorded} {QUIET}", recording=True)


def recording_by(use: ArchiveUse, jvm_pid: int | None) -> None:
    """The JVM that records `use.archive` started as `jvm_pid` (`None`: it did not start): the lock holds it."""
    if jvm_pid is None:
        _lock_path(use.archive).unlink(missing_ok=True)
    else:
        _lock_path(use.archive).write_text(str(jvm_pid))


def recording_jvm(archive: Path) -> int | None:
    """The process id of the JVM that records `archive`, while it lives (it writes the archive as it exits)."""
    lock = _lock_path(archive)
    return int(lock.read_text()) if lock.exists() and _holder_alive(lock) else None


def discard(archive: Path) -> None:
    """Delete an archive a JVM could not start with, and the crash logs it caused."""
    archive.unlink(missing_ok=True)
    for crash_log in archive.parent.glob(f"{archive.stem}.crash-*.log"):
        crash_log.unlink()


def _lock_path(archive: Path) -> Path:
    return archive.with_suffix(".lock")


def _recording_path(archive: Path) -> Path:
    return archive.with_suffix(".recording")


def _take_lock(lock: Path) -> bool:
    """Create `lock`, holding this process's id; False if it exists or cannot be written (a read-only home)."""
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        with open(lock, "x") as held:
            held.write(str(os.getpid()))
    except OSError:  # FileExistsError included: another process records
        return False
    return True


def _holder_alive(lock: Path) -> bool:
    try:
        os.kill(int(lock.read_text()), 0)
    except (OSError, ValueError):
        return False  # gone, unreadable or not a process id: a stale lock
    return True
