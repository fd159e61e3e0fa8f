"""The policies' scratch arrays are reused, never shared: not between calls' results, not between threads."""

from __future__ import annotations

import threading

import numpy as np
from numpy.testing import assert_array_equal

from allocator.policies import POLICIES, step
from allocator.policies.scratch import scratch


def _inputs(seed: int, groups: int = 300, brokers: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    usage = rng.uniform(0.0, 400.0, (groups, brokers))
    return {
        "quota": rng.uniform(0.0, 1500.0, groups),
        "usage": usage,
        "limit": usage * rng.uniform(0.9, 1.3, (groups, brokers)),
        "present": rng.random((groups, brokers)) > (0.3 if seed % 2 else 0.0),  # some with everyone present
    }


def test_a_name_keeps_its_memory_and_grows_when_asked_for_more() -> None:
    first = scratch("test.a", (2, 3))
    first[...] = 7.0
    again = scratch("test.a", (3, 2))
    assert np.shares_memory(first, again) and again.shape == (3, 2)
    assert not np.shares_memory(first, scratch("test.b", (2, 3)))
    assert not np.shares_memory(first, scratch("test.a", (2, 3), np.intp))  # another dtype, another buffer
    larger = scratch("test.a", (10, 10))
    assert larger.shape == (10, 10) and larger.flags.c_contiguous


def test_a_result_is_not_overwritten_by_the_next_call() -> None:
    for name in POLICIES:
        first_inputs, second_inputs = _inputs(1), _inputs(2)
        first = step(name, **first_inputs)
        kept = first.copy()
        step(name, **second_inputs)
        assert_array_equal(first, kept, err_msg=name)
        assert_array_equal(step(name, **first_inputs), kept, err_msg=name)


def test_threads_allocating_at_once_get_what_they_get_alone() -> None:
    names = ("pip82-steal", "fair-share", "fair-share-safe")
    inputs = [_inputs(seed, groups=2000) for seed in range(4)]
    alone = {(name, seed): step(name, **inputs[seed]) for name in names for seed in range(4)}
    together: dict[tuple[str, int], list[np.ndarray]] = {key: [] for key in alone}

    def work(seed: int) -> None:
        for _ in range(20):
            for name in names:
                together[(name, seed)].append(step(name, **inputs[seed]))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for key, results in together.items():
        assert len(results) == 20
        for result in results:
            assert_array_equal(result, alone[key], err_msg=str(key))
