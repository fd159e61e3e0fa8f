"""How every broker of a cluster reports, cleans up and allocates: `NodeSettings`, bound and checked once."""

from __future__ import annotations

from dataclasses import dataclass

from allocator import policies
from allocator.node.fallback import FallbackSettings
from allocator.node.usage_table import CleanupRules
from allocator.ramps.ramped_pool import GroupRamp
from allocator.wire.envelope import check_key
from allocator.wire.pulsar.limits import WIRES, pulsar_refusal
from allocator.wire.signing import PublicKeys

DEFAULT_POLICY = policies.bind("pip82-steal")


@dataclass(frozen=True)
class NodeSettings:
    """How a broker reports, cleans up and allocates; the same for every broker of a cluster.

    The bound policy carries the broker's mechanisms (its hooks, `allocator.policies.hooks`): where a newcomer
    starts, what is reported, how the view is read, what a quota change does.
    """

    dimensions: tuple[str, ...]
    interval_s: float = 1.0
    policy: policies.BoundPolicy = DEFAULT_POLICY  # bound and checked once, where the scenario is loaded
    threshold_pct: float = 10.0
    force_every: int = 5
    report_demand: bool = False
    stale_after_s: float = 10.0  # an entry of another broker not refreshed for this long expires
    max_report_age_s: float = 2.0  # a report published longer ago than this is dropped
    max_clock_skew_s: float = 2.0  # ... and one published further ahead of this broker's clock than this
    compress: bool = False
    float32_rates: bool = False  # rates on the wire as float32: 4 bytes instead of 8, relative error under 6e-8
    ramps: tuple[GroupRamp, ...] = ()  # ramped quotas (allocator.ramps.ramped_pool); a group's quota is their max
    fallback: FallbackSettings = FallbackSettings()  # what a broker does when reports stop (allocator.node.fallback)
    hmac_key: bytes | None = None  # the cluster key: any holder signs as any broker
    public_keys: PublicKeys | None = None  # per-broker keys: each broker signs with its own (`BrokerNode.signer`)
    wire: str = "quotalab"  # quotalab (allocator.wire.codec) | pulsar (Pulsar's ResourceUsageInfo: docs/pulsar.md)

    def __post_init__(self) -> None:
        if not isinstance(self.policy, policies.BoundPolicy):
            raise TypeError(f"policy must be allocator.policies.bind(name, params), not {type(self.policy).__name__}")
        check_key(self.hmac_key, public_keys=self.public_keys)  # TypeError now, not every report counted as bad
        if self.wire not in WIRES:
            raise ValueError(f"wire must be one of {', '.join(WIRES)}, got {self.wire!r}")
        refusal = pulsar_refusal(
            demand=self.report_demand or self.policy.policy.claims_estimated_demand,
            signed=self.hmac_key is not None or self.public_keys is not None,
            compress=self.compress,
            float32_rates=self.float32_rates,
        )
        if self.wire == "pulsar" and refusal is not None:
            raise ValueError(f"wire pulsar: {refusal}")

    def cleanup_rules(self, keep_listed: bool) -> CleanupRules:
        """The usage table's rules; `keep_listed`: the policy keeps the entries of the peers the registry lists."""
        return CleanupRules(
            stale_after_s=self.stale_after_s,
            max_report_age_s=self.max_report_age_s,
            max_clock_skew_s=self.max_clock_skew_s,
            interval_s=self.interval_s,
            keep_listed=keep_listed,
        )
