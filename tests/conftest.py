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
