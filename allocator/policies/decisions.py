"""What a broker's last allocation decided, mechanism by mechanism: the record `BrokerNode.explain` reads.

Off by default. Off, each place that records holds one `None` check per allocation (per chunk of groups and per
shaping knob that is on, in `view.finish`), and nothing else. On, an allocation keeps copies of its inputs (the
view as the hooks read it, the quota, the previous limit), what the hooks counted each peer at and why, each
dimension's rule inputs, and the limits after each mechanism: whole [G, D] arrays, so that the explanation of one
group is an index into them (a few copies of the limits per allocation, ~10 ms at 100,000 groups). Recording
changes no limit: it copies what the allocation computed and never writes back.

A step is recorded where its mechanism runs, for every group; `allocator.node.explanation` keeps, for the group
explained, the rule's step and every later step that moved the limit, and words each one from its terms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from functools import partial
from typing import Any

import numpy as np

from allocator.policies.hooks import OWN


class CountedAs(IntEnum):
    """Why a peer counts at what it counts at (per group and slot, as the hooks say)."""

    NOT_IN_VIEW = 0  # neither heard nor listed: not counted
    ITSELF = 1
    HEARD = 2  # its last report, as it said it (this round, or held from earlier rounds)
    LISTED_UNHEARD = 3  # the registry lists it, no report heard: the references do not count it
    NEWCOMER = 4  # listed, never heard: counted at its fair share (fair-share-safe leaves it room)
    SILENT = 5  # silent for a forced-report cycle: counted at its fair share
    CAPPED = 6  # claims more than it can be known to hold (a liar, or news this broker cannot believe yet)
    MADE_ROOM = 7  # heard above its fair share, but every peer has read this newcomer's listing: at its share
    IN_POOL = 8  # one of the N brokers the registry lists as serving the group (numaflow-equal)


RuleRecorder = Callable[..., None]  # (name, values [B, g], **terms): one chunk's step, in `view.finish`


@dataclass
class Step:
    """The limits [G, D] after one mechanism, and the terms its reason names ([G, D] arrays or numbers)."""

    name: str
    limit: np.ndarray
    terms: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RuleCall:
    """One dimension's rule inputs, as the hooks handed them: `pool [G]`, this broker's `own_limit [G]`, and
    `usage`, `demand` (or None) and `present` [G, K] (K the rule's brokers: the view's slots, or the pool)."""

    pool: np.ndarray
    own_limit: np.ndarray
    usage: np.ndarray
    demand: np.ndarray | None
    present: np.ndarray


class Decisions:
    """The record of one broker's allocations; `BrokerNode` opens it (`begin`) and closes it (`close`) around
    each, and the policy's hooks and `view.finish` add to it while it is open."""

    def __init__(self, n_groups: int, n_dimensions: int) -> None:
        self.shape = (n_groups, n_dimensions)
        self.open = False
        self.inputs: dict[str, Any] = {}  # the allocation's inputs (`begin`)
        self.rule_calls: list[RuleCall] = []  # one per dimension, in order
        self.steps: list[Step] = []
        self.counted: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # dimension -> (counted, CountedAs) [G, K]
        self.notes: dict[str, np.ndarray] = {}  # what set the previous limit: `note` before the allocation
        self._pending_notes: dict[str, np.ndarray] = {}
        self._rule_steps: dict[str, Step] = {}

    def note(self, kind: str, rows: np.ndarray) -> None:
        """Between two allocations, the limits of groups `rows` (bool [G]) were set by `kind` ("start": a broker
        new to the group; "quota": a quota change): what the next allocation's previous limit comes from."""
        noted = self._pending_notes.setdefault(kind, np.zeros(self.shape[0], dtype=bool))
        noted |= rows

    def begin(self, **inputs: Any) -> None:
        """An allocation starts: forget the last one, keep copies of `inputs`."""
        self.open = True
        self.inputs = {key: _copy(value) for key, value in inputs.items()}
        self.rule_calls, self.steps, self.counted, self._rule_steps = [], [], {}, {}
        self.notes, self._pending_notes = self._pending_notes, {}

    def close(self) -> None:
        self.open = False

    def rule(
        self,
        pool: np.ndarray,
        own_limit: np.ndarray,
        usage: np.ndarray,
        demand: np.ndarray | None,
        present: np.ndarray,
    ) -> RuleRecorder | None:
        """The hooks run the rule on the next dimension: keep its inputs, and return what records the rule's and
        `finish`'s steps of each chunk (`record(rows, name, values [B, g], **terms)`, rows bound by the policy)."""
        if not self.open:  # a start limit computed by the rule (numaflow-equal's), outside an allocation
            return None
        dimension = len(self.rule_calls)
        self.rule_calls.append(RuleCall(*(_copy(value) for value in (pool, own_limit, usage, demand, present))))
        return partial(self._rule_step, dimension)

    def step(self, name: str, limit: np.ndarray, **terms: Any) -> None:
        """The limits [G, D] after mechanism `name`, with the terms its reason names."""
        if self.open:
            self.steps.append(Step(name, np.array(limit, dtype=np.float64, copy=True), _copies(terms)))

    def count(self, dimension: int, counted: np.ndarray, counted_as: np.ndarray) -> None:
        """What the hooks count each slot of the view at in `dimension` [G, K], and why (`CountedAs` [G, K])."""
        if self.open:
            self.counted[dimension] = (np.array(counted, copy=True), np.array(counted_as, dtype=np.int8, copy=True))

    def _rule_step(self, dimension: int, rows: slice, name: str, values: np.ndarray, **terms: Any) -> None:
        """Row `OWN` of a chunk's step `values [B, g]` (and of its [B, g] terms; [g] terms as they are)."""
        step = self._rule_steps.get(name)
        if step is None:
            step = self._rule_steps[name] = Step(name, np.full(self.shape, np.nan))
            self.steps.append(step)
        step.limit[rows, dimension] = values[OWN]
        for key, value in terms.items():
            if np.ndim(value) == 0:
                step.terms[key] = value
                continue
            term = step.terms.setdefault(key, np.full(self.shape, np.nan))
            term[rows, dimension] = value[OWN] if np.ndim(value) == 2 else value


def _copy(value: Any) -> Any:
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def _copies(terms: dict[str, Any]) -> dict[str, Any]:
    return {key: _copy(value) for key, value in terms.items()}
