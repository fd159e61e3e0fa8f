"""Usage reports on Redis Pub/Sub: channel names, the frame around a report, and loss from sequence gaps.

Redis Pub/Sub has the contract of PIP-82's non-persistent topic: at most once, nothing stored, and a subscriber
whose output buffer passes `client-output-buffer-limit pubsub` is disconnected (what it missed is gone). So a
receiver learns what the transport lost from the numbers in the frames: every publisher numbers its messages
per (sender, channel) from 1, and a jump from 4 to 7 means two were lost on the way.

A frame is a fixed header, the sender's name, then the report as the allocator encoded it (untouched):

    version u8 | name length u16 | publisher id u64 | sequence u64 | sent at (wall clock, s) f64 | name | report

The publisher id is drawn at random by each publishing process (a restarted host is a new publisher: its
numbers start again without counting as a gap). The send time gives the publish-to-deliver latency, exact on
one machine and as good as the clocks' agreement across machines.

Only the standard library: a service that embeds `allocator/` uses this module as it is (`examples/embedding/`).
"""

from __future__ import annotations

import secrets
import struct
from dataclasses import dataclass

FRAME_VERSION = 1
_HEADER = struct.Struct("!BHQQd")
MAX_NAME_BYTES = 1024


class FrameError(ValueError):
    """A message on a report channel that is not a frame of this version."""


@dataclass(frozen=True)
class Frame:
    sender: str
    publisher_id: int
    seq: int
    sent_at_s: float
    payload: bytes


def channel_name(prefix: str, routing: str, topic: int) -> str:
    """The Redis channel of `topic`: `<prefix>:shard:<k>` under broadcast routing (a shard of the groups),
    `<prefix>:inbox:<k>` under interest routing (broker k's inbox). `prefix` scopes a run's channels."""
    kind = "inbox" if routing == "interest" else "shard"
    return f"{prefix}:{kind}:{topic}"


def new_publisher_id() -> int:
    return secrets.randbits(64)


def frame(sender: str, publisher_id: int, seq: int, sent_at_s: float, payload: bytes) -> bytes:
    name = sender.encode("utf-8")
    if len(name) > MAX_NAME_BYTES:
        raise ValueError(f"sender name longer than {MAX_NAME_BYTES} bytes")
    return _HEADER.pack(FRAME_VERSION, len(name), publisher_id, seq, sent_at_s) + name + payload


def unframe(data: bytes) -> Frame:
    """The frame in `data`; `FrameError` for anything else (a stray publisher on the channel)."""
    if len(data) < _HEADER.size:
        raise FrameError(f"{len(data)} bytes: shorter than a frame header")
    version, name_length, publisher_id, seq, sent_at_s = _HEADER.unpack_from(data)
    if version != FRAME_VERSION:
        raise FrameError(f"frame version {version}, expected {FRAME_VERSION}")
    end = _HEADER.size + name_length
    if len(data) < end:
        raise FrameError("frame shorter than its sender name")
    try:
        sender = data[_HEADER.size : end].decode("utf-8")
    except UnicodeDecodeError as error:
        raise FrameError(f"sender name is not UTF-8: {error}") from None
    return Frame(sender, publisher_id, seq, sent_at_s, data[end:])


class Sequencer:
    """A publisher's numbers: one sequence per (sender, channel), from 1."""

    def __init__(self, publisher_id: int | None = None) -> None:
        self.publisher_id = new_publisher_id() if publisher_id is None else publisher_id
        self._last: dict[tuple[str, str], int] = {}

    def next(self, sender: str, channel: str) -> int:
        seq = self._last.get((sender, channel), 0) + 1
        self._last[(sender, channel)] = seq
        return seq


class SequenceGaps:
    """A subscriber's view of the numbers: how many messages each new one shows were lost since the last.

    A sender's first message on a channel, and the first of a new publisher, open a count (no gap to see); a
    number at or below the last one (a replay) counts nothing. `forget` a channel when it is unsubscribed, so
    that subscribing again does not count what was published meanwhile as lost.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[int, int]] = {}  # (channel, sender) -> (publisher id, seq)

    def observe(self, channel: str, sender: str, publisher_id: int, seq: int) -> int:
        """The messages lost between the last one seen from `sender` on `channel` and this one."""
        key = (channel, sender)
        last = self._last.get(key)
        if last is not None and last[0] == publisher_id:
            if seq <= last[1]:
                return 0
            self._last[key] = (publisher_id, seq)
            return seq - last[1] - 1
        self._last[key] = (publisher_id, seq)
        return 0

    def forget(self, channel: str) -> None:
        for key in [key for key in self._last if key[0] == channel]:
            del self._last[key]
