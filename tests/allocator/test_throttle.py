"""ThrottleTracker (PIP-322 throttle count) and ReleaseQueue (FIFO release)."""

from fakes import MS, FakeClock
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.throttle import ReleaseQueue, ThrottleTracker
from allocator.token_bucket import TokenBucket

# --- ThrottleTracker ----------------------------------------------------------------------------------------


def test_released_only_when_every_limiter_released():
    events = []
    tracker = ThrottleTracker(
        on_throttle=lambda p: events.append(("pause", p)), on_release=lambda p: events.append(("resume", p))
    )
    assert tracker.throttle("p1", "topic") is True
    assert tracker.throttle("p1", "broker") is False  # already paused: the most stringent keeps it
    assert tracker.throttle_count("p1") == 2
    assert tracker.release("p1", "topic") is False  # the broker limiter still holds it
    assert tracker.is_throttled("p1")
    assert tracker.holders("p1") == frozenset({"broker"})
    assert tracker.release("p1", "broker") is True
    assert not tracker.is_throttled("p1") and tracker.throttle_count("p1") == 0 and len(tracker) == 0
    assert events == [("pause", "p1"), ("resume", "p1")]


def test_idempotent_per_producer_and_limiter():
    tracker = ThrottleTracker()
    assert tracker.throttle("p", "group") is True
    assert tracker.throttle("p", "group") is False
    assert tracker.throttle_count("p") == 1
    assert tracker.release("p", "broker") is False  # never held it
    assert tracker.release("q", "group") is False  # unknown producer
    assert tracker.release("p", "group") is True
    assert tracker.release("p", "group") is False  # released twice
    assert repr(tracker) == "ThrottleTracker(throttled=0, holds=0)"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.sampled_from("abc"), st.sampled_from(["broker", "group", "topic"])),
        max_size=80,
    )
)
def test_tracker_matches_a_model_of_holder_sets(ops):
    paused: list[str] = []
    resumed: list[str] = []
    tracker = ThrottleTracker(on_throttle=paused.append, on_release=resumed.append)
    model: dict[str, set[str]] = {}
    for is_throttle, producer, limiter in ops:
        was = bool(model.get(producer))
        if is_throttle:
            model.setdefault(producer, set()).add(limiter)
            changed = tracker.throttle(producer, limiter)
        else:
            model.get(producer, set()).discard(limiter)
            changed = tracker.release(producer, limiter)
        now = bool(model.get(producer))
        assert changed == (was != now)
        assert tracker.is_throttled(producer) == now
        assert tracker.throttle_count(producer) == len(model.get(producer, ()))
    for producer in "abc":
        # every pause is matched by one resume, except for producers still held
        assert paused.count(producer) - resumed.count(producer) == int(bool(model.get(producer)))


# --- ReleaseQueue -------------------------------------------------------------------------------------------


def budget(n: int):
    """A `has_tokens` callable that says yes `n` times."""
    left = [n]

    def has_tokens() -> bool:
        left[0] -= 1
        return left[0] >= 0

    return has_tokens


def test_fifo_release_while_tokens_last():
    queue = ReleaseQueue()
    for p in ["a", "b", "c", "d"]:
        assert queue.push(p) is True
    assert queue.push("b") is False  # already waiting: keeps its place
    assert queue.release_ready(budget(2)) == ["a", "b"]
    assert list(queue) == ["c", "d"] and len(queue) == 2 and "c" in queue and "a" not in queue
    queue.push("a")  # throttled again after its release: to the back
    assert queue.release_ready(budget(10)) == ["c", "d", "a"]
    assert queue.release_ready(budget(10)) == []


def test_discard_a_closed_producer():
    queue = ReleaseQueue()
    for p in "abc":
        queue.push(p)
    assert queue.discard("b") is True
    assert queue.discard("b") is False
    queue.push("b")
    assert repr(queue) == "ReleaseQueue(waiting=3, next='a')"
    assert queue.release_ready(lambda: True) == ["a", "c", "b"]
    assert repr(queue) == "ReleaseQueue(waiting=0)"


def test_release_ready_asks_a_token_bucket():
    clock = FakeClock()
    bucket = TokenBucket(100, clock=clock, resolution_ns=0)
    queue = ReleaseQueue()
    bucket.consume(150)
    queue.push("p1")
    queue.push("p2")
    assert queue.release_ready(bucket) == []  # in debt
    clock.now_ns += round(bucket.throttle_duration_s() * 1e9) + 1
    assert queue.release_ready(bucket) == ["p1", "p2"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("push"), st.integers(0, 6)),
            st.tuples(st.just("release"), st.integers(0, 4)),
        ),
        max_size=60,
    )
)
def test_release_order_is_fifo(ops):
    queue = ReleaseQueue()
    model: list[int] = []
    for op, x in ops:
        if op == "push":
            assert queue.push(x) == (x not in model)
            if x not in model:
                model.append(x)
        else:
            released = queue.release_ready(budget(x))
            assert released == model[:x]
            del model[:x]
        assert list(queue) == model


def test_a_producer_held_by_two_limiters_is_resumed_by_the_later_release():
    clock = FakeClock()
    broker = TokenBucket(1000, clock=clock, resolution_ns=0)
    group = TokenBucket(100, clock=clock, resolution_ns=0)
    resumed: list[str] = []
    tracker = ThrottleTracker(on_release=resumed.append)
    queues = {"broker": ReleaseQueue(), "group": ReleaseQueue()}
    buckets = {"broker": broker, "group": group}

    for name, bucket in buckets.items():
        if not bucket.consume(1050):
            tracker.throttle("p", name)
            queues[name].push("p")

    clock.now_ns += 60 * MS  # broker: -50 + 60 > 0; group: -950 + 6 still in debt
    for name in buckets:
        for p in queues[name].release_ready(buckets[name]):
            tracker.release(p, name)
    assert tracker.is_throttled("p") and resumed == []
    assert tracker.holders("p") == frozenset({"group"})

    clock.now_ns += round(group.throttle_duration_s() * 1e9) + 1
    for p in queues["group"].release_ready(group):
        tracker.release(p, "group")
    assert resumed == ["p"]
