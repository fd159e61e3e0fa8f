"""Tiny base scenarios and sweep files written to a temporary folder, for the sweep tests."""

from __future__ import annotations

from pathlib import Path

import yaml

# Two brokers, 80/20 on a quota of 100, then the small one asks for 60: converges within a few rounds.
TINY_BASE = {
    "name": "tiny",
    "seed": 1,
    "rounds": 15,
    "backend": "ray",
    "policy": {"name": "pip82-steal", "params": {"steal_fraction": 0.5}},
    "channel": {"loss": 0.1},
    "groups": [{"name": "g", "quota": {"publish_msgs_per_s": 100}}],
    "brokers": [
        {"name": "b1", "workload": [{"group": "g", "msgs_per_s": 80}]},
        {"name": "b2", "workload": [{"group": "g", "msgs_per_s": 20}]},
    ],
    "events": [{"at": 5, "demand": {"broker": "b2", "group": "g", "msgs_per_s": 60}}],
}


def write_sweep(folder: Path, sweep: dict, base: dict | None = None, name: str = "sweep.yaml") -> Path:
    """`folder/scenarios/base.yaml` (TINY_BASE by default) and `folder/sweeps/<name>` pointing at it."""
    (folder / "scenarios").mkdir(parents=True, exist_ok=True)
    (folder / "sweeps").mkdir(parents=True, exist_ok=True)
    (folder / "scenarios" / "base.yaml").write_text(yaml.safe_dump(base or TINY_BASE, sort_keys=False))
    path = folder / "sweeps" / name
    path.write_text(yaml.safe_dump({"name": "tiny-sweep", "base": "../scenarios/base.yaml", **sweep}, sort_keys=False))
    return path
