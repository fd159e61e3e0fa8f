"""The resolved plan: what the runtime runs, built once from a checked scenario (`experiments.planner`).

Below this boundary nothing is validated again and nothing is translated again:
- quotas are numpy arrays, `np.inf` the only "unlimited";
- the policy is bound once to its checked settings (`NodeSettings.policy`);
- time is in seconds (`_s`); only event times and `join_at` count rounds, which is what the drivers step;
- every broker knows its global group ids, their names, and the topics each group's entry is published on;
- each component draws from its own seeded generator (`component_rng`).

A host actor receives a `HostPlan`: the settings every broker shares and the `BrokerPlan`s of its own
brokers, never the whole cluster.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from actors.workload import Profile, rate_at
from allocator.node.node_settings import NodeSettings
from allocator.producers.simulator import ProducerSet, ThrottleSettings
from allocator.wire.routing import Routes
from allocator.wire.signing import Signer


def stable_hash(name: str) -> int:
    """A hash of a name that is the same in every process (Python's `hash` is salted)."""
    return zlib.crc32(name.encode("utf-8"))


def component_rng(seed: int, name: str, *stream: int) -> np.random.Generator:
    """The generator of one component (a broker's workload, its timer, a channel subscriber): seeded from the
    run seed, the component's name and a stream number, so adding a component leaves the others' draws alone."""
    return np.random.default_rng([seed, stable_hash(name), *stream])


@dataclass(frozen=True)
class Burst:
    """Gilbert-Elliott loss: a two-state chain per link; the channel's `loss` applies in the good state."""

    p_enter: float  # good -> bad, per message
    p_exit: float  # bad -> good, per message
    loss_bad: float


@dataclass(frozen=True)
class ChannelPlan:
    """The lossy topic. `topics` is the number of topics: shards (`broadcast`) or one inbox per broker
    (`interest`); which topics a broker publishes a group on is in its `BrokerPlan.routes`."""

    loss: float = 0.0
    burst: Burst | None = None
    delay_s: float = 0.0
    jitter_s: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0  # probability that a copy is held back one more interval
    reorder_delay_s: float = 1.0
    partitions: tuple[tuple[str, ...], ...] = ()
    routing: str = "broadcast"
    topics: int = 1
    transport: str = "simulated"  # simulated | redis (realtime runs: the faults above then apply on receipt)
    redis_url: str | None = (
        None  # redis: an existing server; None: the run starts its own (actors.transport.redis_server)
    )
    pubsub_buffer_limit: str | None = None  # the run's own server's `client-output-buffer-limit pubsub` ("64kb 0 0")


@dataclass(frozen=True)
class ConsensusPlan:
    """The pool-size consensus of a policy that splits by an agreed pool size (`allocator.node.pool_size`)."""

    store: str  # memory | redis
    url: str | None
    ttl_s: float  # a member silent for longer leaves the pool: the membership's session timeout


@dataclass(frozen=True)
class Workload:
    """The offered load of a broker's groups, aligned with its `group_ids`: constant rates as one array, and
    the few rows with another profile (ramp, sine, poisson, trace) evaluated one by one."""

    msgs_per_s: np.ndarray  # [n] constant rates (0 for a group with no load yet)
    msg_bytes: np.ndarray  # [n]
    since_round: np.ndarray  # [n] the round each row's profile counts from
    profiles: dict[int, Profile] = field(default_factory=dict)  # row -> a profile that is not constant

    def rates_at(self, round_index: int, rng: np.random.Generator) -> np.ndarray:
        """Messages per second offered in round `round_index` per row: the constant rates, then the profiles."""
        rates = self.msgs_per_s.copy()
        for row, profile in self.profiles.items():
            rates[row] = rate_at(profile, round_index, rng, since_round=int(self.since_round[row]))
        return rates

    def with_rate(self, row: int, rate: Profile, since_round: int) -> Workload:
        """A copy with row `row` set to `rate` from `since_round` on (a `demand` event)."""
        msgs_per_s, since, profiles = self.msgs_per_s.copy(), self.since_round.copy(), dict(self.profiles)
        since[row] = since_round
        profiles.pop(row, None)
        if rate.kind == "constant":
            msgs_per_s[row] = rate.params["rate"]
        else:
            msgs_per_s[row] = 0.0
            profiles[row] = rate
        return Workload(msgs_per_s, self.msg_bytes, since, profiles)


@dataclass(frozen=True)
class ProducerPlan:
    """A broker's producers (`allocator.producers.simulator`): who they are, their limits and their offered load, whose
    rows align with `producers` (its `msg_bytes` is the producers'; `profiles` the rows not constant)."""

    topics: tuple[str, ...]  # [P]
    clients: tuple[str, ...]  # [P]
    producers: ProducerSet
    workload: Workload


@dataclass(frozen=True)
class BrokerPlan:
    name: str
    index: int  # position in the plan; its inbox topic under interest routing
    join_at: int  # round of its first start
    group_ids: np.ndarray  # [n] global ids of every group it may serve in this run
    group_names: tuple[str, ...]  # [n]
    routes: Routes  # the topics each of its groups' entries is published on
    subscriptions: tuple[int, ...]  # the topics it listens to
    workload: Workload
    clock_offset_s: float = 0.0
    producers: ProducerPlan | None = None  # None: no producer model, only rates per group
    signer: Signer | None = None  # its own key, with per-broker keys (`NodeSettings.public_keys`)
    usage_factor: float = 1.0  # a liar reports this many times its usage and demand (1: honest)


@dataclass(frozen=True)
class HostPlan:
    """What one host actor needs: the settings all brokers share and its own brokers' plans."""

    seed: int
    rounds: int
    interval_s: float
    node: NodeSettings
    known_brokers: tuple[str, ...]
    brokers: dict[str, BrokerPlan]
    timer_jitter: float = 0.0  # realtime: a tick's interval varies by up to this fraction
    pool_consensus: bool = (
        False  # brokers split by the pool size agreed through the consensus (actors.registry.pool_consensus)
    )
    throttle: ThrottleSettings | None = None  # how brokers with producers throttle them
    session_timeout_s: float | None = None  # the membership registry's (realtime: the host's heartbeats keep it)


@dataclass(frozen=True)
class BrokerEvent:
    """join, leave, crash or restart."""

    at: int
    kind: str
    broker: str


@dataclass(frozen=True)
class DemandEvent:
    """A new rate for one of a broker's groups (`row` in its `group_ids`), counted from `at`."""

    at: int
    broker: str
    row: int
    rate: Profile


@dataclass(frozen=True)
class QuotaEvent:
    at: int
    group_id: int
    quota: np.ndarray  # [D], np.inf where unlimited
    limited: np.ndarray  # [D] bool: the dimensions the group's quota names


@dataclass(frozen=True)
class ChannelEvent:
    at: int
    changes: dict[str, Any]  # ChannelPlan fields (seconds)


@dataclass(frozen=True)
class ClockSkewEvent:
    at: int
    broker: str
    offset_s: float


@dataclass(frozen=True)
class RegistryEvent:
    """The membership registry stops (`reachable` False: a `registry_outage`) or starts answering again."""

    at: int
    reachable: bool


@dataclass(frozen=True)
class ForgeEvent:
    """A report in `broker`'s name, sent by someone else: `report` is "zero" or "inflate"; signed with a stolen
    per-broker key (`signer`), the stolen cluster key (`hmac_key`), or neither."""

    at: int
    broker: str
    report: str
    signer: Signer | None = None
    hmac_key: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class StallEvent:
    """The host of `broker` stops reading its reports for `seconds` (realtime)."""

    at: int
    broker: str
    seconds: float


@dataclass(frozen=True)
class RedisOutageEvent:
    """The run's own Redis server stops (`up` False: killed, its data gone) or starts again, empty."""

    at: int
    up: bool


Event = (
    BrokerEvent
    | DemandEvent
    | QuotaEvent
    | ChannelEvent
    | ClockSkewEvent
    | RegistryEvent
    | ForgeEvent
    | StallEvent
    | RedisOutageEvent
)


@dataclass(frozen=True)
class PlannedEvent:
    """An event with the words the `events` telemetry table records of it (kind, target, detail as JSON)."""

    event: Event
    kind: str
    target: str
    detail: str


@dataclass(frozen=True)
class Plan:
    name: str
    seed: int
    rounds: int
    interval_s: float
    mode: str  # lockstep | realtime
    dimensions: tuple[str, ...]
    group_names: tuple[str, ...]
    quota: np.ndarray  # [G, D] per second; np.inf: unlimited
    limited: np.ndarray  # [G, D] bool: the dimensions each group's quota names (telemetry rows only for those)
    node: NodeSettings
    channel: ChannelPlan
    session_timeout_s: float | None  # membership registry; None: no registry
    brokers: tuple[BrokerPlan, ...]
    events: tuple[PlannedEvent, ...]
    brokers_per_actor: int = 1
    timer_jitter: float = 0.0
    consensus: ConsensusPlan | None = None  # None: the policy splits by no agreed pool size
    throttle: ThrottleSettings | None = None
    restart_lost_after_rounds: int = 0  # brokers whose host's process died start again so many rounds later (0: never)

    def host_plans(self) -> list[HostPlan]:
        """The brokers in slices of `brokers_per_actor`, in plan order, each with the shared settings."""
        known = tuple(broker.name for broker in self.brokers)
        per_host = self.brokers_per_actor
        return [
            HostPlan(
                seed=self.seed,
                rounds=self.rounds,
                interval_s=self.interval_s,
                node=self.node,
                known_brokers=known,
                brokers={broker.name: broker for broker in self.brokers[start : start + per_host]},
                timer_jitter=self.timer_jitter,
                pool_consensus=self.consensus is not None,
                throttle=self.throttle,
                session_timeout_s=self.session_timeout_s,
            )
            for start in range(0, len(self.brokers), per_host)
        ]
