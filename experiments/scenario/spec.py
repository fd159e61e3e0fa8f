"""A scenario as its author wrote it, checked: the dataclasses `experiments.scenario` parses YAML into.

Allowed keys are these fields, and every default here is the default a scenario file gets when it leaves the
key out. Units are the author's (rounds); `experiments.planner.build_plan` translates a scenario once into the
plan the runtime runs (`actors.plan`), which never sees these.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from actors.workload import Profile
from allocator.wire.report_fields import DIMENSIONS

# Fields read from a file or the environment when a scenario loads: not keys of a scenario file, and left out of
# `Scenario.to_dict` (the manifest), so a secret is never written.
SECRETS = frozenset({"hmac_key", "broker_keys"})
# Fields written inside another key, not keys of their own section (a group's ramps are written in its quota).
NESTED = frozenset({"ramp_up"})


@dataclass(frozen=True)
class PolicySpec:
    name: str = "fair-share-safe"  # allocator.policies.RECOMMENDED
    params: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportingSpec:
    threshold_pct: float = 10.0
    force_every: int = 5
    report_demand: bool = False
    compress: bool = False
    float32_rates: bool = False  # rates on the wire as float32 (4 bytes, not 8; relative error under 6e-8)
    wire: str = "quotalab"  # quotalab | pulsar: Pulsar's own ResourceUsageInfo (docs/pulsar.md)
    # The cluster key (reports are signed and checked when there is one) comes from a file (relative to the
    # scenario) or an environment variable, never from the scenario's text. Only its source is written anywhere.
    hmac_key_file: str | None = None
    hmac_key_env: str | None = None
    hmac_key: bytes | None = field(default=None, repr=False)  # read once when the scenario loads; in SECRETS
    # Per-broker keys (Ed25519, `allocator.wire.signing`): a directory holding `<broker>.key` for every broker (as
    # `quotalab keys` writes it), named here or by an environment variable; not with an hmac_key_* above.
    key_dir: str | None = None
    key_dir_env: str | None = None
    broker_keys: dict[str, bytes] | None = field(default=None, repr=False)  # broker -> private key; in SECRETS

    @property
    def signed(self) -> bool:
        """Reports are signed (with the cluster key or per-broker keys)."""
        return self.hmac_key is not None or self.broker_keys is not None


@dataclass(frozen=True)
class CleanupSpec:
    stale_after_rounds: int = 10
    max_report_age_rounds: float = 2.0
    membership: bool = True
    # membership: a broker whose heartbeats stop this long is declared dead. One round: heartbeats come three
    # times per timeout (realtime: between ticks), so a session outlives two late ones, and a crash is known
    # within a round (Pulsar's metadata session, 30 s, is half of its 60 s usage-report interval)
    session_timeout_rounds: int = 1


@dataclass(frozen=True)
class MembershipSpec:
    """Where the brokers agree on the pool size (policies that split by it: numaflow-equal)."""

    store: str = "memory"  # memory | redis (realtime runs only)
    url: str | None = None  # redis: redis://HOST:PORT/DB; none: the run's Redis (channel.redis_url, or its own)


@dataclass(frozen=True)
class BurstSpec:
    """Gilbert-Elliott loss: a two-state chain per link; `loss` applies in the good state."""

    p_enter: float = 0.05  # good -> bad, per message
    p_exit: float = 0.3  # bad -> good, per message
    loss_bad: float = 0.8


@dataclass(frozen=True)
class ChannelSpec:
    loss: float = 0.0
    burst: BurstSpec | None = None
    delay_rounds: float = 0.0
    jitter_rounds: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    partitions: tuple[tuple[str, ...], ...] = ()
    shards: int = 1
    routing: str = "broadcast"  # broadcast: shards keyed by group id | interest: one inbox topic per broker
    # simulated: quotalab's own channel | redis: Redis Pub/Sub (realtime; the faults above then apply on receipt)
    transport: str = "simulated"
    redis_url: str | None = None  # redis: an existing server (what a Ray cluster needs); none: the run starts one
    pubsub_buffer_limit: str | None = None  # the run's own server's client-output-buffer-limit pubsub: "64kb 0 0"


@dataclass(frozen=True)
class WorkloadSpec:
    group: str
    msgs_per_s: Profile
    msg_bytes: float = 1000.0


@dataclass(frozen=True)
class LiarSpec:
    """An insider: the broker reports `usage_factor` times its usage and demand, signed with its own key."""

    usage_factor: float


@dataclass(frozen=True)
class BrokerSpec:
    name: str
    workload: tuple[WorkloadSpec, ...] = ()
    join_at: int = 0
    liar: LiarSpec | None = None


@dataclass(frozen=True)
class RampSpec:
    """A quota that ramps up (`allocator.ramps.ramp`): from `min` to `max` per second over `duration_s`, in `mode`
    (scheduled, relaxed, only-if-used, go-back-n), in 1-s epochs."""

    mode: str
    min: float
    max: float
    duration_s: float
    usage_threshold_pct: float = 50.0  # Numaflow's default


@dataclass(frozen=True)
class GroupSpec:
    name: str
    quota: dict[str, float]  # dimension -> rate per second (a ramped one's `max`); math.inf: unlimited
    ramp_up: dict[str, RampSpec] = field(default_factory=dict)  # dimension -> its ramp, written as quota.DIM.ramp_up


@dataclass(frozen=True)
class FallbackSpec:
    """What a broker does for a group it heard no report for in `after_rounds` (`allocator.node.fallback`)."""

    mode: str = "none"  # none | hold | open | closed | share | decay
    after_rounds: int = 10
    decay_rounds: int = 10


@dataclass(frozen=True)
class EventSpec:
    """One scenario event. kind: join | leave | crash | restart | demand | quota | channel | clock_skew |
    registry_outage | forge | stall | redis_outage.

    `target` is the broker (join, leave, crash, restart, demand, clock_skew, stall; forge: the broker whose name
    the forged report carries) or the group (quota), '' for channel, registry_outage and redis_outage; `params`
    holds the rest as written (demand: group, msgs_per_s; quota: dimension -> rate; channel: ChannelSpec keys;
    clock_skew: offset_s; registry_outage and redis_outage: rounds; forge: signed, report, key_of: the broker
    whose stolen key signs it; stall: seconds, for which the broker's host reads nothing).
    """

    at: int
    kind: str
    target: str = ""
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RealtimeSpec:
    jitter_pct: float = 5.0  # timer jitter, percent of interval_s (at most 50: a tick stays within its round)
    clock_offset_s: float = 0.0  # max absolute offset of each broker's clock, drawn per broker


@dataclass(frozen=True)
class ThrottleSpec:
    """How a broker throttles producers (allocator.producers.simulator): pause-connection or PIP-385's signal."""

    mode: str = "pause-connection"  # pause-connection | signal
    step_ms: float = 10.0  # the producers' time step within a round
    receipt_wait_ms: float = 100.0  # Pulsar's throttleProducerReceiptWaitTimeMillis
    broker_msgs_per_s: float = math.inf  # the broker's own publish rate, or 'unlimited'
    persist_bytes_per_s: float = math.inf  # the broker's persistence capacity, 'unlimited': persisted as read
    max_pending_per_connection: float = 1000.0  # Pulsar's maxPendingPublishRequestsPerConnection, or 'unlimited'
    publish_buffer_mb: float = 2048.0  # Pulsar's maxMessagePublishBufferSizeInMB (MiB), or 'unlimited'


@dataclass(frozen=True)
class ProducerSpec:
    topic: str
    broker: str
    group: str
    msgs_per_s: Profile
    msg_bytes: float = 1000.0
    send_timeout_ms: float = 30_000.0  # Pulsar's default sendTimeout
    max_pending: int = 1000  # messages; a send that finds them all pending fails (blockIfQueueFull = false)
    topic_msgs_per_s: float = math.inf  # the topic's publish rate, or 'unlimited'


@dataclass(frozen=True)
class ClientSpec:
    """One client: one connection per broker it produces to (connectionsPerBroker = 1)."""

    name: str
    producers: tuple[ProducerSpec, ...]
    throttle_signal: bool = True  # understands PIP-385's ThrottleProducer
    receipt_ms: float = 1.0  # how long it takes to acknowledge one


@dataclass(frozen=True)
class Scenario:
    name: str
    groups: tuple[GroupSpec, ...]
    brokers: tuple[BrokerSpec, ...]
    seed: int = 0
    rounds: int = 60
    interval_s: float = 1.0
    mode: str = "lockstep"  # lockstep | realtime
    backend: str = "local"  # local | ray
    policy: PolicySpec = field(default_factory=PolicySpec)
    reporting: ReportingSpec = field(default_factory=ReportingSpec)
    cleanup: CleanupSpec = field(default_factory=CleanupSpec)
    membership: MembershipSpec = field(default_factory=MembershipSpec)
    channel: ChannelSpec = field(default_factory=ChannelSpec)
    events: tuple[EventSpec, ...] = ()
    realtime: RealtimeSpec = field(default_factory=RealtimeSpec)
    fallback: FallbackSpec = field(default_factory=FallbackSpec)
    brokers_per_actor: int = 1  # ray backend: logical brokers hosted by one actor
    # brokers whose host's process died (on Ray: killed, or its node lost) start again, on a new host placed on a
    # node still up, this many rounds after the round that saw them lost, as a `restart` event does; 0: never
    restart_lost_after_rounds: int = 0
    description: str = ""
    generated: dict[str, Any] | None = None  # the `generated:` block that groups and brokers came from
    throttle: ThrottleSpec = field(default_factory=ThrottleSpec)
    clients: tuple[ClientSpec, ...] = ()  # producers on connections (experiments.scenario.clients)

    def dimensions(self) -> tuple[str, ...]:
        """Quota dimensions used by any group, in the canonical order of DIMENSIONS."""
        used = {dim for group in self.groups for dim in group.quota}
        return tuple(dim for dim in DIMENSIONS if dim in used)

    def to_dict(self) -> dict[str, Any]:
        """The scenario as plain data for the manifest, without SECRETS."""
        return asdict(self, dict_factory=_without_secrets)


def _without_secrets(items: list[tuple[str, Any]]) -> dict[str, Any]:
    """A dataclass as a dict for JSON: no secret, and an unlimited number written as the scenario's word for it."""
    return {name: "unlimited" if value == math.inf else value for name, value in items if name not in SECRETS}
