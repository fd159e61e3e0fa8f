"""Every bad input to `quotalab` is one line on stderr naming the file and the key, exit status 2, no traceback.

The table holds malformed scenario files as text (so broken YAML is covered too), each run through the command
in-process; then the report (a missing or damaged run, refused before Spark starts) and the sweep.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from actors.telemetry.writer import SCHEMAS
from experiments.cli import main
from experiments.report.load import read_manifests
from experiments.run import run_scenario
from experiments.scenario import parse_scenario
from tests.experiments.trust_cases import corrupt_pages, store_as

BASE = """\
name: bad
groups:
  - {name: g, quota: {publish_msgs_per_s: 100}}
brokers:
  - {name: b1, workload: [{group: g, msgs_per_s: 80}]}
  - {name: b2, workload: [{group: g, msgs_per_s: 40}]}
"""
HUGE = "1" + "0" * 400  # an integer beyond any float: 1e400


def top(text: str) -> str:
    """BASE with top-level keys added."""
    return BASE + text + "\n"


def rate(value: str) -> str:
    """BASE with b1's rate replaced (a number or a profile)."""
    return BASE.replace("msgs_per_s: 80", f"msgs_per_s: {value}")


def quota(value: str) -> str:
    return BASE.replace("publish_msgs_per_s: 100", f"publish_msgs_per_s: {value}")


RAMP = "groups[0].quota.publish_msgs_per_s.ramp_up"


def ramp(change: str) -> str:
    """BASE with g's quota a ramp to 100, one of its keys changed (`mode: x`)."""
    keys = {"mode": "relaxed", "min": "10", "max": "100", "duration_s": "10"}
    if change:
        name, value = change.split(": ")
        keys[name] = value
    return quota("{ramp_up: {" + ", ".join(f"{name}: {value}" for name, value in keys.items()) + "}}")


def workload(extra: str) -> str:
    """BASE with keys added to b1's workload entry."""
    return BASE.replace("msgs_per_s: 80", f"msgs_per_s: 80, {extra}")


def generated(**changes: str) -> str:
    block = {"groups": "4", "brokers": "2", "brokers_per_group": "2", "quota": "{publish_msgs_per_s: 100}",
             "msgs_per_s": "10", **changes}  # fmt: skip
    return "name: gen\ngenerated: {" + ", ".join(f"{key}: {value}" for key, value in block.items()) + "}\n"


def many_brokers(count: int) -> str:
    lines = "".join(f"  - {{name: b{index}}}\n" for index in range(count))
    return "name: many\ngroups: [{name: g, quota: {publish_msgs_per_s: 1}}]\nbrokers:\n" + lines


@dataclass(frozen=True)
class Bad:
    text: str | bytes
    key: str  # what the message names after the file: a dotted key, "line N, column M", or "" (the whole file)
    problem: str  # a fragment of the problem
    files: dict[str, str | bytes] = field(default_factory=dict)  # written next to the scenario, mode 0600
    env: dict[str, str] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)  # a file's or folder's mode, set after writing
    hidden: str = ""  # what a file holds that the message must not show


UNSET = "QUOTALAB_TEST_NO_SUCH_VARIABLE"
TRACE = "brokers[0].workload[0].msgs_per_s.trace"
RATE_CAP = "must be <= 1000000000000"

BAD = {
    # the file itself
    "YAML syntax error": Bad("name: t\nrounds: 5\n  seed: 3\n", "line 3, column 7", "invalid YAML: mapping values"),
    "duplicate key": Bad(top("name: again"), "line 7, column 1", "invalid YAML: duplicate key 'name'"),
    "tab indentation": Bad("name: t\n\tseed: 1\n", "line 2, column 1", "invalid YAML"),
    "unclosed flow list": Bad("name: [a, b\n", "line 2, column 1", "invalid YAML"),
    "a list": Bad("- a\n- b\n", "", "a scenario must be a mapping of keys, got a list"),
    "a bare number": Bad("42\n", "", "a scenario must be a mapping of keys, got a number"),
    "a key file named as the scenario": Bad(
        "SECRET-123\n", "", "a scenario must be a mapping of keys, got a string", hidden="SECRET"
    ),
    "a hex key file named as the scenario": Bad(
        "1234567890" * 6 + "\n", "", "a scenario must be a mapping of keys, got a number", hidden="12345"
    ),
    "empty file": Bad("", "", "the scenario is empty"),
    "5,000-deep flow lists": Bad("name: " + "[" * 5000 + "]" * 5000 + "\n", "line 1, column", "nested too deeply"),
    "5,000-deep block lists": Bad("name:\n" + "- " * 5000 + "x\n", "line 2, column", "nested too deeply"),
    "5,000-deep mappings": Bad("name: " + "{a: " * 5000 + "b" + "}" * 5000 + "\n", "line 1", "nested too deeply"),
    "file over 16 MiB": Bad(BASE + ("#" * 1023 + "\n") * 16 * 1024 + "\n", "", "file too large (more than 16 MiB)"),
    "not UTF-8": Bad(b"name: caf\xe9\n", "", "not a UTF-8 text file"),
    "NUL character": Bad("name: a\x00b\n", "", "invalid YAML: unacceptable character"),
    "python tag": Bad("name: !!python/object/apply:os.system [ls]\n", "line 1, column 7", "invalid YAML"),
    "impossible date": Bad(top("description: 2001-13-45"), "line 7, column 14", "not a valid timestamp"),
    "boolean tag on a word": Bad(top("description: !!bool maybe"), "line 7, column 14", "not a valid bool"),
    "unhashable key": Bad("? [a, b]\n: 1\nname: t\n", "line 1, column 3", "invalid YAML: found unhashable key"),
    "integer of 5,000 digits": Bad(top("rounds: 1" + "0" * 5000), "line 7, column 9", "not a valid int"),
    # top-level numbers
    "rounds zero": Bad(top("rounds: 0"), "rounds", "must be >= 1, got 0"),
    "rounds 10**12": Bad(top("rounds: 1000000000000"), "rounds", "must be <= 10000000, got 1000000000000"),
    "rounds 1e400 as an integer": Bad(top(f"rounds: {HUGE}"), "rounds", "must be <= 10000000, got 1000"),
    "rounds a fraction": Bad(top("rounds: 1.5"), "rounds", "must be an integer, got 1.5"),
    "rounds a word": Bad(top("rounds: ten"), "rounds", "must be an integer, got 'ten'"),
    "seed negative": Bad(top("seed: -1"), "seed", "must be >= 0, got -1"),
    "seed 10**23": Bad(top("seed: 100000000000000000000000"), "seed", "must be <= 9223372036854775807"),
    "seed 2**63": Bad(top("seed: 9223372036854775808"), "seed", "must be <= 9223372036854775807"),
    "interval below a millisecond": Bad(top("interval_s: 0.0004"), "interval_s", "must be >= 0.001, got 0.0004"),
    "interval 1e308": Bad(top("interval_s: 1e308"), "interval_s", "must be <= 86400, got 1e+308"),
    "interval not a number": Bad(top("interval_s: .nan"), "interval_s", "must be a finite number, got nan"),
    "interval infinite": Bad(top("interval_s: .inf"), "interval_s", "must be a finite number, got inf"),
    "brokers_per_actor 10**12": Bad(top("brokers_per_actor: 1000000000000"), "brokers_per_actor", "must be <= 10000"),
    "brokers_per_actor zero": Bad(top("brokers_per_actor: 0"), "brokers_per_actor", "must be >= 1, got 0"),
    "restart_lost_after_rounds negative": Bad(
        top("restart_lost_after_rounds: -2"), "restart_lost_after_rounds", "must be >= 0, got -2"
    ),
    "restart_lost_after_rounds a fraction": Bad(
        top("restart_lost_after_rounds: 2.5"), "restart_lost_after_rounds", "must be an integer, got 2.5"
    ),
    "name climbing out of runs/": Bad(
        BASE.replace("name: bad", "name: ../escape"), "name", "it names the run directory"
    ),
    "name of 300 characters": Bad(BASE.replace("name: bad", "name: " + "x" * 300), "name", "must be at most 100"),
    "unknown top-level key": Bad(top("rounsd: 5"), "rounsd", "unknown key (allowed: name, groups, brokers"),
    "10,001 brokers": Bad(many_brokers(10_001), "brokers", "at most 10000 brokers, got 10001"),
    # quotas
    "quota 1e308": Bad(quota("1e308"), "groups[0].quota.publish_msgs_per_s", f"{RATE_CAP} or 'unlimited'"),
    "quota infinite": Bad(quota(".inf"), "groups[0].quota.publish_msgs_per_s", "must be a number >= 0 or 'unlimited'"),
    "quota negative": Bad(quota("-5"), "groups[0].quota.publish_msgs_per_s", "must be a number >= 0"),
    "quota a word": Bad(quota("lots"), "groups[0].quota.publish_msgs_per_s", "got 'lots'"),
    "quota event 1e308": Bad(
        top("events: [{at: 1, quota: {group: g, publish_msgs_per_s: 1e308}}]"),
        "events[0].quota.publish_msgs_per_s",
        RATE_CAP,
    ),
    # ramped quotas, fallbacks, registry outages
    "ramp mode unknown": Bad(ramp("mode: exponential"), f"{RAMP}.mode", "must be one of scheduled, relaxed"),
    "ramp min above max": Bad(ramp("min: 200"), f"{RAMP}.min", "must be <= max (100), got 200"),
    "ramp duration negative": Bad(ramp("duration_s: -5"), f"{RAMP}.duration_s", "must be > 0, got -5"),
    "ramp threshold above 100": Bad(ramp("usage_threshold_pct: 150"), f"{RAMP}.usage_threshold_pct", "in (0, 100]"),
    "ramp without max": Bad(quota("{ramp_up: {mode: relaxed, min: 1, duration_s: 5}}"), f"{RAMP}.max", "required"),
    "ramp with a round over 1 s": Bad(ramp("") + "interval_s: 2\n", RAMP, "needs interval_s <= 1"),
    "ramp in a quota event": Bad(
        top("events: [{at: 1, quota: {group: g, publish_msgs_per_s: {ramp_up: {mode: relaxed}}}}]"),
        "events[0].quota.publish_msgs_per_s",
        "must be a number >= 0",
    ),
    "fallback mode unknown": Bad(top("fallback: {mode: panic}"), "fallback.mode", "must be one of none, hold, open"),
    "fallback sooner than forced reports": Bad(
        top("fallback: {mode: share, after_rounds: 5}"), "fallback.after_rounds", "must be > reporting.force_every (5)"
    ),
    "registry outage of 0 rounds": Bad(
        top("events: [{at: 3, registry_outage: {rounds: 0}}]"), "events[0].registry_outage.rounds", "must be >= 1"
    ),
    "registry outage without a registry": Bad(
        top("cleanup: {membership: false}\nevents: [{at: 3, registry_outage: {rounds: 2}}]"),
        "events[0].registry_outage",
        "needs a membership registry",
    ),
    # rates and their profiles
    "rate 1e308": Bad(rate("1e308"), "brokers[0].workload[0].msgs_per_s", f"{RATE_CAP}, got 1e+308"),
    "rate negative": Bad(rate("-3"), "brokers[0].workload[0].msgs_per_s", "must be >= 0, got -3"),
    "poisson mean 1e308": Bad(
        rate("{poisson: {mean: 1e308}}"), "brokers[0].workload[0].msgs_per_s.poisson.mean", RATE_CAP
    ),
    "poisson mean nan": Bad(
        rate("{poisson: {mean: .nan}}"), "brokers[0].workload[0].msgs_per_s.poisson.mean", "must be a finite number"
    ),
    "ramp to 1e13": Bad(
        rate("{ramp: {from: 0, to: 1e13, over_rounds: 5}}"), "brokers[0].workload[0].msgs_per_s.ramp.to", RATE_CAP
    ),
    "ramp over 10**12 rounds": Bad(
        rate("{ramp: {from: 0, to: 5, over_rounds: 1000000000000}}"),
        "brokers[0].workload[0].msgs_per_s.ramp.over_rounds",
        "must be <= 10000000",
    ),
    "ramp starting before 0": Bad(
        rate("{ramp: {from: 0, to: 5, over_rounds: 5, start: -1}}"),
        "brokers[0].workload[0].msgs_per_s.ramp.start",
        "must be >= 0, got -1",
    ),
    "sine amplitude 1e300": Bad(
        rate("{sine: {mean: 5, amplitude: 1e300, period_rounds: 5}}"),
        "brokers[0].workload[0].msgs_per_s.sine.amplitude",
        RATE_CAP,
    ),
    "sine period 1e400": Bad(
        rate(f"{{sine: {{mean: 5, amplitude: 1, period_rounds: {HUGE}}}}}"),
        "brokers[0].workload[0].msgs_per_s.sine.period_rounds",
        "must be <= 10000000",
    ),
    "sine period zero": Bad(
        rate("{sine: {mean: 5, amplitude: 1, period_rounds: 0}}"),
        "brokers[0].workload[0].msgs_per_s.sine.period_rounds",
        "must be >= 1, got 0",
    ),
    "trace rate 1e308": Bad(
        rate("{trace: day.csv}"),
        TRACE,
        "'day.csv' line 3: msgs_per_s must be in [0, 1000000000000]",
        files={"day.csv": "round,msgs_per_s\n0,10\n5,1e308\n"},
        hidden="1e308",
    ),
    "trace round 10**30": Bad(
        rate("{trace: day.csv}"),
        TRACE,
        "'day.csv' line 3: round must be in [0, 10000000]",
        files={"day.csv": "round,msgs_per_s\n0,10\n1000000000000000000000000000000,5\n"},
        hidden="1000000000000000000000000000000",
    ),
    "trace rounds going back": Bad(
        rate("{trace: day.csv}"),
        TRACE,
        "'day.csv' line 3: rounds must increase from line to line",
        files={"day.csv": "round,msgs_per_s\n7,10\n3,5\n"},
    ),
    "trace rate a word": Bad(
        rate("{trace: day.csv}"),
        TRACE,
        "'day.csv' line 2: round must be an integer and msgs_per_s a number",
        files={"day.csv": "round,msgs_per_s\n0,hunter2\n"},
        hidden="hunter2",
    ),
    "trace file missing": Bad(rate("{trace: day.csv}"), TRACE, "'day.csv': no such file (relative to"),
    "trace naming a key file": Bad(
        rate("{trace: cluster.key}"),
        TRACE,
        "'cluster.key': needs a first line naming the columns round and msgs_per_s",
        files={"cluster.key": "SECRET-123\n"},
        hidden="SECRET",
    ),
    "trace naming a key file with a header": Bad(
        rate("{trace: cluster.key}"),
        TRACE,
        "'cluster.key' line 2: round must be an integer and msgs_per_s a number",
        files={"cluster.key": "round,msgs_per_s\nSECRET-123\n"},
        hidden="SECRET",
    ),
    "trace /dev/zero": Bad(rate("{trace: /dev/zero}"), TRACE, "'/dev/zero': not a regular file (a character device)"),
    "trace a directory": Bad(rate("{trace: .}"), TRACE, "'.': not a regular file (a directory)"),
    "trace over 16 MiB": Bad(
        rate("{trace: day.csv}"),
        TRACE,
        "'day.csv': file too large (more than 16 MiB)",
        files={"day.csv": "round,msgs_per_s\n" + "".join(f"{r},{r:.12f}\n" for r in range(1_000_000))},
    ),
    "trace not UTF-8": Bad(
        rate("{trace: day.csv}"), TRACE, "'day.csv': not a UTF-8 text file", files={"day.csv": b"round,msgs\xe9\n"}
    ),
    "demand event poisson 1e308": Bad(
        top("events: [{at: 1, demand: {broker: b2, group: g, msgs_per_s: {poisson: {mean: 1e308}}}}]"),
        "events[0].demand.msgs_per_s.poisson.mean",
        RATE_CAP,
    ),
    "message size 1e308": Bad(
        workload("msg_bytes: 1e308"), "brokers[0].workload[0].msg_bytes", "must be <= 1073741824"
    ),
    "message size zero": Bad(workload("msg_bytes: 0"), "brokers[0].workload[0].msg_bytes", "must be > 0, got 0"),
    # sections
    "delay 1e308 rounds": Bad(top("channel: {delay_rounds: 1e308}"), "channel.delay_rounds", "must be <= 10000000"),
    "shards 10**12": Bad(top("channel: {shards: 1000000000000}"), "channel.shards", "must be <= 65536"),
    "loss above one": Bad(top("channel: {loss: 2}"), "channel.loss", "must be in [0, 1], got 2"),
    "stale after 10**30 rounds": Bad(
        top("cleanup: {stale_after_rounds: 1000000000000000000000000000000}"),
        "cleanup.stale_after_rounds",
        "must be <= 10000000",
    ),
    "report age zero": Bad(top("cleanup: {max_report_age_rounds: 0}"), "cleanup.max_report_age_rounds", "must be > 0"),
    "threshold 1e308": Bad(
        top("reporting: {threshold_pct: 1e308}"), "reporting.threshold_pct", "must be <= 10000, got 1e+308"
    ),
    "force_every 1e400": Bad(
        top(f"reporting: {{force_every: {HUGE}}}"), "reporting.force_every", "must be <= 10000000"
    ),
    "clock offset 1e308": Bad(top("realtime: {clock_offset_s: 1e308}"), "realtime.clock_offset_s", "must be <= 3600.0"),
    "clock skew 1e308": Bad(
        top("events: [{at: 1, clock_skew: {broker: b1, offset_s: 1e308}}]"),
        "events[0].clock_skew.offset_s",
        "must be in [-3600.0, 3600.0]",
    ),
    "event at 10**30": Bad(
        top("events: [{at: 1000000000000000000000000000000, crash: b1}]"), "events[0].at", "must be in [0, 60)"
    ),
    "join_at 1e400": Bad(
        BASE.replace("{name: b2,", f"{{name: b2, join_at: {HUGE},"), "brokers[1].join_at", "must be in [0, 60)"
    ),
    "policy parameter 1e308": Bad(
        top("policy: {name: pip82-steal, params: {steal_fraction: 1e308}}"), "policy.params", "steal_fraction"
    ),
    "group name with a line break": Bad(
        BASE.replace("{group: g, msgs_per_s: 40}", '{group: "x\\ny", msgs_per_s: 40}'),
        "brokers[1].workload[0].group",
        "unknown group 'x\\ny'",
    ),
    # generated clusters
    "generated 10**9 groups": Bad(
        generated(groups="1000000000"), "generated.groups", "groups * brokers_per_group must be <= 5000000"
    ),
    "generated 10**6 brokers": Bad(generated(brokers="1000000"), "generated.brokers", "must be <= 10000"),
    "generated rate 1e308": Bad(
        generated(msgs_per_s="{uniform: [0, 1e308]}"), "generated.msgs_per_s.uniform[1]", RATE_CAP
    ),
    "generated seed negative": Bad(generated(seed="-1"), "generated.seed", "must be >= 0"),
    "generated seed 2**64": Bad(generated(seed="18446744073709551616"), "generated.seed", "must be <= 92233720"),
    "generated quota 1e308": Bad(
        generated(quota="{publish_msgs_per_s: 1e308}"), "generated.quota.publish_msgs_per_s", RATE_CAP
    ),
    # keys
    "key written in the scenario": Bad(
        top("reporting: {hmac_key: hunter2}"), "reporting.hmac_key", "name a file with hmac_key_file or a variable"
    ),
    "key file missing": Bad(top("reporting: {hmac_key_file: cluster.key}"), "reporting.hmac_key_file", "no such file"),
    "key file empty": Bad(
        top("reporting: {hmac_key_file: cluster.key}"),
        "reporting.hmac_key_file",
        "file 'cluster.key' holds an empty key",
        files={"cluster.key": "\n"},
    ),
    "key file a directory": Bad(
        top("reporting: {hmac_key_file: .}"), "reporting.hmac_key_file", "'.': not a regular file (a directory)"
    ),
    "key file /dev/zero": Bad(
        top("reporting: {hmac_key_file: /dev/zero}"), "reporting.hmac_key_file", "not a regular file"
    ),
    "key file others may read": Bad(
        top("reporting: {hmac_key_file: cluster.key}"),
        "reporting.hmac_key_file",
        "'cluster.key': a key its group or others may read (mode 0644): run chmod 600 ",
        files={"cluster.key": "SECRET-123\n"},
        modes={"cluster.key": 0o644},
        hidden="SECRET",
    ),
    "key file its group may read": Bad(
        top("reporting: {hmac_key_file: cluster.key}"),
        "reporting.hmac_key_file",
        "(mode 0640): run chmod 600",
        files={"cluster.key": "SECRET-123\n"},
        modes={"cluster.key": 0o640},
    ),
    "key file of 1 MiB": Bad(
        top("reporting: {hmac_key_file: cluster.key}"),
        "reporting.hmac_key_file",
        "'cluster.key': file too large (more than 8192 bytes)",
        files={"cluster.key": "k" * 2**20},
    ),
    "key variable unset": Bad(
        top(f"reporting: {{hmac_key_env: {UNSET}}}"), "reporting.hmac_key_env", f"{UNSET} is not set"
    ),
    "key variable empty": Bad(
        top("reporting: {hmac_key_env: QUOTALAB_TEST_EMPTY_KEY}"),
        "reporting.hmac_key_env",
        "QUOTALAB_TEST_EMPTY_KEY holds an empty key",
        env={"QUOTALAB_TEST_EMPTY_KEY": " "},
    ),
    "key from a file and a variable": Bad(
        top("reporting: {hmac_key_file: cluster.key, hmac_key_env: K}"), "reporting", "not both"
    ),
    # the pool-size consensus store
    "membership store unknown": Bad(top("membership: {store: etcd}"), "membership.store", "one of memory, redis"),
    "membership key unknown": Bad(top("membership: {stor: redis}"), "membership.stor", "unknown key"),
    "membership redis in lockstep": Bad(
        top("membership: {store: redis, url: 'redis://127.0.0.1:6379/0'}"), "membership.store", "needs mode: realtime"
    ),
    "membership url not redis": Bad(top("membership: {url: 'http://x'}"), "membership.url", "must start with redis://"),
    "membership url with a password": Bad(
        top("mode: realtime\nmembership: {store: redis, url: 'redis://:pw@127.0.0.1:6379/0'}"),
        "membership.url",
        "must not hold a password",
    ),
    # the channel's transport (Redis Pub/Sub) and its events
    "transport unknown": Bad(top("channel: {transport: kafka}"), "channel.transport", "one of simulated, redis"),
    "redis transport in lockstep": Bad(
        top("channel: {transport: redis}"), "channel.transport", "redis needs mode: realtime (lockstep needs a"
    ),
    "redis url without the redis transport": Bad(
        top("mode: realtime\nchannel: {redis_url: 'redis://127.0.0.1:6379/0'}"),
        "channel.redis_url",
        "needs transport: redis",
    ),
    "redis url with a password": Bad(
        top("mode: realtime\nchannel: {transport: redis, redis_url: 'redis://:pw@10.0.0.5:6379/0'}"),
        "channel.redis_url",
        "must not hold a password",
    ),
    "pubsub buffer limit not Redis's": Bad(
        top("mode: realtime\nchannel: {transport: redis, pubsub_buffer_limit: 64kb}"),
        "channel.pubsub_buffer_limit",
        "expected 'HARD SOFT SECONDS'",
    ),
    "pubsub buffer limit on a server given by url": Bad(
        top("mode: realtime\nchannel: {transport: redis, redis_url: 'redis://h:6379/0', pubsub_buffer_limit: 1mb 0 0}"),
        "channel.pubsub_buffer_limit",
        "configures the run's own redis-server",
    ),
    "channel event changing the transport": Bad(
        top("mode: realtime\nevents: [{at: 3, channel: {transport: redis}}]"),
        "events[0].channel.transport",
        "unknown key",
    ),
    "stall in lockstep": Bad(
        top("events: [{at: 3, stall: {broker: b1, seconds: 2}}]"), "events[0].stall", "needs mode: realtime"
    ),
    "stall of an unknown broker": Bad(
        top("mode: realtime\nevents: [{at: 3, stall: {broker: b9, seconds: 2}}]"), "events[0].stall.broker", "unknown"
    ),
    "stall of no time": Bad(
        top("mode: realtime\nevents: [{at: 3, stall: {broker: b1, seconds: 0}}]"), "events[0].stall.seconds", "> 0"
    ),
    "redis outage without redis": Bad(
        top("mode: realtime\nevents: [{at: 3, redis_outage: {rounds: 2}}]"),
        "events[0].redis_outage",
        "needs the run's own Redis server",
    ),
    "redis outage of a server given by url": Bad(
        top(
            "mode: realtime\nchannel: {transport: redis, redis_url: 'redis://h:6379/0'}\n"
            "events: [{at: 3, redis_outage: {rounds: 2}}]"
        ),
        "events[0].redis_outage",
        "not the run's to stop",
    ),
    # per-broker keys and adversaries
    "key directory missing": Bad(top("reporting: {key_dir: keys}"), "reporting.key_dir", "no such directory"),
    "a broker's key missing": Bad(
        top("reporting: {key_dir: .}"), "reporting.key_dir", "no key file 'b1.key'", files={"b2.key": "00" * 32}
    ),
    "a key not hex": Bad(
        top("reporting: {key_dir: .}"),
        "reporting.key_dir",
        "b1.key does not hold a 32-byte key in hex",
        files={"b1.key": "hunter2", "b2.key": "00" * 32},
    ),
    "a broker's key others may read": Bad(
        top("reporting: {key_dir: keys}"),
        "reporting.key_dir",
        "b1.key: a key its group or others may read (mode 0644): run chmod 600 ",
        files={"keys/b1.key": "11" * 32, "keys/b2.key": "22" * 32},
        modes={"keys/b1.key": 0o644},
        hidden="1111",
    ),
    "key directory others may write in": Bad(
        top("reporting: {key_dir: keys}"),
        "reporting.key_dir",
        "others may replace the keys in",
        files={"keys/b1.key": "11" * 32, "keys/b2.key": "22" * 32},
        modes={"keys": 0o777},
    ),
    "a broker's name climbing out of the key directory": Bad(
        top("reporting: {key_dir: keys}").replace("name: b1", "name: ../b1"),
        "reporting.key_dir",
        "broker '../b1' cannot name a key file",
        files={"b1.key": "11" * 32, "keys/b2.key": "22" * 32},
    ),
    "a broker's key a directory": Bad(
        top("reporting: {key_dir: keys}"),
        "reporting.key_dir",
        "b1.key: not a regular file (a directory)",
        files={"keys/b1.key/x": "11" * 32, "keys/b2.key": "22" * 32},
    ),
    "key directory variable unset": Bad(
        top(f"reporting: {{key_dir_env: {UNSET}}}"), "reporting.key_dir_env", f"{UNSET} is not set"
    ),
    "cluster and per-broker keys": Bad(top("reporting: {hmac_key_env: K, key_dir: keys}"), "reporting", "not both"),
    "liar factor zero": Bad(
        BASE.replace("{name: b2,", "{name: b2, liar: {usage_factor: 0},"), "brokers[1].liar.usage_factor", "must be > 0"
    ),
    "liar without factor": Bad(BASE.replace("{name: b2,", "{name: b2, liar: {},"), "brokers[1].liar", "usage_factor"),
    "forge of an unknown broker": Bad(
        top("events: [{at: 3, forge: {as: b9, signed: false, report: zero}}]"), "events[0].forge.as", "b9"
    ),
    "forge report unknown": Bad(
        top("events: [{at: 3, forge: {as: b1, signed: false, report: lots}}]"),
        "events[0].forge.report",
        "must be one of zero, inflate",
    ),
    "forge signed without keys": Bad(
        top("events: [{at: 3, forge: {as: b1, signed: true, report: zero}}]"),
        "events[0].forge.signed",
        "true needs keys to steal",
    ),
    "forge with the victim's own key": Bad(
        top("events: [{at: 3, forge: {as: b1, signed: false, report: zero, key_of: b1}}]"),
        "events[0].forge.key_of",
        "b1",
    ),
}


def producer(extra: str = "", client: str = "") -> str:
    """BASE with one client and one producer on b1, keys added to the producer (or to the client)."""
    entry = "{topic: t, broker: b1, group: g, msgs_per_s: 10" + (f", {extra}" if extra else "") + "}"
    return top(f"clients: [{{name: app{', ' + client if client else ''}, producers: [{entry}]}}]")


# the producers and their throttling (PIP-385)
BAD.update(
    {
        "throttle mode unknown": Bad(top("throttle: {mode: pause-topic}"), "throttle.mode", "must be one of"),
        "throttle step longer than a round": Bad(
            top("throttle: {step_ms: 2000}"), "throttle.step_ms", "must be <= interval_s (1000 ms)"
        ),
        "throttle receipt wait negative": Bad(
            top("throttle: {receipt_wait_ms: -1}"), "throttle.receipt_wait_ms", ">= 0"
        ),
        "throttle broker rate a word": Bad(
            top("throttle: {broker_msgs_per_s: lots}"), "throttle.broker_msgs_per_s", "or 'unlimited', got 'lots'"
        ),
        "throttle unknown key": Bad(top("throttle: {pause_for_ms: 5}"), "throttle.pause_for_ms", "unknown key"),
        "throttle persistence of zero": Bad(
            top("throttle: {persist_bytes_per_s: 0}"), "throttle.persist_bytes_per_s", "must be > 0 or 'unlimited'"
        ),
        "throttle persistence a word": Bad(
            top("throttle: {persist_bytes_per_s: fast}"), "throttle.persist_bytes_per_s", "or 'unlimited', got 'fast'"
        ),
        "throttle pending per connection below one": Bad(
            top("throttle: {max_pending_per_connection: 0.5}"),
            "throttle.max_pending_per_connection",
            "must be >= 1 or 'unlimited', got 0.5",
        ),
        "throttle publish buffer negative": Bad(
            top("throttle: {publish_buffer_mb: -5}"), "throttle.publish_buffer_mb", "must be > 0 or 'unlimited'"
        ),
        "throttle publish buffer a list": Bad(
            top("throttle: {publish_buffer_mb: [1]}"), "throttle.publish_buffer_mb", "must be a number > 0"
        ),
        "producer on an unknown broker": Bad(
            producer().replace("broker: b1", "broker: b9"), "clients[0].producers[0].broker", "unknown broker 'b9'"
        ),
        "producer of an unknown group": Bad(
            producer().replace("group: g, msgs_per_s: 10", "group: h, msgs_per_s: 10"),
            "clients[0].producers[0].group",
            "unknown group 'h'",
        ),
        "producer without a topic": Bad(
            producer().replace("topic: t, ", ""), "clients[0].producers[0].topic", "required"
        ),
        "producer rate negative": Bad(
            producer().replace("msgs_per_s: 10}", "msgs_per_s: -1}"), "clients[0].producers[0].msgs_per_s", ">= 0"
        ),
        "producer send timeout zero": Bad(
            producer("send_timeout_ms: 0"), "clients[0].producers[0].send_timeout_ms", "must be > 0"
        ),
        "producer send timeout of 10,000 steps": Bad(
            producer("send_timeout_ms: 100000"), "clients[0].producers[0].send_timeout_ms", "<= 6000 time steps"
        ),
        "producer max_pending a fraction": Bad(
            producer("max_pending: 2.5"), "clients[0].producers[0].max_pending", "must be an integer"
        ),
        "producer topic rate infinite": Bad(
            producer("topic_msgs_per_s: .inf"), "clients[0].producers[0].topic_msgs_per_s", "or 'unlimited'"
        ),
        "client receipt negative": Bad(producer(client="receipt_ms: -2"), "clients[0].receipt_ms", ">= 0"),
        "client signal support not a boolean": Bad(
            producer(client="throttle_signal: maybe"), "clients[0].throttle_signal", "must be true or false"
        ),
        "client without producers": Bad(top("clients: [{name: app}]"), "clients[0].producers", "required"),
        "client with a topic twice": Bad(
            top(
                "clients: [{name: app, producers: [{topic: t, broker: b1, group: g, msgs_per_s: 1}, "
                "{topic: t, broker: b2, group: g, msgs_per_s: 1}]}]"
            ),
            "clients[0].producers[1].topic",
            "duplicate topic 't'",
        ),  # fmt: skip
    }
)


def test_the_base_scenario_is_good():
    assert parse_scenario(yaml.safe_load(BASE)).rounds == 60  # each case breaks it in one place only


def refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run `quotalab ARGV...` in-process; it must exit with status 2 and one line on stderr, which is returned."""
    code = main(argv)
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert code == 2, captured
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_bad_scenario_is_one_line(tmp_path, capsys, monkeypatch, case):
    monkeypatch.delenv(UNSET, raising=False)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    for name, content in case.files.items():
        (tmp_path / name).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        (tmp_path / name).chmod(0o600)
    for name, mode in case.modes.items():
        (tmp_path / name).chmod(mode)
    path = tmp_path / "bad.yaml"
    if isinstance(case.text, bytes):
        path.write_bytes(case.text)
    else:
        path.write_text(case.text)
    line = refusal(capsys, ["run", str(path), "--backend", "local", "--out", str(tmp_path / "run")])
    assert line.startswith(f"quotalab run: {path}: {case.key}"), line
    assert case.problem in line, line
    assert not case.hidden or case.hidden not in line, line
    assert not (tmp_path / "run").exists()  # nothing started


def test_there_are_at_least_fifty_cases():
    assert len(BAD) >= 50


# --- the command line --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--rounds", "0"], "rounds: must be >= 1, got 0"),
        (["--rounds", "100000000000"], "rounds: must be <= 10000000, got 100000000000"),
        (["--seed", "-1"], "seed: must be >= 0, got -1"),
        (["--seed", "99999999999999999999"], "seed: must be <= 9223372036854775807, got 99999999999999999999"),
    ],
)
def test_bad_option_is_one_line(tmp_path, capsys, options, message):
    path = tmp_path / "good.yaml"
    path.write_text(BASE)
    assert refusal(capsys, ["run", str(path), "--backend", "local", *options]) == f"quotalab run: {path}: {message}"


def test_missing_scenario_file(tmp_path, capsys):
    path = tmp_path / "nowhere.yaml"
    assert refusal(capsys, ["run", str(path)]).startswith(f"quotalab run: {path}: no such file")


def test_a_scenario_that_is_a_directory(tmp_path, capsys):
    line = refusal(capsys, ["run", str(tmp_path)])
    assert line == f"quotalab run: {tmp_path}: not a regular file (a directory)"


def test_a_scenario_that_is_dev_zero(capsys):
    line = refusal(capsys, ["run", "/dev/zero"])
    assert line == "quotalab run: /dev/zero: not a regular file (a character device)"


DEEP = "[" * 5000 + "]" * 5000


BAD_SETS = {
    "5,000-deep value": (
        f"name={DEEP}",
        "--set 'name': line 1, column 33: invalid YAML: nested too deeply (more than 32 levels)",
    ),
    "5,000-deep value in a mapping": (f"channel.loss={{a: {DEEP}}}", "--set 'channel.loss': line 1, column"),
    "5,000-deep key": (
        "a." * 5000 + "b=1",
        "override: 'a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a...",
    ),
    "no value": ("channel.loss", "--set: 'channel.loss': expected KEY=VALUE, e.g. channel.loss=0.3"),
    "value not YAML": ("channel.loss=[1", "--set 'channel.loss': line 1, column 3: invalid YAML"),
    "threshold 1e308": ("reporting.threshold_pct=1e308", "reporting.threshold_pct: must be <= 10000, got 1e+308"),
    "rounds 1e400": ("rounds=1e400", "rounds: must be an integer, got inf"),
}


@pytest.mark.parametrize(("option", "message"), BAD_SETS.values(), ids=BAD_SETS.keys())
def test_bad_set_is_one_line(tmp_path, capsys, option, message):
    path = tmp_path / "good.yaml"
    path.write_text(BASE)
    line = refusal(capsys, ["run", str(path), "--backend", "local", "--set", option, "--out", str(tmp_path / "run")])
    assert message in line, line
    assert len(line) < 400, line  # the value is never repeated whole
    assert not (tmp_path / "run").exists()


# --- quotalab report: refused before Spark starts ---------------------------------------------------------------

TINY = {
    "name": "tiny",
    "rounds": 12,
    "backend": "local",
    "groups": [{"name": "g", "quota": {"publish_msgs_per_s": 100}}],
    "brokers": [{"name": "b1", "workload": [{"group": "g", "msgs_per_s": 80}]}, {"name": "b2"}],
}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_scenario(parse_scenario(TINY), tmp_path_factory.mktemp("tiny") / "run", progress=False)


def test_report_on_a_missing_directory(tmp_path, capsys, no_spark):
    line = refusal(capsys, ["report", str(tmp_path / "nowhere")])
    assert line == f"quotalab report: {tmp_path / 'nowhere'}: no such run directory"


def test_report_names_the_runs_mistake_before_a_missing_java(tmp_path, capsys, monkeypatch, no_spark, tiny_run):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no java
    line = refusal(capsys, ["report", str(tmp_path / "nowhere")])
    assert line == f"quotalab report: {tmp_path / 'nowhere'}: no such run directory"
    line = refusal(capsys, ["report", str(tiny_run), "--out", str(tmp_path / "out")])
    assert line.startswith("quotalab report: Java not found (no java on the PATH)")


def test_report_on_a_directory_without_a_manifest(tmp_path, capsys, no_spark):
    line = refusal(capsys, ["report", str(tmp_path)])
    assert line.startswith(f"quotalab report: {tmp_path / 'manifest.json'}: missing")


@pytest.mark.parametrize(
    "damage",
    [lambda data: b"not parquet at all " * 10, lambda data: data[: len(data) // 2], lambda data: b""],
    ids=["garbage", "truncated", "empty"],
)
def test_report_on_a_damaged_parquet_part(tmp_path, capsys, no_spark, tiny_run, damage):
    run_dir = shutil.copytree(tiny_run, tmp_path / "run")
    part = sorted((run_dir / "rounds").glob("*.parquet"))[0]
    part.write_bytes(damage(part.read_bytes()))
    line = refusal(capsys, ["report", str(run_dir)])
    assert line.startswith(f"quotalab report: {part}: not a readable Parquet file ("), line


def test_report_on_corrupted_data_pages(tmp_path, capsys, no_spark, tiny_run):
    run_dir = shutil.copytree(tiny_run, tmp_path / "run")
    part = sorted((run_dir / "rounds").glob("*.parquet"))[0]
    corrupt_pages(part)
    pq.read_metadata(part)  # the footer still reads
    line = refusal(capsys, ["report", str(run_dir)])
    assert line.startswith(f"quotalab report: {part}: damaged Parquet data ("), line


def test_report_on_corrupted_data_pages_without_statistics(tmp_path, capsys, no_spark, tiny_run):
    """A footer without statistics: `run_id` and `round` are read from the pages themselves, before the pages
    of every part are checked, and fail there as a damaged part too (not a traceback)."""
    run_dir = shutil.copytree(tiny_run, tmp_path / "run")
    part = sorted((run_dir / "rounds").glob("*.parquet"))[0]
    pq.write_table(pq.read_table(part), part, write_statistics=False)
    corrupt_pages(part)
    line = refusal(capsys, ["report", str(run_dir)])
    assert line.startswith(f"quotalab report: {part}: damaged Parquet data ("), line


@pytest.mark.parametrize(
    ("column", "stored"), [("round", pa.string()), ("usage", pa.string()), ("round", pa.float64())]
)
def test_report_on_a_column_stored_as_another_type(tmp_path, capsys, no_spark, tiny_run, column, stored):
    run_dir = shutil.copytree(tiny_run, tmp_path / "run")
    part = sorted((run_dir / "rounds").glob("*.parquet"))[-1]
    store_as(part, column, stored)
    line = refusal(capsys, ["report", str(run_dir)])
    wanted = SCHEMAS["rounds"].field(column).type
    assert line == f"quotalab report: {part}: column {column} is stored as {stored}, not {wanted}"


def test_report_on_a_column_stored_wider_still_reads(tmp_path, tiny_run):
    """An int64 `round` is the same numbers: load.py casts it; the preflight lets it through."""
    run_dir = shutil.copytree(tiny_run, tmp_path / "run")
    for part in (run_dir / "rounds").glob("*.parquet"):
        store_as(part, "round", pa.int64())
    assert set(read_manifests([run_dir])) == {json.loads((run_dir / "manifest.json").read_text())["run_id"]}


def test_report_on_parts_storing_a_column_two_ways(tmp_path, capsys, no_spark, tiny_run):
    """Either part alone reads, but Spark scans them as one: int64 in one part and int32 in the other fail it."""
    run_dir = shutil.copytree(tiny_run, tmp_path / "run")
    first, last = sorted((run_dir / "rounds").glob("*.parquet"))
    store_as(last, "round", pa.int64())
    line = refusal(capsys, ["report", str(run_dir)])
    assert line == f"quotalab report: {last}: column round is stored as int64, but as int32 in {first}"


@pytest.mark.parametrize("deleted", ["all", "last"])
def test_report_on_a_run_with_rounds_parts_missing(tmp_path, capsys, no_spark, tiny_run, deleted):
    run_dir = shutil.copytree(tiny_run, tmp_path / "run")
    parts = sorted((run_dir / "rounds").glob("*.parquet"))
    assert len(parts) >= 2  # TINY writes one part per 10 rounds
    for part in parts if deleted == "all" else parts[-1:]:
        part.unlink()
    line = refusal(capsys, ["report", str(run_dir)])
    completed = json.loads((run_dir / "manifest.json").read_text())["rounds_completed"]
    held = "no rows" if deleted == "all" else "rounds up to 9 only"
    assert line == (
        f"quotalab report: {run_dir}: rounds/ holds {held}, but manifest.json says {completed} rounds completed"
        " (parts lost?)"
    )


# --- quotalab sweep ----------------------------------------------------------------------------------------------


def sweep_text(**changes: str) -> str:
    body = {"name": "bad-sweep", "base": "base.yaml", "seeds": "[1]", "grid": "{channel.loss: [0.0, 0.1]}", **changes}
    return "".join(f"{key}: {value}\n" for key, value in body.items() if value)


BAD_SWEEPS = {
    "a list": ("- a\n", "", "a sweep must be a mapping of keys, got a list"),
    "nested too deeply": ("name: " + "[" * 5000 + "]" * 5000 + "\n", "line 1, column", "nested too deeply"),
    "base missing": (sweep_text(base="nowhere.yaml"), "base", "nowhere.yaml: no such file"),
    "rounds over the cap": (sweep_text(grid="{rounds: [10, 100000000]}"), "grid.rounds[1]", "must be <= 10000000"),
    "interval below a millisecond": (
        sweep_text(fixed="{interval_s: 0.0004}"),
        "fixed.interval_s",
        "must be >= 0.001",
    ),
    "a key in the sweep": (
        sweep_text(fixed="{reporting.hmac_key: hunter2}"),
        "fixed.reporting.hmac_key",
        "hmac_key_file",
    ),
    "brokers_per_actor over the cap": (
        sweep_text(grid="{brokers_per_actor: [1, 1000000000000]}"),
        "grid.brokers_per_actor[1]",
        "must be <= 10000",
    ),
}


@pytest.mark.parametrize(("text", "key", "problem"), BAD_SWEEPS.values(), ids=BAD_SWEEPS.keys())
def test_bad_sweep_is_one_line(tmp_path, capsys, text, key, problem):
    (tmp_path / "base.yaml").write_text(BASE)
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    line = refusal(capsys, ["sweep", str(path), "--out", str(tmp_path / "out")])
    assert line.startswith(f"quotalab sweep: {path}: {key}"), line
    assert problem in line, line
    assert not (tmp_path / "out").exists()
