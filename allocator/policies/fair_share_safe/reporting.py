"""What fair-share-safe reports, and when: the demand its limiter tells, every change in as many copies as
the loss asks, and every round while a peer needs to hear it (a newcomer, a broker still listening, a broker
held below its fair share, this one or a peer beside room left unclaimed)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from allocator.policies.hooks import Traffic
from allocator.policies.report_suppressor import ReportSuppressor, Selection

MIN_ADMITTED_FRACTION = 1e-6  # a demand estimated from throttled time is at most a million times the usage


def throttled_demand(traffic: Traffic, round_s: float) -> np.ndarray:
    """[G, D] the demand a broker can tell from its own limiter: `usage / (1 - throttled_s / round)`, the usage
    of a round scaled up by the share of it its producers were not held (exact in the fluid model while
    anything is admitted; at most 1 / MIN_ADMITTED_FRACTION times the usage). Its own entry holds the same
    estimate its peers hear."""
    admitted_fraction = 1.0 - traffic.throttled_s / round_s
    return traffic.usage / np.maximum(admitted_fraction, MIN_ADMITTED_FRACTION)[:, None]


def copies_needed(chance_all_lost: Callable[[int], float], odds: float, most: int) -> int:
    """The fewest copies of a report, between 1 and `most`, whose loss (every one of them) has a chance of at most
    `odds`: `chance_all_lost(copies)` as the broker's loss meter puts it."""
    return next((copies for copies in range(1, most) if chance_all_lost(copies) <= odds), most)


def relayers_needed(loss: float, odds: float) -> int:
    """The fewest peers that, passing a change on, leave a receiver without it after a round with a chance of at
    most `odds`: it lost the author's report (`loss`, in (0, 1) as a loss meter's estimate is) and every
    relayer's path, each lost on either of its two links (`1 - (1 - loss) ** 2`): 1 at 5% loss, 2 at 10%, 6 at 30%."""
    path_lost = 1.0 - (1.0 - loss) ** 2
    return max(1, math.ceil(math.log(odds / loss) / math.log(path_lost)))


def select_reports(
    suppressor: ReportSuppressor,
    watched: np.ndarray,
    serving: np.ndarray,
    copies: int,
    every_round: np.ndarray,
) -> Selection:
    """PIP-82's threshold and forced reports, a change sent in `copies` consecutive rounds, and the served
    groups of `every_round` reported whatever the threshold says."""
    suppressor.repeats = copies - 1
    selection = suppressor.select(watched, serving)
    extra = every_round & serving & ~selection.report
    suppressed = selection.suppressed - np.count_nonzero(extra)
    return Selection(selection.report | extra, selection.zeros, suppressed, selection.changed)
