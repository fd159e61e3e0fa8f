"""The `throttle` and `clients` sections: producers on connections and how brokers throttle them (PIP-385).

```yaml
throttle: {mode: signal, step_ms: 10, receipt_wait_ms: 100, broker_msgs_per_s: unlimited,
           persist_bytes_per_s: unlimited, max_pending_per_connection: 1000, publish_buffer_mb: 2048}
clients:
  - name: app-1
    throttle_signal: true      # the client understands ThrottleProducer (PIP-385)
    receipt_ms: 1              # and acknowledges it this fast
    producers:
      - {topic: orders, broker: broker-1, group: tenant-a/ns-1, msgs_per_s: 200, send_timeout_ms: 3000}
```
"""

from __future__ import annotations

import math
from typing import Any

from actors.workload import MAX_RATE
from allocator.producers.simulator import MODES
from experiments import checks
from experiments.scenario import converter, sections
from experiments.scenario.spec import ClientSpec, ProducerSpec, ThrottleSpec

MAX_PRODUCERS = 1000  # in a scenario: the producer model keeps a [producers, send timeout / step] array per broker
MAX_TIMEOUT_STEPS = 6000  # a send timeout of at most this many time steps (60 s at the default 10 ms)
# Fields that may be 'unlimited' (math.inf): the range of a number (None: a rate, `sections.rate_or_unlimited`)
_UNLIMITED_FIELDS: dict[type, dict[str, checks.Range | None]] = {
    ThrottleSpec: {
        "broker_msgs_per_s": None,
        "persist_bytes_per_s": checks.Range(0, low_open=True, cap=MAX_RATE),
        "max_pending_per_connection": checks.Range(1, cap=10**9),
        "publish_buffer_mb": checks.Range(0, low_open=True, cap=10**9),
    },
    ProducerSpec: {"topic_msgs_per_s": None},
}
_RULES: dict[type, dict[str, Any]] = {
    ThrottleSpec: {
        "mode": MODES,
        "step_ms": checks.Range(0.1, cap=60_000),
        "receipt_wait_ms": checks.Range(0, cap=3_600_000),
    },
    ProducerSpec: {
        "msg_bytes": checks.Range(0, low_open=True, cap=converter.MAX_MSG_BYTES),
        "send_timeout_ms": checks.Range(0, low_open=True, cap=3_600_000),
        "max_pending": checks.Range(1, cap=10**9),
    },
    ClientSpec: {"receipt_ms": checks.Range(0, cap=3_600_000)},
}


def throttle(raw: Any, key: str, interval_s: float) -> ThrottleSpec:
    """The throttle settings; a time step no longer than a round."""
    body = converter.body(ThrottleSpec, raw, key)
    settings = _fields(ThrottleSpec, body, key)
    step_ms = settings.get("step_ms", ThrottleSpec.step_ms)
    if step_ms > interval_s * 1000:
        raise checks.FieldError(checks.at(key, "step_ms"), f"must be <= interval_s ({interval_s * 1000:g} ms)")
    return ThrottleSpec(**settings)


def clients(raw: Any, key: str, context: sections.Context, step_ms: float) -> tuple[ClientSpec, ...]:
    """Clients with distinct names, each with distinct topics on known brokers and groups."""
    specs = []
    n_producers = 0
    for index, item in enumerate(checks.list_of(raw, key, non_empty=False)):
        item_key = checks.at(key, index)
        body = converter.body(ClientSpec, item, item_key)
        producers_key = checks.at(item_key, "producers")
        producers = tuple(
            _producer(entry, checks.at(producers_key, position), context, step_ms)
            for position, entry in enumerate(checks.list_of(body["producers"], producers_key))
        )
        checks.unique(producers, producers_key, "topic", attr="topic")
        n_producers += len(producers)
        if n_producers > MAX_PRODUCERS:
            raise checks.FieldError(producers_key, f"at most {MAX_PRODUCERS} producers in a scenario")
        specs.append(ClientSpec(**_fields(ClientSpec, body, item_key), producers=producers))
    checks.unique(specs, key, "client")
    return tuple(specs)


def _producer(raw: Any, key: str, context: sections.Context, step_ms: float) -> ProducerSpec:
    body = converter.body(ProducerSpec, raw, key)
    plain = _fields(ProducerSpec, body, key)
    checks.known(plain["broker"], checks.at(key, "broker"), context.brokers, "broker")
    checks.known(plain["group"], checks.at(key, "group"), context.groups, "group")
    timeout_ms = plain.get("send_timeout_ms", ProducerSpec.send_timeout_ms)
    if timeout_ms > MAX_TIMEOUT_STEPS * step_ms:
        raise checks.FieldError(
            checks.at(key, "send_timeout_ms"),
            f"must be <= {MAX_TIMEOUT_STEPS} time steps of throttle.step_ms ({MAX_TIMEOUT_STEPS * step_ms:g} ms)",
        )
    rate = sections.profile(body["msgs_per_s"], checks.at(key, "msgs_per_s"), context)
    return ProducerSpec(**plain, msgs_per_s=rate)


def _fields(cls: type, body: dict[str, Any], key: str) -> dict[str, Any]:
    """The plain fields of `cls` in `body`, and those that may be 'unlimited'."""
    unlimited = _UNLIMITED_FIELDS.get(cls, {})
    plain = converter.plain_fields(cls, {k: v for k, v in body.items() if k not in unlimited}, key, _RULES[cls])
    for name, rule in unlimited.items():
        if name in body:
            plain[name] = _number_or_unlimited(body[name], checks.at(key, name), rule)
    return plain


def _number_or_unlimited(value: Any, key: str, rule: checks.Range | None) -> float:
    """A number in `rule` or 'unlimited' (`math.inf`); a rate when `rule` is None."""
    if rule is None:
        return sections.rate_or_unlimited(value, key)
    if value == sections.UNLIMITED:
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or value not in rule:
        problem = rule.problem(value) if isinstance(value, int | float) and not isinstance(value, bool) else ""
        raise checks.FieldError(
            key, f"{problem or f'must be a number {rule}'} or '{sections.UNLIMITED}', got {checks.show(value)}"
        )
    return float(value)
