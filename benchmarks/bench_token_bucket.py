"""How fast is `TokenBucket.consume` next to the rate limiters people install?

Every limiter gets the same number of calls in the same process, on one key, with limits so generous that
none of them ever refuses or waits (checked: every call must be admitted), so what is timed is the cost of
asking. Each figure is the best of `repeats` runs on a fresh limiter, the contenders taking turns; every
call goes through the same zero-argument lambda, which costs the fastest contender (ours) the largest share.
Peers:

- pyrate-limiter 4.x `Limiter(Rate(...)).try_acquire(name, weight, blocking=False)`: its default
  `InMemoryBucket` (a sliding-window log), and its `TokenBucket` algorithm in a `StateBucket`;
- limits `MovingWindowRateLimiter(MemoryStorage()).hit(item, key)` and `FixedWindowRateLimiter`.

Also timed: `TokenBucketArray.consume` over 5,000 groups (one call serves every group).

Run from the repository root: `python -m benchmarks.bench_token_bucket` (prints a table, writes
`benchmarks/results/token_bucket.json`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter
from pyrate_limiter import Duration, InMemoryBucket, Limiter, Rate, StateBucket
from pyrate_limiter import TokenBucket as PyrateTokenBucket

from allocator.limiter.bucket_array import TokenBucketArray
from allocator.limiter.token_bucket import TokenBucket
from benchmarks.common import command_line, environment, results_path, save_results

RESULTS = results_path("token_bucket")
GENEROUS = 10**12  # per second: nobody is ever refused or made to wait


def _time_calls(make: Callable[[], Callable[[], bool]], calls: int) -> float:
    """Ops/s of `calls` calls of a fresh limiter's bound call."""
    call = make()
    admitted = 0
    start = time.perf_counter()
    for _ in range(calls):
        admitted += call()
    elapsed = time.perf_counter() - start
    if admitted != calls:
        raise RuntimeError(f"{calls - admitted} of {calls} calls refused: the limit is not generous enough")
    return calls / elapsed


def _quotalab(resolution_ns: int) -> Callable[[], Callable[[], bool]]:
    def make() -> Callable[[], bool]:
        consume = TokenBucket(GENEROUS, clock=time.monotonic_ns, resolution_ns=resolution_ns).consume
        return lambda: consume(1)

    return make


def _pyrate(bucket: Callable[[Rate], object]) -> Callable[[], Callable[[], bool]]:
    def make() -> Callable[[], bool]:
        try_acquire = Limiter(bucket(Rate(GENEROUS, Duration.SECOND))).try_acquire
        return lambda: try_acquire("bench", 1, False)

    return make


def _limits(strategy: type) -> Callable[[], Callable[[], bool]]:
    def make() -> Callable[[], bool]:
        item = RateLimitItemPerSecond(GENEROUS)
        hit = strategy(MemoryStorage()).hit
        return lambda: hit(item, "bench")

    return make


def _time_array(groups: int, calls: int, repeats: int) -> dict:
    rng = np.random.default_rng(322)
    rates = rng.uniform(100.0, 10_000.0, groups)
    rates[:: max(1, groups // 50)] = np.inf  # a few unlimited groups, as in a real broker
    amounts = rng.uniform(0.0, 20.0, (calls, groups))
    best = float("inf")
    for _ in range(repeats):
        array = TokenBucketArray(rates, now_ns=0)
        consume = array.consume
        start = time.perf_counter()
        for i in range(calls):
            consume(amounts[i], i * 1_000_000)  # one call per millisecond of virtual time
        best = min(best, (time.perf_counter() - start) / calls)
    return {
        "groups": groups,
        "calls": calls,
        "us_per_call": best * 1e6,
        "calls_per_s": 1 / best,
        "group_ops_per_s": groups / best,
    }


def run(calls: int = 200_000, repeats: int = 5, groups: int = 5_000, array_calls: int = 2_000) -> dict:
    """Time every limiter; returns ops/s per limiter, the ratio of TokenBucket to each, and the array."""
    contenders = {
        "quotalab TokenBucket.consume (resolution 16 ms)": _quotalab(16_000_000),
        "quotalab TokenBucket.consume (resolution 0)": _quotalab(0),
        "pyrate_limiter Limiter.try_acquire (InMemoryBucket)": _pyrate(lambda rate: InMemoryBucket([rate])),
        "pyrate_limiter Limiter.try_acquire (TokenBucket)": _pyrate(
            lambda rate: StateBucket([rate], algorithm=PyrateTokenBucket())
        ),
        "limits MovingWindowRateLimiter.hit (MemoryStorage)": _limits(MovingWindowRateLimiter),
        "limits FixedWindowRateLimiter.hit (MemoryStorage)": _limits(FixedWindowRateLimiter),
    }
    # Round-robin over the contenders, best of each: a burst of load from elsewhere on the machine then
    # costs one run of one contender, not a whole contender's figure.
    ops = dict.fromkeys(contenders, 0.0)
    for _ in range(repeats):
        for name, make in contenders.items():
            ops[name] = max(ops[name], _time_calls(make, calls))
    ours = ops["quotalab TokenBucket.consume (resolution 16 ms)"]
    return {
        "calls": calls,
        "repeats": repeats,
        "ops_per_s": ops,
        "speedup": {name: ours / value for name, value in ops.items()},
        "array": _time_array(groups, array_calls, repeats),
        **environment("numpy", "pyrate-limiter", "limits"),
    }


def _table(result: dict) -> str:
    lines = [f"{'limiter':<55} {'ops/s':>12} {'TokenBucket is':>15}"]
    for name, value in result["ops_per_s"].items():
        lines.append(f"{name:<55} {value:>12,.0f} {result['speedup'][name]:>14.1f}x")
    arr = result["array"]
    lines.append(
        f"TokenBucketArray.consume over {arr['groups']:,} groups: {arr['us_per_call']:.1f} us per call, "
        f"{arr['group_ops_per_s']:,.0f} group-ops/s"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    command_line(__doc__).parse_args()
    result = run()
    headline = f"{result['calls']:,} calls each, best of {result['repeats']}, Python {result['python']}"
    save_results(RESULTS, result, headline, _table(result))
