"""Session fixtures: one Ray instance and one SparkSession, started only by the tests that ask for them."""

import os

import pytest


@pytest.fixture(scope="session")
def ray_session():
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def spark():
    from experiments.report.session import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()


# -- a real Redis for the pool-size consensus (actors.redis_consensus) ---------------------------------------


class RedisServer:
    """A `redis-server` on 127.0.0.1, on a free port, with no persistence; `stop()` kills it (a crash),
    `start()` starts it again on the same port, empty."""

    def __init__(self) -> None:
        import shutil
        import socket

        self.binary = shutil.which("redis-server")
        if self.binary is None:
            pytest.skip("redis-server is not installed (CI installs it with apt in .ci/run)")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.start()

    def start(self) -> None:
        import socket
        import subprocess
        import time

        command = [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not listen on 127.0.0.1:{self.port} within 10 s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture(scope="session")
def redis_server():
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture
def own_redis_server():
    """A server of the test's own, which it may kill."""
    server = RedisServer()
    yield server
    server.stop()
