"""One Spark actor for every sweep of the test session: the sweeps find it by name, so its JVM starts once."""

import pytest


@pytest.fixture(scope="session")
def sweep_spark(ray_session):
    from experiments.sweep.spark_jobs import spark_actor

    actor = spark_actor("local[2]")
    yield actor
    ray_session.get(actor.close.remote())
    ray_session.kill(actor)
