"""The fields of a run's `manifest.json` the report reads, checked before Spark starts.

A run writes its manifest in more than one shape (a scenario's groups listed, or `"100000 generated"` for a
generated scenario; a policy as a name or as `{name, params}`; older runs without some keys), and a manifest may
have been edited or damaged since. Whatever the report reads is checked here, so a shape it cannot read is one
line naming the run and the field (`runs/x: manifest.json: scenario.groups[3].ramp_up: expected a mapping`), not
a traceback from deep in the page. A key the report does not read is not checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.errors import UserError

RAMP_NUMBERS = ("min", "max", "duration_s")


def check_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Raise a `UserError` naming `run_dir` and the field when a field the report reads has a shape it cannot
    read; missing optional fields are fine."""

    def fail(field: str, problem: str) -> None:
        raise UserError(f"{run_dir}: manifest.json: {field}: {problem}")

    run_id = manifest.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        fail("run_id", "missing or not a non-empty string")
    for field in ("status", "scenario_name"):
        if manifest.get(field) is not None and not isinstance(manifest[field], str):
            fail(field, f"expected a string, got {manifest[field]!r}")
    policy = manifest.get("policy")
    named = isinstance(policy, dict) and isinstance(policy.get("name"), str)
    if policy is not None and not isinstance(policy, str) and not named:
        fail("policy", "expected a name or a mapping with a `name`")
    completed = manifest.get("rounds_completed")
    if completed is not None and (not isinstance(completed, int) or isinstance(completed, bool) or completed < 0):
        fail("rounds_completed", f"expected a whole number of rounds, got {completed!r}")
    scenario = manifest.get("scenario", {})
    if not isinstance(scenario, dict):
        fail("scenario", "expected a mapping")
    fallback = scenario.get("fallback", {})
    if not isinstance(fallback, dict) or not isinstance(fallback.get("mode", "none"), str):
        fail("scenario.fallback", "expected a mapping with a `mode` name")
    groups = scenario.get("groups", [])
    if isinstance(groups, str):  # a generated scenario's: "100000 generated"
        return
    if not isinstance(groups, list):
        fail("scenario.groups", "expected a list of groups (or a generated scenario's count)")
    for index, group in enumerate(groups):
        key = f"scenario.groups[{index}]"
        if not isinstance(group, dict) or not isinstance(group.get("name"), str):
            fail(key, "expected a mapping with a `name`")
        ramps = group.get("ramp_up", {})
        if not isinstance(ramps, dict):
            fail(f"{key}.ramp_up", "expected a mapping of dimension to ramp")
        for dimension, ramp in ramps.items():
            ramp_key = f"{key}.ramp_up.{dimension}"
            if not isinstance(ramp, dict) or not isinstance(ramp.get("mode"), str):
                fail(ramp_key, "expected a mapping with a `mode`")
            for name in RAMP_NUMBERS:
                if not isinstance(ramp.get(name), int | float) or isinstance(ramp.get(name), bool):
                    fail(f"{ramp_key}.{name}", f"expected a number, got {ramp.get(name)!r}")
