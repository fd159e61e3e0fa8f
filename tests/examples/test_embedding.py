"""The embedding example: three plain OS processes, each an asyncio service admitting messages through
`allocator`'s token bucket, share one quota over Redis. Offered twice the quota, they admit at most the quota
once they have converged (measured from their own round records, not from sleeps)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "embedding" / "three_services.py"
NAMES = ["b1", "b2", "b3"]
QUOTA = 300.0
ROUNDS_MEASURED = 15  # per service, after convergence: 3 s at 0.2 s a round
DEADLINE_S = 90.0


def load_example():
    spec = importlib.util.spec_from_file_location("three_services", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def rounds_after_convergence(redis_url: str) -> tuple[float, dict[str, list[dict]]]:
    """Records until each service has `ROUNDS_MEASURED` rounds after convergence: the first moment every service
    hears all three and their latest limits add up to 90-101% of the quota."""
    services = load_example().services(redis_url, NAMES, QUOTA, 2 * QUOTA / len(NAMES), run="test-embedding")
    latest: dict[str, dict] = {}
    converged_at: float | None = None
    after: dict[str, list[dict]] = {name: [] for name in NAMES}
    async with contextlib.aclosing(services) as records:
        async for record in records:
            name = record["name"]
            if converged_at is not None:
                after[name].append(record)
                if min(len(rounds) for rounds in after.values()) >= ROUNDS_MEASURED:
                    return converged_at, after
                continue
            latest[name] = record
            limits = sum(latest[n]["limit"] for n in latest)
            if len(latest) == 3 and all(r["view"] == 3 for r in latest.values()) and 0.9 <= limits / QUOTA <= 1.01:
                converged_at = record["t"]
    raise AssertionError("the services stopped before converging")


def test_three_processes_offered_twice_the_quota_admit_at_most_the_quota(redis_server):
    converged_at, after = asyncio.run(asyncio.wait_for(rounds_after_convergence(redis_server.url), DEADLINE_S))
    admitted_per_s = {
        name: sum(r["admitted"] for r in rounds) / sum(r["elapsed_s"] for r in rounds) for name, rounds in after.items()
    }
    total = sum(admitted_per_s.values())
    assert total <= 1.05 * QUOTA, admitted_per_s  # the buckets hold the quota between them
    assert total >= 0.85 * QUOTA, admitted_per_s  # and use it: each offers two thirds of it
    assert min(admitted_per_s.values()) >= 0.8 * QUOTA / 3, admitted_per_s  # a fair share each
    for rounds in after.values():
        assert all(r["view"] == 3 and r["lost_transport"] == 0 for r in rounds)
    mean_limits = sum(sum(r["limit"] for r in rounds) / len(rounds) for rounds in after.values())
    assert mean_limits <= 1.01 * QUOTA
