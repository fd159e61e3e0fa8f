"""The scenarios and sweeps shipped with quotalab (package data in `experiments/scenarios/` and
`experiments/sweeps/`), found by name: `quotalab run churn-and-loss`, `quotalab scenarios` to list them.

A path that exists wins over a shipped name, so a file of one's own called `churn-and-loss` in the current
directory is the one run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from experiments.errors import UserError

SCENARIOS = Path(__file__).parent / "scenarios"
SWEEPS = Path(__file__).parent / "sweeps"


# kind -> (its folder, the command that runs it)
KINDS = {"scenario": (SCENARIOS, "quotalab run"), "sweep": (SWEEPS, "quotalab sweep")}


def scenario_file(text: str | Path) -> Path:
    """The scenario file `text` names: a path, or the name of a shipped scenario (`churn-and-loss`)."""
    return _find(str(text), "scenario")


def sweep_file(text: str | Path) -> Path:
    """The sweep file `text` names: a path, or the name of a shipped sweep (`quick`)."""
    return _find(str(text), "sweep")


def _find(text: str, kind: str) -> Path:
    path = Path(text)
    if path.exists():
        return path
    if "/" not in text:
        file_name = text if text.endswith(".yaml") else f"{text}.yaml"
        for found, (folder, command) in sorted(KINDS.items(), key=lambda item: item[0] != kind):  # `kind` first
            if (folder / file_name).is_file():
                if found == kind:
                    return folder / file_name
                raise UserError(f"{text}: a shipped {found}, not a {kind}; run it with: {command} {text}")
    raise UserError(f"{text}: no such file, nor a shipped {kind} (`quotalab scenarios` lists them)")


def is_sweep(data: object) -> bool:
    """Whether a parsed YAML file is a sweep (it names a base scenario and what to vary), not a scenario."""
    return isinstance(data, dict) and "base" in data and ("grid" in data or "random" in data)


def shipped(folder: Path) -> list[tuple[str, str]]:
    """(name, one-line description) of every YAML file in `folder`, by name."""
    return [(path.stem, description(path)) for path in sorted(folder.glob("*.yaml"))]


def description(path: Path) -> str:
    """The file's `description`, else the first line of its opening comment."""
    text = path.read_text()
    data = yaml.safe_load(text)
    if isinstance(data, dict) and data.get("description"):
        return " ".join(str(data["description"]).split())
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    return first.lstrip("# ").strip() if first.startswith("#") else ""


def listing() -> str:
    """The text `quotalab scenarios` prints."""
    lines = []
    for title, folder, command in (("Scenarios", SCENARIOS, "run"), ("Sweeps", SWEEPS, "sweep")):
        entries = shipped(folder)
        width = max((len(name) for name, _ in entries), default=0)
        lines.append(f"{title} (quotalab {command} NAME; files in {folder}):")
        lines.extend(f"  {name:<{width}}  {description}" for name, description in entries)
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "scenarios",
        help="list the shipped scenarios and sweeps, with one line on each",
        description="List the scenarios and sweeps that ship with quotalab: run one by name, "
        "`quotalab run churn-and-loss`, `quotalab sweep quick`.",
    )
    parser.set_defaults(handler=lambda args: print(listing()) or 0)
