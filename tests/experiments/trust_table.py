"""docs/trust.md's table of its cases, before and after, made from the outcomes and measurements saved.

Reads `tests/results/`: `trust-before.json` and `trust.json` (`trust_cases.py` on commit 915f03d and on this
code), `ray_cleanup-before.json` and `ray_cleanup.json` (`tests/actors/ray_cleanup.py`); and
`benchmarks/results/`: `soak-ray-before.json` and `soak-ray-6min.json` (`bench_soak.py --ray` for 6 minutes, the
two at the same time) and `soak-ray.json` (30 minutes). Writes the table between docs/trust.md's two
`trust-table` markers (`test_trust_cases.py` checks that it is there). Run from the repository root:
`python -m tests.experiments.trust_table`.
"""

from __future__ import annotations

import json
from typing import Any

from benchmarks.common import ROOT, command_line, results_path

DOCS = ROOT / "docs" / "trust.md"
BEGIN, END = "<!-- trust-table: begin (tests/experiments/trust_table.py) -->", "<!-- trust-table: end -->"

SWEEP_BOUNDS = "refused by the sweep's bounds (docs/tuning.md)"
SEQ_AHEAD = "thrown away by the usage table: a sequence number further ahead than its sender can have counted"
REALTIME_TESTS = "`pytest tests/actors/test_runtime_realtime.py tests/actors/test_runtime_consensus.py`"


def load(name: str, folder: str = "tests") -> dict[str, Any] | None:
    """`<folder>/results/<name>.json`, or None if it was not saved."""
    path = results_path(name, folder)
    return json.loads(path.read_text()) if path.exists() else None


def outcome(case: dict[str, Any]) -> str:
    """What a user saw, in a table cell."""
    if case["exit"] == "timeout":
        return f"hangs (killed after {case['seconds']:g} s)"
    said = []
    if case["traceback"]:
        said.append("a Python traceback")
    if case["java_stack_lines"]:
        said.append(f"{case['java_stack_lines']} lines of Java stack")
    if case["secret_shown"]:
        said.append("**the key's content shown**")
    if "modes" in case:
        said.append("modes " + ", ".join(f"`{name}` {mode}" for name, mode in case["modes"].items()))
    if case["warnings"]:
        said.append(f"warns once: `{_cell(case['warnings'][0])[:90]}...`")
    if case["exit"] == 0 and not said:
        said.append("accepted without a word")
    elif not case["traceback"] and case["stderr_lines"] == 1 and case["exit"] != 0:
        said.append(f"one line: `{_cell(case['first_line'])}`")
    elif case["stderr_lines"] > 1 and case["exit"] != 0:
        said.append(f"{case['stderr_lines']} lines on stderr")
    return f"exit {case['exit']}: " + "; ".join(said)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def case_rows(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[tuple[int, str, str, str, str]]:
    rows = []
    names = (after or before or {"cases": {}})["cases"]
    for name, case in names.items():
        was = before["cases"].get(name) if before else None
        now = after["cases"].get(name) if after else None
        rows.append(
            (
                case["item"],
                case["what"],
                f"`{_cell(case['command'])}`",
                outcome(was) if was else "-",
                outcome(now) if now else "-",
            )
        )
    return rows


def cleanup_cell(result: dict[str, Any] | None) -> str:
    if result is None:
        return "-"
    worst: dict[str, float] = {}
    for kill in result["kills"]:
        for kind, seconds in kill["outlived_s"].items():
            worst[kind] = max(worst.get(kind, 0.0), seconds)
    slowest = sorted(worst.items(), key=lambda item: -item[1])[:2]
    shown = ", ".join(f"{kind} {seconds:g} s" for kind, seconds in slowest)
    return f"{len(result['kills'])} kills, longest: {shown}"


def soak_cell(result: dict[str, Any] | None) -> str:
    if result is None:
        return "-"
    by_process = result.get("growth_by_process", {})
    growth = "; ".join(
        f"{kind} {fit['rss_at_warmup_mb']:.0f} -> {fit['rss_at_end_mb']:.0f} MB"
        f" ({fit['slope_kb_per_min'] / 1024:+.2f} MB/min)"
        for kind, fit in list(by_process.items())[:3]  # the largest slopes first
    )
    return (
        f"{result['minutes']:g} min, {result['rounds_completed']} of {result['rounds_planned']} rounds"
        f" (load {result['loadavg_1m']['before']:.0f} -> {result['loadavg_1m']['after']:.0f}): all processes"
        f" {result['rss_at_warmup_mb']:.0f} -> {result['rss_at_end_mb']:.0f} MB"
        f" ({result['slope_kb_per_min'] / 1024:+.1f} MB/min); fastest growing: {growth}"
    )


def table() -> str:
    rows = [(1, "a report with `seq = 2**63 - 1` stalls the loss meter", "-", "-", SEQ_AHEAD)]
    rows += case_rows(load("trust-before"), load("trust"))
    rows += [
        (4, "a sweep grid of 10^8 configurations; `random: {samples: 1e9}`", "-", "-", SWEEP_BOUNDS),
        (
            6,
            "a Ray driver killed with SIGKILL: how long its processes live on",
            "`python -m tests.actors.ray_cleanup`",
            cleanup_cell(load("ray_cleanup-before")),
            cleanup_cell(load("ray_cleanup")),
        ),
        (
            6,
            "a Ray realtime run, 16 brokers x 64 groups at 0.1 s, 6 minutes (1-minute warm-up): 915f03d and this"
            " code side by side, at the same time",
            "`python -m benchmarks.bench_soak --ray --minutes 6 --warmup-minutes 1`",
            soak_cell(load("soak-ray-before", "benchmarks")),
            soak_cell(load("soak-ray-6min", "benchmarks")),
        ),
        (
            6,
            "the same run for 30 minutes (5-minute warm-up)",
            "`python -m benchmarks.bench_soak --ray`",
            "-",
            soak_cell(load("soak-ray", "benchmarks")),
        ),
        (
            8,
            "realtime tests at 0.1 s ticks",
            REALTIME_TESTS,
            "assert rounds by number (`round >= 5`, `loc[9:]`, `round >= 12`)",
            "measure from the round every broker first heard all, an event's own time, the first agreement",
        ),
    ]
    rows.sort(key=lambda row: row[0])
    lines = ["| item | case | command | before (915f03d) | after |", "|---|---|---|---|---|"]
    lines += [f"| {item} | {what} | {command} | {was} | {now} |" for item, what, command, was, now in rows]
    return "\n".join(lines)


def write_docs() -> None:
    text = DOCS.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOCS.write_text(text[:start] + "\n" + table() + "\n" + text[end:])


if __name__ == "__main__":
    command_line(__doc__).parse_args()
    write_docs()
    print(f"wrote the table in {DOCS.relative_to(ROOT)}")
