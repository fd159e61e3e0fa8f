"""The explanations the report links to: for each overshoot the opening paragraph names (a stretch of rounds over
quota) and each run that starves a broker, why the limit of its worst round was what it was (`quotalab explain`).

Per stretch, the worst round is the one of the highest overshoot in it, and the broker explained the one whose
limit was highest then (it took most); per starving run, the round of the last quarter with the most brokers
starved, and the broker that got the least of its demand then. Each run is replayed once for all its limits
(`experiments.explain.sources`), and each explanation written next to the page under `explanations/` as text and
JSON; a run that cannot be explained (realtime without recorded decisions) gets a file saying why and what to run.
For a small run (`INLINE_ROWS`), the worst round's explanation is shown on the page, under the paragraph.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from allocator.node.explanation import to_json
from experiments.errors import UserError
from experiments.explain.run_limits import Limit, chosen_limit, read_run
from experiments.explain.sources import explain_limits
from experiments.explain.text import explanation_text
from experiments.report.conclusion import over_quota_stretches

INLINE_ROWS = 50_000  # a run of at most this many `rounds` rows shows its worst round's explanation on the page
# a larger run is not replayed when the report is built (a replay costs about what the run cost up to the round):
# its links say what to run, unless it recorded its decisions
REPLAY_ROWS = 1_000_000
FOLDER = "explanations"


@dataclass
class Explained:
    """Where the page links: (run_id, first round of a stretch over quota) and run_id (its worst starved round)
    to a file relative to the page; the inline explanations' HTML."""

    overshoots: dict[tuple[str, int], str] = field(default_factory=dict)
    starved: dict[str, str] = field(default_factory=dict)
    inline: str = ""


def explain_named(
    runs: list[dict[str, Any]],
    per_round: pd.DataFrame,
    stretch_rounds: pd.DataFrame,
    events: pd.DataFrame,
    run_dirs: dict[str, Path],
    rows: dict[str, int],
    out_dir: Path,
) -> Explained:
    """Explain the overshoots and starvation the conclusion names (from `stretch_rounds` and `events`, as it
    does), each at its worst group and round of `per_round` (`group_rounds`), under `out_dir/explanations/`."""
    explained = Explained()
    inline = []
    for run_summary in runs:
        run_id = run_summary["run_id"]
        run = read_run(run_dirs[run_id])
        mine = per_round[per_round["run_id"] == run_id]
        targets: dict[str, Limit] = {}
        for first, last, _ in over_quota_stretches(run_id, stretch_rounds, events):
            stretch = mine[(mine["round"] >= first) & (mine["round"] <= last) & mine["over_quota"].fillna(False)]
            if stretch.empty:  # its groups are not among those the report collected
                continue
            worst = stretch.loc[stretch["overshoot"].idxmax()]
            targets[f"over-{first}"] = chosen_limit(run, worst["group"], None, int(worst["round"]), worst["dimension"])
        starved = _worst_starved(run, mine)
        if starved is not None:
            targets["starved"] = starved
        if not targets:
            continue
        size = rows.get(run_id, 0)
        no_replay = (
            None
            if size <= REPLAY_ROWS
            else f"not replayed when the report was built ({size:,} rows of rounds: a replay costs what the run did)"
        )
        files = _write(run, targets, out_dir / FOLDER / _slug(run_id), out_dir, no_replay)
        for key, (path, _) in files.items():
            if key == "starved":
                explained.starved[run_id] = path
            else:
                explained.overshoots[(run_id, int(key.split("-")[1]))] = path
        if size <= INLINE_ROWS:
            worst_key = _worst_key(mine, targets)
            path, text = files[worst_key]
            inline.append(
                f'<details class="explanation" open><summary>Why: {escape(run_id)}, {escape(_what(targets[worst_key]))}'
                f' (<a href="{escape(path)}">text</a>)</summary><pre>{escape(text)}</pre></details>'
            )
    explained.inline = "".join(inline)
    return explained


def _worst_starved(run: Any, mine: pd.DataFrame) -> Limit | None:
    """The round of the last quarter with the most brokers starved, and the broker that got the least of its
    demand then (None when no broker starved)."""
    if mine.empty:
        return None
    last_quarter = mine[mine["round"] >= 0.75 * mine["round"].max()]
    starving = last_quarter[last_quarter["starved_brokers"].fillna(0) > 0]
    if starving.empty:
        return None
    worst = starving.loc[starving["starved_brokers"].idxmax()]
    group, round_index, dimension = worst["group"], int(worst["round"]), worst["dimension"]
    rows = run.group_rows(group)
    at = (rows["round"] == round_index) & (rows["dimension"] == dimension) & (rows["demand"] > 0)
    if not at.any():
        return None
    got = rows["usage"][at] / rows["demand"][at]
    return chosen_limit(run, group, str(rows["broker"][at][int(np.argmin(got))]), round_index, dimension)


def _worst_key(mine: pd.DataFrame, targets: dict[str, Limit]) -> str:
    """The target of the run's worst round: its highest overshoot, else its starvation."""
    overshoots = [key for key in targets if key != "starved"]
    if not overshoots:
        return "starved"

    def overshoot(key: str) -> float:
        limit = targets[key]
        return float(mine.loc[(mine["round"] == limit.round) & (mine["group"] == limit.group), "overshoot"].max())

    return max(overshoots, key=overshoot)


def _write(
    run: Any, targets: dict[str, Limit], folder: Path, out_dir: Path, no_replay: str | None
) -> dict[str, tuple[str, str]]:
    """Each target's explanation as `.txt` and `.json` under `folder`: key -> (path from the page, text); without
    a replay when `no_replay` says why."""
    folder.mkdir(parents=True, exist_ok=True)
    limits = list(dict.fromkeys(targets.values()))
    try:
        found = explain_limits(run, limits, progress=False, replay_why=no_replay)
        failure = None
    except UserError as error:
        found, failure = {}, str(error)
    files = {}
    for key, limit in targets.items():
        name = f"{_slug(limit.group)}-{_slug(limit.broker)}-r{limit.round}"
        if limit in found:
            text = explanation_text(found[limit])
            (folder / f"{name}.json").write_text(to_json(found[limit]) + "\n")
        else:
            text = (
                f"{_what(limit)}: not explained ({failure})\n\nquotalab explain {run.run_dir} --group {limit.group} "
                f"--broker {limit.broker} --round {limit.round} --dimension {limit.dimension}"
            )
        (folder / f"{name}.txt").write_text(text + "\n")
        files[key] = ((folder / f"{name}.txt").relative_to(out_dir).as_posix(), text)
    return files


def _what(limit: Limit) -> str:
    return f"round {limit.round}, broker {limit.broker}, group {limit.group}"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "x"
