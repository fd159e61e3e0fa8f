"""Where a broker publishes each group's usage entry: the topics of each group, as CSR arrays.

A broker sends one report per topic per round, holding exactly the entries routed to that topic. Two
deployments build their routes here:

- broadcast (`Routes.sharded`): topic = group id % shards; every broker subscribes to the shards of its groups
  and hears every owner of those shards' groups;
- interest (`Routes.from_lists`): one inbox topic per broker; a group's entry goes to the inbox of every other
  broker that hosts the group (the owners known from the namespace ownership metadata), so a broker hears only
  about the groups it shares.

Topic numbers are unsigned 16-bit: numpy sorts 16-bit keys by radix, ~10x faster than int64 for the sort of
(row, topic) pairs a broker makes every round, and 65,536 shards or broker inboxes are plenty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

TOPIC_DTYPE = np.dtype(np.uint16)
MAX_TOPICS = np.iinfo(TOPIC_DTYPE).max + 1


@dataclass(frozen=True, eq=False)
class Routes:
    """The topics of row g (a broker's local group index) are `topics[offsets[g]:offsets[g + 1]]`, each once."""

    offsets: np.ndarray  # int64[G + 1], from 0, non-decreasing
    topics: np.ndarray  # uint16[offsets[-1]]
    broadcast: bool = False  # a group's topic is the same for every broker (single, sharded): a report may be relayed

    def __post_init__(self) -> None:
        offsets, topics = self.offsets, self.topics
        if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0 or (np.diff(offsets) < 0).any():
            raise ValueError("offsets must start at 0 and never decrease")
        if topics.dtype != TOPIC_DTYPE or topics.ndim != 1 or len(topics) != offsets[-1]:
            raise ValueError(f"topics must be {TOPIC_DTYPE}[offsets[-1]]")
        rows = np.repeat(np.arange(self.n_groups), np.diff(offsets))
        pairs = rows * MAX_TOPICS + topics
        if len(np.unique(pairs)) != len(pairs):
            raise ValueError("a group lists a topic twice")

    @property
    def n_groups(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def single(cls, n_groups: int, topic: int = 0) -> Routes:
        """Every group on the one `topic`."""
        return cls(np.arange(n_groups + 1, dtype=np.int64), np.full(n_groups, topic, dtype=TOPIC_DTYPE), True)

    @classmethod
    def sharded(cls, group_ids: np.ndarray, shards: int) -> Routes:
        """Broadcast: each group on shard `group_id % shards`."""
        if not 1 <= shards <= MAX_TOPICS:
            raise ValueError(f"shards must be in 1..{MAX_TOPICS}, got {shards}")
        group_ids = np.asarray(group_ids, dtype=np.int64)
        return cls(np.arange(len(group_ids) + 1, dtype=np.int64), (group_ids % shards).astype(TOPIC_DTYPE), True)

    @classmethod
    def from_lists(cls, topics_per_group: Sequence[Sequence[int]]) -> Routes:
        """Any topics per group, e.g. the inbox of every other owner of the group (interest routing)."""
        counts = np.fromiter((len(topics) for topics in topics_per_group), dtype=np.int64, count=len(topics_per_group))
        flat = [topic for topics in topics_per_group for topic in topics]
        if flat and not (min(flat) >= 0 and max(flat) < MAX_TOPICS):
            raise ValueError(f"topics must be in 0..{MAX_TOPICS - 1}")
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(offsets, np.array(flat, dtype=TOPIC_DTYPE))

    def pairs(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, topic) for every topic of each of `rows`: rows repeated once per topic, and those topics."""
        starts = self.offsets[rows]
        counts = self.offsets[rows + 1] - starts
        pair_rows = np.repeat(rows, counts)
        # the position of each pair in `topics`: its row's start plus its rank within the row
        first_pair = np.cumsum(counts) - counts
        positions = np.arange(len(pair_rows)) + np.repeat(starts - first_pair, counts)
        return pair_rows, self.topics[positions]

    def by_topic(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The (row, topic) pairs of `rows` sorted by topic, as `encode_split` takes them: the rows, each part's
        topic, and the parts' bounds (part i holds rows `bounds[i]:bounds[i + 1]`). The sort is stable, so rows
        given in increasing order increase within each part."""
        if len(rows) == self.n_groups and np.array_equal(rows, np.arange(self.n_groups)):
            return self._every_row_by_topic  # a forced report: every group, the same pairs every time
        return self._by_topic(rows)

    @cached_property
    def _every_row_by_topic(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`by_topic` of every row, computed once; read-only, as it is handed out again and again."""
        parts = self._by_topic(np.arange(self.n_groups))
        for array in parts:
            array.flags.writeable = False
        return parts

    def _by_topic(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pair_rows, pair_topics = self.pairs(rows)
        if len(pair_rows) == 0:
            return pair_rows, pair_topics, np.zeros(1, dtype=np.int64)
        order = np.argsort(pair_topics, kind="stable")
        pair_rows, pair_topics = pair_rows[order], pair_topics[order]
        starts = np.flatnonzero(np.r_[True, pair_topics[1:] != pair_topics[:-1]])
        return pair_rows, pair_topics[starts], np.r_[starts, len(pair_rows)]
