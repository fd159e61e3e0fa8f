"""Scenario files: YAML in, a validated `experiments.scenario.spec.Scenario` out, or one line saying what is wrong.

Everything is checked before anything starts: unknown keys at every level, types, ranges, names that refer
to groups or brokers, event rounds, policy names and parameters, rate profiles. A mistake raises
`ScenarioError`, whose message is one line: `file: dotted.key[index]: problem`.

- `reading`: the strict YAML loader, dotted overrides, `load_scenario` and `parse_scenario`.
- `converter`: allowed keys are the fields of the dataclasses in `spec` (a section's defaults are
  theirs); plain fields (int, float, bool, str) are converted and range-checked from their annotations with
  the rules in `converter._RULES`.
- `sections`: the structured keys (policy, quotas, groups, brokers, workloads, profiles, traces, channel).
- `events`: one parser per event kind, and the broker lifecycle.
- `generation`: the `generated:` block, a synthetic cluster.
- `keys`: per-broker keys read from `reporting.key_dir` (or the directory `reporting.key_dir_env` names).

Why hand-written checkers, not pydantic v2: pydantic was tried on `reporting`, `cleanup` and `channel` (with
`burst` and `partitions`). Its models restate every field of the `spec` dataclasses, which the
converter reads from there, and its errors must be translated back to ours (`must be in [0, 1]` needs both
bounds where pydantic names the one broken; it lists unknown keys after the other errors, and non-string
keys in its own words). That came to 111 lines of code (44 of models, 56 translating errors, 11 building the
dataclasses) against 63 by hand (23 of converter, 16 of rules, 24 for the channel and its partitions), with
35 of 36 trial messages the same. Lines of code: no blank lines, comments, docstrings or imports.

Decisions that a scenario author should know:

- Quotas are numbers >= 0 or the string `unlimited` (stored as `math.inf`); a negative number is refused.
- Every number has a sane upper bound, far beyond any experiment and below what breaks the arithmetic:
  rates and quotas <= 10**12 (`actors.workload.MAX_RATE`), lengths in rounds <= 10**7, `interval_s` in
  [0.001, 86400], seeds < 2**63, at most 10,000 brokers (`converter.MAX_BROKERS`). A file is at most 16 MiB
  and 32 levels deep (`reading.MAX_FILE_BYTES`, `reading.MAX_DEPTH`).
- The HMAC key comes from `reporting.hmac_key_file` (relative to the scenario file) or `reporting.hmac_key_env`,
  read once when the scenario loads; `hmac_key` itself is refused. The key is kept in a field that is not a
  key of the file and is left out of `Scenario.to_dict` (`spec.SECRETS`), so the manifest holds its source only.
  Per-broker keys (`reporting.key_dir`: `<broker>.key` for every broker) are read and kept the same way.
- A `forge` event with `signed: true` needs keys to steal; its `key_of` (default: the first other broker) is
  never the broker it impersonates.
- A broker's first join is its `join_at` (0: up from the start). Events follow a lifecycle per broker:
  `crash` and `leave` need a broker that is up, `restart` one that crashed, and `join` one that left
  (a `join` of a broker that is up or not yet joined is refused: set its `join_at` instead).
- A `demand` event sets the rate of one broker's group (adding the group to that broker if it did not
  serve it); its profile counts rounds from the event. It may target a broker that is down.
- A `channel` event changes any channel setting but `shards` and `routing` (the topology is fixed at the
  start); `partitions: []` heals every partition.
- `trace` files are read when the scenario loads (relative to the scenario file), so a run never depends
  on them later.
- `generated:` replaces `groups` and `brokers` for scenarios too big to write by hand (see
  `generation.generated`).
"""

from experiments.errors import ScenarioError
from experiments.scenario.reading import (
    apply_overrides,
    load_scenario,
    parse_override,
    parse_scenario,
    read_scenario,
    read_yaml,
)
from experiments.scenario.sections import UNLIMITED

__all__ = [
    "UNLIMITED",
    "ScenarioError",
    "apply_overrides",
    "load_scenario",
    "parse_override",
    "parse_scenario",
    "read_scenario",
    "read_yaml",
]
