"""The sections of a scenario that hold more than plain fields: policy, quotas, groups, brokers and their
workloads, rate profiles (with trace files), the channel and its partitions.

Each parser takes the raw value and its dotted key, and raises `checks.FieldError` naming the key.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors import workload
from allocator import policies
from experiments import checks
from experiments.scenario import converter, keys, transport
from experiments.scenario.spec import (
    DIMENSIONS,
    BrokerSpec,
    BurstSpec,
    ChannelSpec,
    GroupSpec,
    LiarSpec,
    MembershipSpec,
    PolicySpec,
    Profile,
    RampSpec,
    ReportingSpec,
    WorkloadSpec,
)
from experiments.user_files import UnreadableFileError, read_capped

UNLIMITED = "unlimited"  # the spelling of an unlimited quota (stored as math.inf, the one unlimited)


@dataclass(frozen=True)
class Context:
    """What names and rounds refer to, for the sections that refer to them (names in file order)."""

    rounds: int
    base_dir: Path
    groups: Collection[str] = ()
    brokers: Collection[str] = ()
    membership: bool = True  # a registry exists (cleanup.membership): it can have an outage
    signed: bool = False  # reports are signed: a forged report may be signed with a stolen key
    mode: str = "lockstep"
    own_redis: bool = False  # the run starts a redis-server of its own (a `redis_outage` may stop it)


def by_name(items: Sequence[GroupSpec] | Sequence[BrokerSpec]) -> dict[str, None]:
    """The names of `items` in order, for `Context` (a dict: fast membership, file order kept)."""
    return dict.fromkeys(item.name for item in items)


def policy(raw: Any, key: str) -> PolicySpec:
    """A policy of `allocator.policies.POLICIES`, its parameters checked by the policy itself."""
    body = converter.body(PolicySpec, raw, key)
    name = converter.plain_fields(PolicySpec, body, key).get("name", PolicySpec.name)
    if name not in policies.POLICIES:
        raise checks.FieldError(
            checks.at(key, "name"), f"unknown policy {name!r} (known: {', '.join(policies.POLICIES)})"
        )
    params_key = checks.at(key, "params")
    params = checks.mapping(body.get("params", {}), params_key)
    try:
        policies.check_params(name, params)  # the policy checks its own parameters and their values
    except ValueError as error:
        raise checks.FieldError(params_key, str(error)) from None
    return PolicySpec(name=name, params=dict(params))


def rate_or_unlimited(value: Any, key: str) -> float:
    """A rate per second (a quota) or 'unlimited', stored as `math.inf`."""
    if value == UNLIMITED:
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise checks.FieldError(key, f"must be a number >= 0 or '{UNLIMITED}', got {checks.show(value)}")
    if value > workload.MAX_RATE:
        raise checks.FieldError(key, f"must be <= {workload.MAX_RATE} or '{UNLIMITED}', got {checks.show(value)}")
    return float(value)


def quota(
    raw: Any, key: str, also_allowed: Sequence[str] = (), ramps: dict[str, RampSpec] | None = None
) -> dict[str, float]:
    """Dimension -> rate per second; at least one of DIMENSIONS. `also_allowed` keys are skipped here. With
    `ramps` (a group's quota), a dimension may ramp, `{ramp_up: {...}}`: its ramp goes into `ramps` and its
    rate is the ramp's `max`."""
    body = checks.mapping(raw, key, (*also_allowed, *DIMENSIONS))
    rates = {}
    for dim in DIMENSIONS:
        if dim in body and ramps is not None and isinstance(body[dim], dict):
            ramps[dim] = _ramp(body[dim], checks.at(key, dim))
            rates[dim] = ramps[dim].max
        elif dim in body:
            rates[dim] = rate_or_unlimited(body[dim], checks.at(key, dim))
    if not rates:
        raise checks.FieldError(key, f"must set at least one of {', '.join(DIMENSIONS)}")
    return rates


def _ramp(raw: Any, key: str) -> RampSpec:
    """`{ramp_up: {mode, min, max, duration_s, usage_threshold_pct}}`, with min <= max."""
    ramp_key = checks.at(key, "ramp_up")
    body = checks.mapping(raw, key, ("ramp_up",), required=("ramp_up",))
    spec = converter.plain_section(RampSpec, body["ramp_up"], ramp_key)
    if spec.min > spec.max:
        raise checks.FieldError(checks.at(ramp_key, "min"), f"must be <= max ({spec.max:g}), got {spec.min:g}")
    return spec


def groups(raw: Any, key: str) -> tuple[GroupSpec, ...]:
    """A non-empty list of groups with distinct names, each with a quota."""
    specs = []
    for index, item in enumerate(checks.list_of(raw, key)):
        item_key = checks.at(key, index)
        body = converter.body(GroupSpec, item, item_key)
        ramps: dict[str, RampSpec] = {}
        rates = quota(body["quota"], checks.at(item_key, "quota"), ramps=ramps)
        specs.append(GroupSpec(**converter.plain_fields(GroupSpec, body, item_key), quota=rates, ramp_up=ramps))
    checks.unique(specs, key, "group")
    return tuple(specs)


def brokers(raw: Any, key: str, context: Context) -> tuple[BrokerSpec, ...]:
    """A non-empty list of brokers with distinct names, each serving known groups at most once."""
    join_rule = {"join_at": checks.rounds_range(context.rounds)}
    items = checks.list_of(raw, key)
    if len(items) > converter.MAX_BROKERS:
        raise checks.FieldError(key, f"at most {converter.MAX_BROKERS} brokers, got {len(items)}")
    specs = []
    for index, item in enumerate(items):
        item_key = checks.at(key, index)
        body = converter.body(BrokerSpec, item, item_key)
        workload_key = checks.at(item_key, "workload")
        workloads = tuple(
            _workload(entry, checks.at(workload_key, position), context)
            for position, entry in enumerate(checks.list_of(body.get("workload", []), workload_key, non_empty=False))
        )
        checks.unique(workloads, workload_key, "group", attr="group")
        plain = converter.plain_fields(BrokerSpec, body, item_key, join_rule)
        liar = body.get("liar")
        if liar is not None:
            liar = converter.plain_section(LiarSpec, liar, checks.at(item_key, "liar"))
        specs.append(BrokerSpec(**plain, workload=workloads, liar=liar))
    checks.unique(specs, key, "broker")
    return tuple(specs)


def _workload(raw: Any, key: str, context: Context) -> WorkloadSpec:
    body = converter.body(WorkloadSpec, raw, key)
    plain = converter.plain_fields(WorkloadSpec, body, key)
    checks.known(plain["group"], checks.at(key, "group"), context.groups, "group")
    return WorkloadSpec(**plain, msgs_per_s=profile(body["msgs_per_s"], checks.at(key, "msgs_per_s"), context))


def profile(value: Any, key: str, context: Context) -> Profile:
    """A rate: a number (constant) or a mapping naming one profile of `actors.workload.PROFILES`."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        kind, params, params_key = "constant", {"rate": value}, key
    elif isinstance(value, dict) and len(value) == 1:
        body = checks.mapping(value, key, tuple(workload.PROFILES))
        ((kind, spec),) = body.items()
        params_key = checks.at(key, kind)
        params = _read_trace(spec, params_key, context) if kind == "trace" else dict(checks.mapping(spec, params_key))
    else:
        raise checks.FieldError(
            key, f"must be a number or one profile ({', '.join(workload.PROFILES)}), got {checks.show(value)}"
        )
    try:
        workload.check_profile(kind, params)
    except workload.ProfileError as error:
        if kind == "trace":  # its params come from the file: name the file, not a key the user never wrote
            raise checks.FieldError(params_key, f"{value['trace']}: {error}") from None
        where = key if params_key == key else checks.at(params_key, error.param)  # a bare number is the rate
        raise checks.FieldError(where, error.problem) from None
    return Profile(kind, params)


MAX_TRACE_BYTES = 16 * 2**20  # ~1.4 million rounds of `round,msgs_per_s` lines


def _read_trace(value: Any, key: str, context: Context) -> dict[str, list]:
    """A CSV file with columns `round,msgs_per_s`, relative to the scenario's folder, as profile params.

    Read as any file a scenario names (`experiments.user_files`): a regular file of at most MAX_TRACE_BYTES. A
    problem names the file and the line, never what the file holds: the file may be a key named by mistake."""
    name = checks.string(value, key)
    try:
        data = read_capped(context.base_dir / name, MAX_TRACE_BYTES)
    except UnreadableFileError as problem:
        where = f" (relative to {context.base_dir})" if str(problem) == "no such file" else ""
        raise checks.FieldError(key, f"{name!r}: {problem}{where}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise checks.FieldError(key, f"{name!r}: not a UTF-8 text file") from None
    reader = csv.DictReader(io.StringIO(text))
    if not {"round", "msgs_per_s"} <= set(reader.fieldnames or ()):
        raise checks.FieldError(key, f"{name!r}: needs a first line naming the columns round and msgs_per_s")
    rounds, rates = [], []
    for row in reader:
        problem = _trace_row_problem(row, rounds[-1] if rounds else -1)
        if problem:
            raise checks.FieldError(key, f"{name!r} line {reader.line_num}: {problem}")
        rounds.append(int(row["round"]))
        rates.append(float(row["msgs_per_s"]))
    if not rounds:
        raise checks.FieldError(key, f"{name!r}: no rows after the first line")
    return {"rounds": rounds, "rates": rates}


def _trace_row_problem(row: dict[str, str | None], previous_round: int) -> str | None:
    """What is wrong with one row of a trace, in words that do not repeat its values."""
    try:
        round_index, rate = int(row["round"] or ""), float(row["msgs_per_s"] or "")
    except ValueError:
        return "round must be an integer and msgs_per_s a number"
    if not 0 <= round_index <= workload.MAX_ROUNDS:
        return f"round must be in [0, {workload.MAX_ROUNDS}]"
    if round_index <= previous_round:
        return "rounds must increase from line to line"
    if not 0 <= rate <= workload.MAX_RATE:  # nan fails both
        return f"msgs_per_s must be in [0, {workload.MAX_RATE}]"
    return None


def reporting(raw: Any, key: str, base_dir: Path, brokers: Sequence[str] = ()) -> ReportingSpec:
    """Reporting settings; the HMAC key is read here, once, from `hmac_key_file` (relative to `base_dir`) or the
    environment variable `hmac_key_env`. Surrounding whitespace (a file's last newline) is not part of the key.
    Per-broker keys are read from the directory `key_dir` (relative to `base_dir`) or the one the environment
    variable `key_dir_env` names (relative to the working directory): `<broker>.key` for each of `brokers`."""
    if isinstance(raw, dict) and "hmac_key" in raw:
        raise checks.FieldError(
            checks.at(key, "hmac_key"),
            "a key is never written in a scenario: name a file with hmac_key_file or a variable with hmac_key_env",
        )
    settings = converter.plain_fields(ReportingSpec, converter.body(ReportingSpec, raw, key), key)
    file_name, variable = settings.get("hmac_key_file"), settings.get("hmac_key_env")
    if file_name and variable:
        raise checks.FieldError(key, "give hmac_key_file or hmac_key_env, not both")
    key_dir, key_dir_variable = settings.get("key_dir"), settings.get("key_dir_env")
    if key_dir and key_dir_variable:
        raise checks.FieldError(key, "give key_dir or key_dir_env, not both")
    if (file_name or variable) and (key_dir or key_dir_variable):
        raise checks.FieldError(key, "give a cluster key (hmac_key_*) or per-broker keys (key_dir*), not both")
    if key_dir:
        settings["broker_keys"] = keys.broker_keys(base_dir / key_dir, checks.at(key, "key_dir"), brokers)
    elif key_dir_variable:
        where = checks.at(key, "key_dir_env")
        if key_dir_variable not in os.environ:
            raise checks.FieldError(where, f"the environment variable {key_dir_variable} is not set")
        settings["broker_keys"] = keys.broker_keys(Path(os.environ[key_dir_variable]), where, brokers)
    if file_name:
        settings["hmac_key"] = _key_from_file(file_name, checks.at(key, "hmac_key_file"), base_dir)
    elif variable:
        settings["hmac_key"] = _key_from_environment(variable, checks.at(key, "hmac_key_env"))
    return ReportingSpec(**settings)


MAX_KEY_BYTES = 4096  # an HMAC-SHA256 key longer than its 64-byte block is hashed first; this bounds the read


def _key_from_file(name: str, key: str, base_dir: Path) -> bytes:
    """The key in the file `name` (relative to `base_dir`): a regular file only its owner may read."""
    try:
        secret = read_capped(base_dir / name, 2 * MAX_KEY_BYTES, secret=True).strip()
    except UnreadableFileError as problem:
        where = f" (relative to {base_dir})" if str(problem) == "no such file" else ""
        raise checks.FieldError(key, f"{name!r}: {problem}{where}") from None
    return _checked_key(secret, key, f"file {name!r}")


def _key_from_environment(variable: str, key: str) -> bytes:
    if variable not in os.environ:
        raise checks.FieldError(key, f"the environment variable {variable} is not set")
    return _checked_key(os.fsencode(os.environ[variable]).strip(), key, f"the environment variable {variable}")


def _checked_key(secret: bytes, key: str, where: str) -> bytes:
    if not secret:
        raise checks.FieldError(key, f"{where} holds an empty key")
    if len(secret) > MAX_KEY_BYTES:
        raise checks.FieldError(key, f"{where} holds more than {MAX_KEY_BYTES} bytes: not a key")
    return secret


def channel(raw: Any, key: str, context: Context, exclude: Sequence[str] = ()) -> dict[str, Any]:
    """Channel settings present in `raw` (ChannelSpec keys but `exclude`), converted."""
    body = checks.mapping(raw, key, [name for name in converter.names(ChannelSpec) if name not in exclude])
    settings = converter.plain_fields(ChannelSpec, body, key)
    if "burst" in body:
        burst = body["burst"]
        settings["burst"] = (
            None if burst is None else converter.plain_section(BurstSpec, burst, checks.at(key, "burst"))
        )
    if "partitions" in body:
        settings["partitions"] = _partitions(body["partitions"], checks.at(key, "partitions"), context)
    if settings.get("brokers_per_inbox", 1) != 1 and settings.get("routing", "broadcast") != "interest":
        raise checks.FieldError(checks.at(key, "brokers_per_inbox"), "shares inboxes: needs routing: interest")
    return settings


def _partitions(raw: Any, key: str, context: Context) -> tuple[tuple[str, ...], ...]:
    """Lists of broker names, each broker in one list at most."""
    seen: dict[str, str] = {}
    partitions = []
    for index, members in enumerate(checks.list_of(raw, key, non_empty=False)):
        part_key = checks.at(key, index)
        for position, member in enumerate(checks.list_of(members, part_key)):
            member_key = checks.at(part_key, position)
            name = checks.known(member, member_key, context.brokers, "broker")
            if name in seen:
                raise checks.FieldError(member_key, f"broker {name!r} is already in {seen[name]}")
            seen[name] = part_key
        partitions.append(tuple(members))
    return tuple(partitions)


def membership(raw: Any, key: str, mode: str) -> MembershipSpec:
    """The pool-size consensus store: `memory`, or `redis`, which only a realtime run may use (a lockstep run is
    deterministic: its store is the memory one); without a `url`, the run's Redis (`experiments.scenario.transport`)."""
    spec = converter.plain_section(MembershipSpec, raw, key)
    if spec.store == "redis" and mode != "realtime":
        raise checks.FieldError(checks.at(key, "store"), f"redis needs mode: realtime (this run is {mode})")
    if spec.url is not None:
        transport.redis_url(spec.url, checks.at(key, "url"))
    return spec
