"""Which groups go into this round's usage report (PIP-82's suppression rules).

A group is reported when its usage moved by more than `threshold_pct` percent (in any dimension) since
it was last reported, when it was not reported for `force_every` rounds (liveness: others learn it is still
there), or when it is new; a group whose usage moved is reported again in the next `repeats` rounds (0 unless
the broker sets it: copies that a lossy channel may not lose all of). A group whose traffic stopped is reported
once as zeros, which removes this broker's entry everywhere; a clean leave reports zeros for every group still
standing in others' maps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from allocator.policies.rows import row_any


@dataclass(frozen=True)
class Selection:
    report: np.ndarray  # bool[G]: groups in this round's report
    zeros: np.ndarray  # bool[G]: of those, the ones reported as zeros (traffic stopped)
    suppressed: int  # groups with traffic that the threshold kept out of the report
    changed: np.ndarray | None = None  # bool[G]: of those reported, the ones whose usage moved past the threshold


class ReportSuppressor:
    def __init__(self, n_groups: int, n_dimensions: int, threshold_pct: float, force_every: int):
        if threshold_pct < 0:
            raise ValueError(f"threshold_pct must be >= 0, got {threshold_pct}")
        if force_every < 1:
            raise ValueError(f"force_every must be >= 1, got {force_every}")
        self.threshold_pct = threshold_pct
        self.force_every = force_every
        self._last_reported = np.zeros((n_groups, n_dimensions))
        self._rounds_since = np.zeros(n_groups, dtype=np.int64)
        self._standing = np.zeros(n_groups, dtype=bool)  # others hold a non-zero entry of ours
        self.repeats = 0  # rounds a changed group is reported again after its change
        self._repeats_left = np.zeros(n_groups, dtype=np.int64)

    def select(self, usage: np.ndarray, serving: np.ndarray) -> Selection:
        """Decide this round's report from the usage just measured ([G, D]) and the groups served ([G])."""
        active = serving & row_any(usage)
        tolerance = self._last_reported * (self.threshold_pct / 100.0)
        changed = row_any(np.abs(usage - self._last_reported) > tolerance)
        due = self._rounds_since + 1 >= self.force_every
        wanted = active & (changed | due | ~self._standing | (self._repeats_left > 0))
        stopped = ~active & self._standing
        report = wanted | stopped
        return Selection(
            report=report, zeros=stopped, suppressed=int((active & ~wanted).sum()), changed=active & changed
        )

    def commit(self, selection: Selection, usage: np.ndarray) -> None:
        """Record that the selected groups were sent (call once the report is published)."""
        # np.where and copyto(where=) rather than boolean indexing, a column at a time (a [G, 1] mask broadcast over
        # the columns makes numpy loop once per row): ~30x faster on 5,000 groups
        for column in range(usage.shape[1]):
            reported = np.where(selection.zeros, 0.0, usage[:, column])
            np.copyto(self._last_reported[:, column], reported, where=selection.report)
        self._rounds_since = np.where(selection.report, 0, self._rounds_since + 1)
        np.copyto(self._standing, ~selection.zeros, where=selection.report)
        np.maximum(self._repeats_left - 1, 0, out=self._repeats_left)
        if selection.changed is not None:
            np.copyto(self._repeats_left, self.repeats, where=selection.changed)

    def leave(self) -> Selection:
        """A clean leave: zeros for every group others still hold an entry of."""
        standing = self._standing.copy()
        return Selection(report=standing, zeros=standing, suppressed=0)
