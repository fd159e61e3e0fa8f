"""The policies' parameters, checked once when they are bound (a bad value fails before anything runs)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from numbers import Real

# name -> (is the value allowed, the allowed range in words)
_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    "min_share": (lambda x: 0.0 <= x <= 1.0, "in [0, 1]"),
    "smoothing": (lambda x: 0.0 <= x < 1.0, "in [0, 1)"),
    "max_step": (lambda x: x > 0.0, "> 0"),
    "steal_fraction": (lambda x: 0.0 <= x <= 1.0, "in [0, 1]"),
    "throttle_tolerance": (lambda x: 0.0 <= x < 1.0, "in [0, 1)"),
    "headroom": (lambda x: x >= 0.0, ">= 0"),
    "stale_after_multiple": (lambda x: x >= 1.0, ">= 1"),
    "listen_rounds": (lambda x: x >= 0 and float(x).is_integer(), "a whole number >= 0"),
    "lost_change_odds": (lambda x: 0.0 < x <= 1.0, "in (0, 1]"),
    "excess_after_rounds": (lambda x: x >= 0 and float(x).is_integer(), "a whole number >= 0"),
}
# The broker's mechanisms: switches (true or false), off by default, so the literal policies keep their behaviour.
SWITCHES = frozenset(
    {
        "cap_at_residual",
        "start_from_residual",
        "rescale_on_quota_change",
        "report_throttled_demand",
        "answer_newcomers",
        "listen_while_view_grows",
        "silent_at_fair_share",
        "report_while_held",
        "count_others_up_to_share",
    }
)


@dataclass(frozen=True)
class Settings:
    """Every policy parameter with its default; a policy reads only the ones it declares.

    Common knobs, all off by default (applied after every policy, see `view.finish`):
    `min_share` floor for a present broker as a fraction of its equal share `quota / n_present`;
    `smoothing` weight of the previous own limit (`new = smoothing * old + (1 - smoothing) * computed`);
    `max_step` largest change of a limit per round as a fraction of the quota (None: no bound).

    Policy knobs: `steal_fraction` (pip82-steal) how far a throttled broker moves towards its partner's usage;
    `throttle_tolerance` a broker counts as throttled when `usage >= limit * (1 - throttle_tolerance)`;
    `headroom` a throttled broker that reports no demand wants `limit * (1 + headroom)`;
    `cap_at_residual` (fair-share-safe) a limit is at most the residual heard, `quota - sum(others' usage)`.

    The broker's mechanisms (`allocator.node.broker_node.BrokerNode` reads them from its bound policy; only
    `fair-share-safe` takes them, so every other policy keeps today's behaviour):
    `start_from_residual` a broker that starts serving a group starts at the residual it has heard,
    `quota - sum(others' usage)`, at most its equal share, and at the floor while it has heard no peer;
    `rescale_on_quota_change` a quota change scales this broker's limits by `new / old` at once;
    `stale_after_multiple` another broker's entry expires after `stale_after_multiple * stale_after_s` of
    silence (the dead are removed by the membership registry sooner);
    `report_throttled_demand` a broker reports its demand estimated from its throttled time,
    `usage / (1 - throttled_s / interval_s)`, and a change of it is reason enough to report;
    `listen_rounds` a newcomer keeps its start limit for its first `listen_rounds` allocations, and with
    `listen_while_view_grows` also for any of its first `force_every` in which it heard a broker new to its view;
    `answer_newcomers` a broker that hears a newcomer reports the group in its next report, and a newcomer
    reports every round while it listens;
    `lost_change_odds` a group whose usage or demand moved is reported in consecutive rounds until the chance of
    losing every copy at the loss the broker measures from its peers' sequence gaps, `loss ** copies`, is at
    most `lost_change_odds` (at most `force_every` copies; 1: one copy, as without it; no loss: one copy);
    `silent_at_fair_share` the usage of a peer not heard for more than `force_every` rounds (a forced report of it
    was lost) counts at most at its max-min fair share of this broker's view;
    `report_while_held` a broker whose new limit is below 95% of its max-min fair share of its view (the room is
    still held by others) reports the group every round, so the peers that hold the room hear its demand;
    `count_others_up_to_share` (fair-share-safe's rule) the residual heard counts each other broker's usage only up
    to its max-min share: a liar holds at most its share of what it claims (off by default: see the rule);
    `excess_after_rounds` (the liar bound of `fair-share-safe`, 0: off) a peer whose usage has been more than
    `EXCESS_TOLERANCE` above its max-min fair share of this broker's view for this many consecutive allocations
    counts at its fair share: a liar is held to its share of what it claims once its excess has lasted, while an
    honest broker above its share (it has not heard the change yet) steps down before it is counted so.
    """

    min_share: float = 0.0
    smoothing: float = 0.0
    max_step: float | None = None
    steal_fraction: float = 0.5
    throttle_tolerance: float = 0.05
    headroom: float = 0.1
    cap_at_residual: bool = False
    start_from_residual: bool = False
    rescale_on_quota_change: bool = False
    stale_after_multiple: float = 1.0
    report_throttled_demand: bool = False
    listen_rounds: int = 0
    answer_newcomers: bool = False
    listen_while_view_grows: bool = False
    lost_change_odds: float = 1.0
    silent_at_fair_share: bool = False
    report_while_held: bool = False
    count_others_up_to_share: bool = False
    excess_after_rounds: int = 0

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name == "max_step" and value is None:
                continue
            if field.name in SWITCHES:
                if not isinstance(value, bool):
                    raise ValueError(f"{field.name}: must be true or false, got {value!r}")
                continue
            if not isinstance(value, Real) or isinstance(value, bool):
                raise ValueError(f"{field.name}: must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{field.name}: must be finite, got {value!r}")
            allowed, in_words = _RANGES[field.name]
            if not allowed(float(value)):
                raise ValueError(f"{field.name}: must be {in_words}, got {value!r}")
