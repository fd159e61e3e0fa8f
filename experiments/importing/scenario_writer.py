"""A `ClusterUsage` and the groups' quotas as a scenario: one `trace` workload per broker and group, the traces as
CSV files next to the scenario, and the settings a Pulsar cluster runs with.

The scenario replays what each broker used as what its producers offer, so a policy can only admit less than
the cluster did (demand above the cluster's own limits was never exported). It is written as Pulsar runs:
policy `pulsar` on `wire: pulsar`, reports within 5% suppressed and forced every 5 rounds, no membership
registry and no expiry of a silent broker within the run; any other policy runs with `--set` (docs/pulsar.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from experiments import checks
from experiments.errors import UserError
from experiments.importing.usage import ClusterUsage
from experiments.scenario import load_scenario, sections
from experiments.scenario.reading import read_yaml
from experiments.scenario.spec import DIMENSIONS

DEFAULT_MSG_BYTES = 1000.0  # where the export has no bytes: the scenario's own default
TRACES = "traces"


def read_quotas(path: Path | None, flags: list[str]) -> dict[str, dict[str, float]]:
    """Group -> its quota, from a YAML file (`GROUP: {publish_msgs_per_s: 100, ...}`, as a scenario writes a
    group's quota) and `GROUP:DIMENSION=RATE` flags (a flag wins); each checked as a scenario's quota is."""
    raw: dict[str, dict[str, Any]] = {}
    source = "--quota"
    if path is not None:
        source = str(path)
        loaded = read_yaml(Path(path), str(path))  # capped and strict, as a scenario file
        if not isinstance(loaded, dict) or not all(isinstance(quota, dict) for quota in loaded.values()):
            example = "tenant-a/ns-1: {publish_msgs_per_s: 100}"
            raise UserError(f"{path}: must map each group to its quota, e.g. '{example}'")
        raw = {str(group): dict(quota) for group, quota in loaded.items()}
    for flag in flags:
        group, colon, assignment = flag.rpartition(":")
        dimension, equals, value = assignment.partition("=")
        if not (colon and equals and group):
            example = "tenant-a/ns-1:publish_msgs_per_s=100"
            raise UserError(f"--quota {flag!r}: expected GROUP:DIMENSION=RATE, e.g. {example}")
        raw.setdefault(group, {})[dimension] = yaml.safe_load(value)
    try:
        return {group: sections.quota(quota, group) for group, quota in raw.items()}
    except checks.FieldError as error:
        raise UserError(f"{source}: {error.key}: {error.problem}") from None


def write_scenario(usage: ClusterUsage, quotas: dict[str, dict[str, float]], out_dir: Path, source: str) -> Path:
    """Write `out_dir/scenario.yaml` and its traces; returns the scenario's path, checked by loading it."""
    missing = [group for group in usage.groups if group not in quotas]
    if missing:
        raise UserError(f"group {missing[0]!r} has no quota: add it to --quotas FILE or give --quota GROUP:DIM=RATE")
    unknown = [group for group in quotas if group not in usage.groups]
    if unknown:
        raise UserError(f"quota for group {unknown[0]!r}, which the export does not have (groups: {usage.groups})")
    out_dir = Path(out_dir)
    scenario_path = out_dir / "scenario.yaml"
    if scenario_path.exists():
        raise UserError(f"{out_dir}: already holds a scenario; choose another --out")
    (out_dir / TRACES).mkdir(parents=True, exist_ok=True)
    names = _file_names(list(usage.msgs_per_s))
    brokers = []
    for broker in usage.brokers:
        workload = []
        for (owner, group), rates in usage.msgs_per_s.items():
            if owner != broker:
                continue
            trace = f"{TRACES}/{names[(owner, group)]}.csv"
            (out_dir / trace).write_text(_trace_csv(rates), encoding="utf-8")
            size = usage.msg_bytes.get((owner, group), DEFAULT_MSG_BYTES)
            workload.append({"group": group, "msgs_per_s": {"trace": trace}, "msg_bytes": round(float(size), 3)})
        brokers.append({"name": broker, "workload": workload})
    scenario = {
        "name": _scenario_name(out_dir),
        "description": f"imported by quotalab import from {source}",
        "seed": 1,
        "rounds": usage.rounds,
        "interval_s": usage.interval_s,
        "mode": "lockstep",
        "backend": "local",
        "policy": {"name": "pulsar"},
        "reporting": {"wire": "pulsar", "threshold_pct": 5, "force_every": 5},
        "cleanup": {"membership": False, "stale_after_rounds": usage.rounds, "max_report_age_rounds": 2},
        "groups": [{"name": group, "quota": _ordered(quotas[group])} for group in usage.groups],
        "brokers": brokers,
    }
    header = f"# {scenario['description']}: each broker's publish usage per group, replayed as its offered load.\n"
    scenario_path.write_text(header + yaml.safe_dump(scenario, sort_keys=False, width=120), encoding="utf-8")
    load_scenario(scenario_path)  # what was written runs: a ScenarioError (one line) otherwise
    return scenario_path


def _trace_csv(rates: np.ndarray) -> str:
    """`round,msgs_per_s` rows where the rate changes (a trace holds each rate until the next row)."""
    changes = np.flatnonzero(np.r_[True, rates[1:] != rates[:-1]])
    return "round,msgs_per_s\n" + "".join(f"{r},{rates[r]:.12g}\n" for r in changes.tolist())


def _file_names(keys: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """A distinct file name for each (broker, group): their names with what a file name cannot hold replaced."""
    names: dict[tuple[str, str], str] = {}
    taken: set[str] = set()
    for broker, group in keys:
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{broker}--{group}").strip("._") or "trace"
        name, suffix = base, 1
        while name in taken:
            suffix += 1
            name = f"{base}-{suffix}"
        taken.add(name)
        names[(broker, group)] = name
    return names


def _scenario_name(out_dir: Path) -> str:
    """The output folder's name as a scenario name (what a run directory is named after)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", out_dir.resolve().name).strip(".-") or "imported"


def _ordered(quota: dict[str, float]) -> dict[str, Any]:
    return {dim: ("unlimited" if quota[dim] < 0 else quota[dim]) for dim in DIMENSIONS if dim in quota}
