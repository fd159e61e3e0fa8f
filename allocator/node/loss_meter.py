"""The report loss a broker measures from the gaps in its peers' sequence numbers.

A broker numbers its reports 1, 2, 3... (one number per round it reports anything), so a receiver that gets
report 7 of a peer right after report 4 knows it missed two. The meter counts, per round, the reports of
other brokers received and the ones missed in the gaps, and keeps both as sums that decay by `memory` per
round: `loss = missed / (missed + received)`, recent rounds weighing most. A peer's first report and the first
of a new incarnation open a new count (there is no gap to see); a report numbered at or below the last one
seen (a duplicate, or a copy overtaken by a later one) counts for nothing. The broker shows it only the reports
its usage table accepted, and those a later report of the same sender in the batch superseded (received, not
lost): a report the table throws away (too old, a sequence number further ahead than the sender can have counted,
an old incarnation) moves nothing here either.

When a broker's reports are split over several topics and a receiver holds only some of them, a round whose
report had nothing for the receiver's topics looks like a gap: the measure is then an upper bound.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_MEMORY = 0.9  # per round: a loss seen 10 rounds ago weighs a third of one seen now


class LossMeter:
    """Loss of other brokers' reports, measured from sequence gaps, decayed per round."""

    def __init__(self, own_broker: str, memory: float = DEFAULT_MEMORY):
        if not 0.0 <= memory < 1.0:
            raise ValueError(f"memory must be in [0, 1), got {memory}")
        self.own_broker = own_broker
        self.memory = memory
        self._last: dict[str, tuple[int, int]] = {}  # broker -> (incarnation, last sequence number seen)
        self._received = 0.0
        self._missed = 0.0

    def __repr__(self) -> str:
        return f"LossMeter({self.own_broker!r}, loss={self.loss:.3f}, peers={len(self._last)})"

    @property
    def loss(self) -> float:
        """The share of the peers' reports missed, recent rounds weighing most (0 before any gap was seen)."""
        seen = self._received + self._missed
        return self._missed / seen if seen > 0 else 0.0

    def chance_all_lost(self, copies: int) -> float:
        """The chance that `copies` reports are all lost, at any loss the counts leave possible: the mean of
        `loss ** copies` over a loss drawn from Beta(missed + 1, received + 1), a uniform prior updated by the
        counts. `1 / (copies + 1)` before anything is seen; close to `loss ** copies` once the counts are large,
        above it while they are small (a few rounds of luck do not prove a channel lossless)."""
        chance = 1.0
        missed, seen = self._missed + 1.0, self._missed + self._received + 2.0
        for copy in range(copies):
            chance *= (missed + copy) / (seen + copy)
        return chance

    def observe(self, brokers: Sequence[str], incarnations: Sequence[int], seqs: Sequence[int]) -> None:
        """Count one round's received reports (any order): then the older counts decay by `memory`."""
        self._received *= self.memory
        self._missed *= self.memory
        for broker, incarnation, seq in sorted(zip(brokers, incarnations, seqs, strict=True)):
            if broker == self.own_broker:
                continue
            last = self._last.get(broker)
            if last is not None and (incarnation, seq) <= last:
                continue  # a duplicate or an overtaken copy, or an older incarnation
            if last is not None and incarnation == last[0]:
                self._missed += seq - last[1] - 1
            self._received += 1
            self._last[broker] = (incarnation, seq)
