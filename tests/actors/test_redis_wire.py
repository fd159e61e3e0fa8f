"""The frame around a report on Redis, and the loss a subscriber reads from sequence gaps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.transport.redis_wire import FrameError, SequenceGaps, Sequencer, channel_name, frame, unframe


@given(
    sender=st.text(max_size=40),
    publisher_id=st.integers(0, 2**64 - 1),
    seq=st.integers(0, 2**64 - 1),
    sent_at_s=st.floats(allow_nan=False),
    payload=st.binary(max_size=200),
)
def test_a_frame_gives_back_what_was_framed(sender, publisher_id, seq, sent_at_s, payload):
    received = unframe(frame(sender, publisher_id, seq, sent_at_s, payload))
    assert (received.sender, received.publisher_id, received.seq) == (sender, publisher_id, seq)
    assert received.sent_at_s == sent_at_s and received.payload == payload


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "shorter than a frame header"),
        (bytes([2]) + frame("b1", 1, 1, 0.0, b"x")[1:], "frame version 2"),
        (frame("broker-1", 1, 1, 0.0, b"")[:-3], "shorter than its sender name"),
    ],
)
def test_what_is_not_a_frame_is_refused_with_the_reason(data, problem):
    with pytest.raises(FrameError, match=problem):
        unframe(data)


def test_channel_names_are_scoped_by_the_prefix_and_say_what_the_topic_is():
    assert channel_name("quotalab:run:ab", "broadcast", 3) == "quotalab:run:ab:shard:3"
    assert channel_name("quotalab:run:ab", "interest", 3) == "quotalab:run:ab:inbox:3"


def test_a_publisher_numbers_each_sender_and_channel_from_one():
    sequencer = Sequencer(publisher_id=7)
    assert [sequencer.next("b1", "c0") for _ in range(3)] == [1, 2, 3]
    assert sequencer.next("b2", "c0") == 1 and sequencer.next("b1", "c1") == 1


@given(st.lists(st.booleans(), min_size=1, max_size=60))
def test_gaps_count_exactly_the_messages_lost_between_two_received(delivered):
    """Whatever subset of a sender's messages arrives, the gaps add up to the ones lost between the first and
    the last received (a loss before the first or after the last is not visible)."""
    gaps = SequenceGaps()
    received = [seq for seq, arrives in enumerate(delivered, start=1) if arrives]
    lost = sum(gaps.observe("c", "b1", 9, seq) for seq in received)
    expected = (received[-1] - received[0] + 1 - len(received)) if received else 0
    assert lost == expected


def test_a_replay_a_new_publisher_and_a_forgotten_channel_count_nothing():
    gaps = SequenceGaps()
    assert gaps.observe("c", "b1", 1, 5) == 0  # the first seen opens the count
    assert gaps.observe("c", "b1", 1, 8) == 2
    assert gaps.observe("c", "b1", 1, 8) == 0 and gaps.observe("c", "b1", 1, 3) == 0  # replays
    assert gaps.observe("c", "b1", 2, 1) == 0  # a restarted publisher numbers from 1 again
    assert gaps.observe("c", "b2", 1, 4) == 0  # each sender on its own
    gaps.forget("c")  # unsubscribed: what is published meanwhile is not lost
    assert gaps.observe("c", "b1", 2, 40) == 0
