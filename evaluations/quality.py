"""How well does each policy hold the quota, in its worst round? A suite of disturbances x losses x policies x seeds.

The suite is `quality_suite.py`: thirteen disturbances (one held out: the recommended policy was not tuned on
it), report loss 0, 10% and 30%, and 30% in bursts, every policy, seeds 1-5, 50 rounds, in lockstep; then a
realtime subset (start, join, restart, quota cut, registry outage) for the recommended policy on real timers.
`--quick` (the CI form): seed 1 only.

Every run goes in-process (`backend: local`), then the report's own Spark jobs (`experiments.report`) compute
the metrics over all the runs at once, in one SparkSession. A quota is a promise about the worst round, so each
cell gives the mean and the worst (over groups, disturbances and seeds), per mode, loss and policy:

- peak overshoot: each run's worst `max(0, U/Q - 1)` of any group in any round; mean over runs / worst run;
- rounds over quota per 100 rounds: a group's share of rounds with U > 1.05 Q; mean over runs of the groups'
  mean / the worst group of any run;
- rounds to converge after an event (the start included): mean / worst over every (group, event) that converged;
  the share that never converged apart;
- Jain and utilization in the last quarter of a run: mean / the lowest group of any run;
- starved: the share of the (broker, round) pairs of the last quarter, among brokers with a fair share, where
  the broker gets less than half of it; pooled / the worst group of any run.

Goals (issue 19), a check mark where met: the worst peak overshoot <= 5% without loss and <= 10% with loss; the
worst group's rounds over quota <= 1 per 100; mean rounds to converge <= 2 without loss and <= 4 with loss;
Jain >= 0.99 and utilization 0.98-1.05 (means); nobody starved (the worst group).

For the policies that split by an agreed pool size (`numaflow-equal`), the rounds its brokers take to agree on
the pool size again after the join, the clean leave and the crash, by disturbance and loss (mean over seeds).

Writes `evaluations/results/quality.json` and `evaluations/results/quality.md` (one table per mode and loss, then
the long table per disturbance), and the tables into docs/policies.md's `quality` section. Runs go to a
temporary folder unless `--keep DIR` is given.

Run from the repository root: `python -m evaluations.quality [--quick] [--keep DIR]`. While tuning,
`--policies`, `--disturbances` and `--losses` (comma-separated names) run a subset, `--no-realtime` leaves the
realtime subset out, `--params JSON` gives every policy of it the same parameters, `--seeds 1-100` runs other seeds
(five seeds under-sample a tail: how often a rare round comes takes a hundred); the tables are printed (and written
to `DIR/quality.md` with `--keep DIR`), the saved results are left alone. `--tail` runs the recommended policy's
tail (`quality_suite.TAIL`: the disturbances whose worst rounds come rarely, at 30% loss and in bursts, seeds
1-100) and writes `evaluations/results/quality_tail.json`, `quality_tail.md` and docs/policies.md's `quality-tail`
section.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from allocator.policies import POLICIES, RECOMMENDED
from benchmarks.common import (
    ROOT,
    command_line,
    environment,
    load_since,
    loadavg_1m,
    replace_marked,
    results_path,
    save_results,
)
from evaluations.quality_suite import (
    DISTURBANCES,
    EVENT_AT,
    HELD_OUT,
    LOSSES,
    QUICK_SEEDS,
    ROUNDS,
    SEEDS,
    TAIL,
    Case,
    Subset,
    scenario_data,
    suite,
)
from experiments.progress import progress
from experiments.scenario import parse_scenario

RESULTS = results_path("quality", "evaluations")
MARKDOWN = RESULTS.with_suffix(".md")
POLICIES_DOC = ROOT / "docs" / "policies.md"  # its `quality` section holds the tables of the whole suite
README = ROOT / "README.md"  # its `quality-summary` section, the recommended policy's worst rounds
TAIL_RESULTS = results_path("quality_tail", "evaluations")  # `--tail`: also docs/policies.md's `quality-tail` section
TAIL_MARKDOWN = TAIL_RESULTS.with_suffix(".md")
MASTER = "local[2]"
MET = "✓"


def run_case(case: Case, runs_dir: Path) -> float:
    """Run one case into `runs_dir/<run_id>` in this process; the seconds it took."""
    from experiments.run import run_scenario  # imported in the worker: the runtime is not needed to plan

    start = time.perf_counter()
    run_scenario(parse_scenario(scenario_data(case), source=case.run_id), runs_dir / case.run_id, progress=False)
    return time.perf_counter() - start


def run_suite(cases: list[Case], runs_dir: Path, workers: int) -> tuple[dict[str, float], dict[str, str]]:
    """Run every case, `workers` processes at a time, with a progress bar: (seconds, failures) by run id."""
    seconds: dict[str, float] = {}
    failed: dict[str, str] = {}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_case, case, runs_dir): case for case in cases}
        bar = progress(len(futures), "quality runs", "run")
        for future in as_completed(futures):
            bar.update()
            case = futures[future]
            try:
                seconds[case.run_id] = future.result()
            except Exception as error:  # noqa: BLE001 - one failing run is recorded; the others still count
                failed[case.run_id] = f"{type(error).__name__}: {error}"
        bar.close()
    return seconds, failed


def measure(spark: Any, cases: list[Case], runs_dir: Path) -> dict[str, dict[str, Any]]:
    """run_id -> the report's per-group numbers of the run (`groups` of summary.json), the rounds to agree on
    the pool size after each membership event at EVENT_AT (`agreement_waits`, empty for most policies) and the
    report bytes the brokers published per round (`bytes_per_round`)."""
    from experiments.report.load import load_runs
    from experiments.report.summary import build_summary, collect_results

    runs = load_runs(spark, [runs_dir / case.run_id for case in cases])
    summary = build_summary(runs.manifests, collect_results(runs, runs_dir / "report-tables"))
    return {
        run["run_id"]: {
            "groups": run["groups"],
            "agreement_waits": [event["rounds"] for event in run["rounds_to_agree"] if event["round"] == EVENT_AT],
            "bytes_per_round": run["bytes_published_per_round"],
        }
        for run in summary["runs"]
    }


def pooled(per_run: list[dict[str, Any]]) -> dict[str, float | None]:
    """A cell of a table: the runs' metrics, the mean and the worst of each (see the module docstring)."""
    groups = [group for run in per_run for group in run["groups"]]
    waits = [event["rounds_to_converge"] for group in groups for event in group["events"]]
    converged = [wait for wait in waits if wait is not None]
    fair_share = sum(group["fair_share_broker_rounds"] for group in groups)
    run_peaks = [max((g["peak_overshoot"] or 0.0 for g in run["groups"]), default=0.0) for run in per_run]
    run_over = [_mean(g["rounds_over_quota"] for g in run["groups"]) for run in per_run]
    return {
        "peak_overshoot": _mean(run_peaks),
        "peak_overshoot_worst": max(run_peaks, default=None),
        "over_quota_per_100": _scaled(_mean(run_over), 100),
        "over_quota_per_100_worst": _scaled(_max(g["rounds_over_quota"] for g in groups), 100),
        "rounds_to_converge": _mean(converged),
        "rounds_to_converge_worst": max(converged, default=None),
        "never_converged": (len(waits) - len(converged)) / len(waits) if waits else None,
        "jain": _mean(_mean(g["jain"] for g in run["groups"]) for run in per_run),
        "jain_worst": _min(g["jain"] for g in groups),
        "utilization": _mean(_mean(g["utilization"] for g in run["groups"]) for run in per_run),
        "utilization_worst": _min(g["utilization"] for g in groups),
        "starved": sum(g["starved_broker_rounds"] for g in groups) / fair_share if fair_share else None,
        "starved_worst": _max(g["starved"] for g in groups),
        "bytes_per_round": _mean(run.get("bytes_per_round") for run in per_run),
        "bytes_per_round_worst": _max(run.get("bytes_per_round") for run in per_run),
    }


def _present(values: Iterable[float | None]) -> list[float]:
    return [value for value in values if value is not None]


def _mean(values: Iterable[float | None]) -> float | None:
    present = _present(values)
    return sum(present) / len(present) if present else None


def _max(values: Iterable[float | None]) -> float | None:
    return max(_present(values), default=None)


def _min(values: Iterable[float | None]) -> float | None:
    return min(_present(values), default=None)


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


Goal = Callable[[float], bool]  # does a value meet the goal?
# metric -> (column title, format of a value, the statistic its goal judges: "mean" or "worst"; None: no goal)
COLUMNS: dict[str, tuple[str, Callable[[float], str], str | None]] = {
    "peak_overshoot": ("peak overshoot", lambda v: f"{100 * v:.1f}%", "worst"),
    "over_quota_per_100": ("rounds over quota / 100", lambda v: f"{v:.1f}", "worst"),
    "rounds_to_converge": ("rounds to converge", lambda v: f"{v:.2f}", "mean"),
    "jain": ("Jain (eq.)", lambda v: f"{v:.3f}", "mean"),
    "utilization": ("utilization (eq.)", lambda v: f"{v:.3f}", "mean"),
    "starved": ("starved (eq.)", lambda v: f"{100 * v:.1f}%", "worst"),
    "bytes_per_round": ("report bytes / round", lambda v: f"{v:,.0f}", None),  # the price, beside the quality
}


def goals(loss: str) -> dict[str, tuple[Goal, str]]:
    """The goals at `loss`: metric -> (test, wording)."""
    lossy = loss != "0%"
    overshoot, converge = (0.10, 4.0) if lossy else (0.05, 2.0)
    return {
        "peak_overshoot": (lambda v: v <= overshoot, f"worst peak overshoot <= {100 * overshoot:.0f}%"),
        "over_quota_per_100": (lambda v: v <= 1.0, "worst group's rounds over quota <= 1 / 100"),
        "rounds_to_converge": (lambda v: v <= converge, f"converge <= {converge:g} rounds (mean)"),
        "jain": (lambda v: v >= 0.99, "Jain >= 0.99 (mean)"),
        "utilization": (lambda v: 0.98 <= v <= 1.05, "utilization 0.98-1.05 (mean)"),
        "starved": (lambda v: v == 0.0, "nobody starved"),
    }


def cell(metric: str, values: dict[str, float | None], loss: str) -> str:
    """`mean / worst` formatted, the statistic the goal judges marked when it meets the goal."""
    _, fmt, judged = COLUMNS[metric]
    mean, worst = values[metric], values[f"{metric}_worst"]
    text = " / ".join("—" if value is None else fmt(value) for value in (mean, worst))
    if judged is None:
        return text
    value = mean if judged == "mean" else worst
    test, _ = goals(loss)[metric]
    return f"{text} {MET}" if value is not None and test(value) else text


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


HEADER = [f"{title} (mean / worst)" for title, _, _ in COLUMNS.values()]


def loss_table(mode: str, loss: str, by_policy: dict[str, dict[str, float | None]]) -> str:
    """One mode and loss: a row per policy, a column per metric, the goals above."""
    header_line = f"**{mode.capitalize()}, loss {loss}**. Goals: " + "; ".join(text for _, text in goals(loss).values())
    rows = [[policy, *(cell(m, values, loss) for m in COLUMNS)] for policy, values in by_policy.items()]
    return header_line + "\n\n" + markdown_table(["policy", *HEADER], rows)


def group_cells(complete: list[Case], per_run: dict[str, dict[str, Any]], key: Callable[[Case], tuple]) -> dict:
    """The pooled metrics of the runs grouped by `key`, in the order the cases come."""
    grouped: dict[tuple, list[dict[str, Any]]] = {}
    for case in complete:
        grouped.setdefault(key(case), []).append(per_run[case.run_id])
    return {name: pooled(runs) for name, runs in grouped.items()}


def worst_summary(by_loss: list[dict[str, Any]], policy: str = RECOMMENDED) -> str:
    """The recommended policy's worst rounds, a sentence per mode: what the README quotes."""
    sentences = []
    for mode in ("lockstep", "realtime"):
        cells = [cell for cell in by_loss if (cell["mode"], cell["policy"]) == (mode, policy)]
        if not cells:
            continue
        peaks = ", ".join(f"{100 * cell['peak_overshoot_worst']:.1f}% at {cell['loss']} loss" for cell in cells)
        over = max(cell["over_quota_per_100_worst"] for cell in cells)
        converge = max(cell["rounds_to_converge"] for cell in cells)
        converge_worst = max(cell["rounds_to_converge_worst"] for cell in cells)
        sentences.append(
            f"{mode}, the worst round of any group {peaks}; at most {over:.1f} rounds in 100 more than 5% over "
            f"the quota for any group; {converge:.2f} rounds to converge on average at worst, "
            f"{converge_worst:.0f} in the slowest run"
        )
    return "; ".join(sentences) + " ([the tables](docs/policies.md#quality-suite))."


AGREEMENT_DISTURBANCES = ("join", "clean-leave", "crash")


def agreement_table(per_run: dict[str, dict[str, Any]], complete: list[Case]) -> tuple[str, list[dict[str, Any]]]:
    """Rounds to agree on the pool size after the event at EVENT_AT, for the policies with a pool-size consensus:
    the table and its rows (mean over seeds; never agreed again counts apart)."""
    cells: dict[tuple[str, str, str], list[int | None]] = {}
    for case in complete:
        waits = per_run[case.run_id]["agreement_waits"]
        if case.disturbance in AGREEMENT_DISTURBANCES and waits and case.mode == "lockstep":
            cells.setdefault((case.disturbance, case.loss, case.policy), []).extend(waits)
    table = [
        {"disturbance": d, "loss": loss, "policy": p, "mean_rounds_to_agree": _mean(waits),
         "never_agreed": sum(wait is None for wait in waits)}
        for (d, loss, p), waits in cells.items()
    ]  # fmt: skip
    text = markdown_table(
        ["disturbance", "loss", "policy", "mean rounds to agree", "never agreed"],
        [[row["disturbance"], row["loss"], row["policy"], "—" if row["mean_rounds_to_agree"] is None
          else f"{row['mean_rounds_to_agree']:.1f}", str(row["never_agreed"])] for row in table],
    )  # fmt: skip
    return text, table


WHOLE = Subset()


def run(
    quick: bool = False, keep: Path | None = None, workers: int | None = None, subset: Subset = WHOLE
) -> dict[str, Any]:
    """Run the suite (or a subset), measure it with the report's Spark jobs, write the tables (quality.md for the
    whole suite, `keep/quality.md` for a subset); the results (saved as quality.json for the whole suite)."""
    from experiments.report.session import spark_session

    cases = suite(subset.seeds or (QUICK_SEEDS if quick else SEEDS), subset)
    workers = workers or os.cpu_count() or 1
    load_before = loadavg_1m()
    with tempfile.TemporaryDirectory(prefix="quality-") as scratch:
        runs_dir = Path(keep) if keep else Path(scratch)
        runs_dir.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        seconds, failed = run_suite(cases, runs_dir, workers)
        runs_s = time.perf_counter() - start
        complete = [case for case in cases if case.run_id in seconds]
        if not complete:
            raise RuntimeError(f"no run of the suite completed; the first failed with {next(iter(failed.values()))}")
        start = time.perf_counter()
        per_run = measure(spark_session(MASTER), complete, runs_dir)
        metrics_s = time.perf_counter() - start

    by_loss = group_cells(complete, per_run, lambda c: (c.mode, c.loss, c.policy))
    by_case = group_cells(complete, per_run, lambda c: (c.mode, c.disturbance, c.loss, c.policy))
    agreement_text, agreement_rows = agreement_table(per_run, complete)
    tables = []
    for mode in ("lockstep", "realtime"):
        for loss in subset.losses:
            cells = {p: v for (m, loss_, p), v in by_loss.items() if (m, loss_) == (mode, loss)}
            if cells:
                tables.append(loss_table(mode, loss, cells))
    long_rows = [
        [mode, disturbance + (" (held out)" if disturbance in HELD_OUT else ""), loss, policy,
         *(cell(m, values, loss) for m in COLUMNS)]
        for (mode, disturbance, loss, policy), values in by_case.items()
    ]  # fmt: skip
    seeds = sorted({c.seed for c in cases})
    markdown = "\n\n".join(
        [
            f"Quality suite: {len(subset.disturbances)} disturbances x {len(subset.losses)} losses x "
            f"{len(subset.policies)} policies x seeds {seed_list(seeds)}, {ROUNDS} rounds, lockstep"
            f"{', and the realtime subset' if subset.realtime else ''} ({len(complete)} runs; {MET} = meets the goal;"
            " each cell: mean / worst over "
            "groups, disturbances and seeds; eq. = last quarter of the run).",
            *tables,
            *(
                [f"**Pool-size consensus**: rounds to agree after the event at round {EVENT_AT}\n\n{agreement_text}"]
                if agreement_rows
                else []
            ),  # fmt: skip
            "### Per disturbance\n\n" + markdown_table(["mode", "disturbance", "loss", "policy", *HEADER], long_rows),
        ]
    )
    if subset.whole:
        MARKDOWN.write_text(markdown + "\n")
    elif keep:
        (Path(keep) / MARKDOWN.name).write_text(markdown + "\n")
    return {
        "markdown": markdown,
        "quick": quick,
        "rounds": ROUNDS,
        "seeds": seeds,
        "disturbances": list(subset.disturbances),
        "held_out": list(HELD_OUT),
        "losses": {loss: LOSSES[loss] for loss in subset.losses},
        "policies": list(subset.policies),
        "runs": {"planned": len(cases), "complete": len(complete), "failed": failed},
        "by_loss": [{"mode": m, "loss": loss, "policy": p, **v} for (m, loss, p), v in by_loss.items()],
        "by_disturbance": [
            {"mode": m, "disturbance": d, "loss": loss, "policy": p, **v} for (m, d, loss, p), v in by_case.items()
        ],
        "rounds_to_agree": agreement_rows,
        "goals": {loss: {metric: text for metric, (_, text) in goals(loss).items()} for loss in LOSSES},
        "seconds": {"runs": runs_s, "metrics": metrics_s, "mean_run": _mean(seconds.values())},
        "workers": workers,
        "loadavg_1m": load_since(load_before),
        **environment("pyspark", "numpy", "pyarrow"),
    }


def publish(results: Path, section: str, markdown: str, result: dict[str, Any], failures: list[str]) -> None:
    """Save a run's results and put its tables (the ones before the table per disturbance, which stays in its
    markdown file) in docs/policies.md's `section`."""
    tables = markdown.split("### Per disturbance")[0]
    save_results(results, result, tables, *failures)
    replace_marked(POLICIES_DOC, section, tables)


def seed_list(seeds: list[int]) -> str:
    """The seeds as a reader takes them in: a run of more than five consecutive seeds as a range (`1-100`)."""
    runs: list[list[int]] = []
    for seed in seeds:
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 5 else ", ".join(map(str, run)) for run in runs)


def main() -> None:
    parser = command_line(__doc__)
    parser.add_argument("--quick", action="store_true", help="seed 1 only instead of 1-5 (CI size)")
    parser.add_argument("--keep", type=Path, help="keep the run directories in this folder")
    parser.add_argument("--workers", type=int, help="runs at a time (default: one per CPU)")
    for name, known in (("policies", POLICIES), ("disturbances", DISTURBANCES), ("losses", LOSSES)):
        subset_help = f"a subset, comma-separated: {', '.join(known)}".replace("%", "%%")  # argparse formats help
        parser.add_argument(f"--{name}", type=_names(name, known), default=tuple(known), help=subset_help)
    parser.add_argument("--no-realtime", action="store_true", help="leave the realtime subset out")
    parser.add_argument("--seeds", type=_seeds, help="other seeds than 1-5, e.g. 1-100 or 6,7 (a tail's odds)")
    parser.add_argument("--params", default="{}", help="policy parameters as JSON, e.g. '{\"lost_change_odds\": 1}'")
    tail_help = (
        f"the recommended policy's tail: {', '.join(TAIL.disturbances)} at {' and '.join(TAIL.losses)} loss, seeds "
        f"{seed_list(list(TAIL.seeds))}, lockstep; saves {TAIL_RESULTS.name} and docs/policies.md's tail tables"
    )
    parser.add_argument("--tail", action="store_true", help=tail_help.replace("%", "%%"))  # argparse formats help
    args = parser.parse_args()
    params = tuple(sorted(json.loads(args.params).items()))
    subset = Subset(args.disturbances, args.losses, args.policies, params, not args.no_realtime, args.seeds)
    if args.tail:
        if not subset.whole or args.quick:
            parser.error("--tail runs its own subset: give it without --quick, --seeds or a subset")
        subset = TAIL
    result = run(quick=args.quick, keep=args.keep, workers=args.workers, subset=subset)
    markdown = result.pop("markdown")
    failures = [f"failed: {run_id}: {error}" for run_id, error in result["runs"]["failed"].items()]
    if subset == TAIL:
        TAIL_MARKDOWN.write_text(markdown + "\n")
        publish(TAIL_RESULTS, "quality-tail", markdown, result, failures)
        print(f"saved {TAIL_MARKDOWN.relative_to(ROOT)} and the tables of {POLICIES_DOC.relative_to(ROOT)}'s tail")
        return
    if not subset.whole:  # a subset is for tuning: print everything, keep the saved results
        print(markdown, *failures, sep="\n")
        return
    publish(RESULTS, "quality", markdown, result, failures)
    replace_marked(README, "quality-summary", worst_summary(result["by_loss"]))
    print(
        f"saved {MARKDOWN.relative_to(ROOT)}, the tables of {POLICIES_DOC.relative_to(ROOT)} and the README's summary"
    )


def _seeds(text: str) -> tuple[int, ...]:
    """An argparse type: seeds as `first-last` ranges and single numbers, comma-separated (`1-100`, `6,7`)."""
    import argparse

    seeds: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        last = last if dash else first
        if not (first.isdigit() and last.isdigit()) or int(last) < int(first):
            raise argparse.ArgumentTypeError(f"seeds: {part.strip()!r} is not a number or a range like 1-100")
        seeds.update(range(int(first), int(last) + 1))
    return tuple(sorted(seeds))


def _names(kind: str, known: Iterable[str]) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: comma-separated names of `known`, returned in the suite's order."""
    known = tuple(known)

    def parse(text: str) -> tuple[str, ...]:
        import argparse

        names = {name.strip() for name in text.split(",") if name.strip()}
        unknown = sorted(names - set(known))
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown {kind} {unknown}; known: {', '.join(known)}")
        return tuple(name for name in known if name in names)

    return parse


if __name__ == "__main__":
    main()
