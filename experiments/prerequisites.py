"""What a command needs outside Python, checked before it does any work, each failing as one line (a
`UserError`): Java for Spark (`report`, `demo`), a Ray cluster at `--address`, a Redis a scenario names.

Without these checks a missing Java shows as a 31-line `JAVA_GATEWAY_EXITED` traceback after the runs, and
an unreachable `--address` as Ray's warnings until it is stopped.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

from experiments.errors import UserError

MIN_JAVA = 17  # Spark 4
RAY_TIMEOUT_S = 30.0
JAVA_HINT = "Spark needs Java 17 or later: apt-get install -y openjdk-17-jre-headless, or set JAVA_HOME"


def check_java() -> None:
    """Java as PySpark will start it (`$JAVA_HOME/bin/java`, else `java` on the PATH), version 17 or later."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if java is None or not Path(java).exists():
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java on the PATH"
        raise UserError(f"Java not found ({where}). {JAVA_HINT}")
    try:
        answer = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise UserError(f"{java} -version failed ({error}). {JAVA_HINT}") from None
    major = java_major(answer.stderr + answer.stdout)
    if major is None:
        raise UserError(f"{java} -version: no version in its answer. {JAVA_HINT}")
    if major < MIN_JAVA:
        raise UserError(f"{java} is Java {major}. {JAVA_HINT}")


def java_major(version_text: str) -> int | None:
    """The major version in `java -version`'s answer: `version "17.0.9"` -> 17, `version "1.8.0_392"` -> 8."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', version_text)
    if found is None:
        return None
    first, second = int(found.group(1)), found.group(2)
    return int(second) if first == 1 and second is not None else first


def check_ray_address(address: str, timeout_s: float = RAY_TIMEOUT_S) -> None:
    """A Ray cluster answers at `address` (`host:port` of its GCS, `ray://host:port`, or `auto`): a TCP
    connection opens within `timeout_s`, else one line (`ray.init` would retry for minutes)."""
    target = _ray_target(address)
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--address {address}: expected host:port, ray://host:port or auto")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=min(5.0, timeout_s)):
                return
        except OSError as error:
            if time.monotonic() + 1.0 >= deadline:
                raise UserError(
                    f"--address {address}: no Ray cluster answers at {host}:{port} within {timeout_s:g} s "
                    f"({error.strerror or error})"
                ) from None
            time.sleep(1.0)


def _ray_target(address: str) -> str:
    if address == "auto":
        from ray._private.services import find_gcs_addresses  # where `ray start` records a running cluster

        found = sorted(find_gcs_addresses())
        if not found:
            raise UserError("--address auto: no Ray cluster is running on this machine (start one: ray start --head)")
        return found[0]
    return address.removeprefix("ray://")


def check_redis(url: str, key: str = "membership.url") -> None:
    """A run on Redis starts only if the Redis the scenario names at `key` answers (mid-run, the brokers ride out
    an outage)."""
    from actors.registry.redis_consensus import ping
    from allocator.node.pool_size import StoreUnreachableError

    try:
        ping(url)
    except StoreUnreachableError as error:
        raise UserError(f"{key}: {error}") from None
