"""fair-share-safe's one knob: the other mechanisms follow from the principle and need no setting."""

from __future__ import annotations

from dataclasses import dataclass

from allocator.policies.settings import PolicySettings, knob

# Used only where a peer's report carries no demand (a cluster whose brokers do not all run this policy): the
# references' wants rule then applies with their defaults.
THROTTLE_TOLERANCE = 0.05
HEADROOM = 0.1


@dataclass(frozen=True)
class SafeSettings(PolicySettings):
    """fair-share-safe's knobs."""

    lost_change_odds: float = knob(
        0.01,
        lambda x: 0.0 < x <= 1.0,
        "in (0, 1]",
        "report loss: a group whose usage or demand moved is reported in consecutive rounds until the chance of "
        "losing every copy is at most this, at any loss that the reports and sequence gaps this broker counted "
        "leave possible (`force_every` copies before it counted any; over ten reports, 3 with none lost, 5 with a "
        "third lost; at most `force_every`; 1: one copy)",
    )

    @property
    def throttle_tolerance(self) -> float:
        return THROTTLE_TOLERANCE

    @property
    def headroom(self) -> float:
        return HEADROOM
