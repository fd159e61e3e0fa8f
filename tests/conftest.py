"""Session fixtures: one Ray instance and one SparkSession, started only by the tests that ask for them."""

import os

import pytest
from hypothesis import settings

# No test may depend on the machine's speed: hypothesis's per-example deadline is off for every test.
settings.register_profile("quotalab", deadline=None)
settings.load_profile("quotalab")


@pytest.fixture(scope="session")
def ray_session():
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def spark():
    from experiments.report.session import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture
def no_spark(monkeypatch):
    """Fail the test if the report asks for a SparkSession (what it refuses, it refuses before Spark starts)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the report started Spark")

    monkeypatch.setattr("experiments.report.session.spark_session", refuse)


# -- a real Redis (actors.transport.redis_server): the pool-size consensus, the Redis transport ------------------------


def _redis_server():
    import shutil

    from actors.transport.redis_server import RedisServer

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (CI installs it with apt in .ci/run)")
    return RedisServer()


@pytest.fixture(scope="session")
def redis_server():
    """A `redis-server` on 127.0.0.1, on a free port, with no persistence, for the whole session."""
    server = _redis_server()
    yield server
    server.stop()


@pytest.fixture
def own_redis_server():
    """A server of the test's own, which it may kill (`stop()`) and start again, empty (`start()`)."""
    server = _redis_server()
    yield server
    server.stop()
