"""Does Optuna find what the grid finds with fewer runs, what does Ray Tune cost per run, and how long does
tuning the recommended policy take?

Three parts, each saved under its name in `evaluations/results/tune.json` (a part run again replaces only its
own entry), all on one Ray instance of this machine's CPUs:

- `search`: `tune-steal`'s space (pip82-steal's `steal_fraction` x `threshold_pct` on steal-under-loss, loss
  0 and 30% as conditions, seeds 1 and 2), one objective, `OBJECTIVE`, the worst over a candidate's 4 runs.
  The grid: steal fraction 0.1 ... 0.9 x threshold 2, 5, 10, 20, 40 = 45 candidates. Optuna (TPE): a third of
  that, 15 candidates over the same space (steal fraction uniform in [0.1, 0.9], threshold a choice of the
  grid's values), once per seed of `OPTUNA_SEEDS`. Reported: the best-so-far curve against runs for each, and
  whether each Optuna search reached the grid's best within 5% (`within_5pct`). Figure:
  `docs/figures/tune-best-so-far.png`.
- `overhead`: `quick.yaml` (2 candidates x 2 conditions x 2 seeds = 8 runs), run by today's executor (Tune
  trials, each run's metrics computed by the Spark actor as its candidate ends) and by the loop of Ray tasks
  this project had before (`git show 915f03d:experiments/sweep/execute.py`: one task per run, at most one per
  CPU in flight), followed by the same metrics over its 8 runs in one Spark pass, alternately, `REPEATS` times
  each after one warm-up of each (both SparkSessions up and warm: their start is not counted). Overhead per
  run = (wall time until every run is on disk with its metrics - the runs' own time) / runs; the ratio is
  Tune's over the loop's (medians). Also: the loop alone, without metrics, and the measuring time per run.
- `safe` (`--part safe`; long): `experiments/sweeps/tune-safe.yaml` as shipped (30 Optuna candidates, 2 at
  once on this 2-core machine), wall time from the sweep file to report.html, with the machine's load before
  and after (other developers share its CPUs), the candidates stopped early and the best candidate's knobs.

Run from the repository root: `python -m evaluations.tune [--part search|overhead|safe|all]` (default
search and overhead). `--docs` only rewrites the generated section of docs/tuning.md and the figure from the
saved results.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ray
import yaml
from matplotlib.figure import Figure

from actors.hosts.backends import init_ray
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
from experiments.sweep.expand import plan_sweep
from experiments.sweep.rank import collect_run_metrics
from experiments.sweep.spark_jobs import spark_actor
from experiments.sweep.sweep_file import load_sweep
from experiments.sweep.tuning import execute_sweep

RESULTS = results_path("tune", "evaluations")
FIGURE = ROOT / "docs" / "figures" / "tune-best-so-far.png"
DOC = ROOT / "docs" / "tuning.md"
README = ROOT / "README.md"  # its `tune-safe` section: the shipped tuning example's result and time
SWEEPS = ROOT / "experiments" / "sweeps"
OBJECTIVE = "rounds_to_converge"  # peak_overshoot is flat on this space: every grid candidate's worst is 0.5
STEAL_FRACTIONS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
THRESHOLDS = [2, 5, 10, 20, 40]
OPTUNA_SEEDS = (1, 2, 3)
REPEATS = 3
OLD_EXECUTOR = "915f03d:experiments/sweep/execute.py"
MASTER = "local[2]"


def search_sweep(folder: Path, search: dict[str, Any]) -> Path:
    """tune-steal's base, conditions and seeds with `search` (a `grid` or an `optuna` entry) and one objective."""
    sweep = {
        "name": f"bench-{next(iter(search))}",
        "base": str(ROOT / "experiments" / "scenarios" / "steal-under-loss.yaml"),
        "seeds": [1, 2],
        "conditions": {"channel.loss": [0.0, 0.3]},
        "aggregate": "worst",
        **search,
        "objective": {"minimize": [OBJECTIVE]},
    }
    path = folder / f"{sweep['name']}.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def in_order(table: Any) -> list[float]:
    """From a ranking table: each candidate's aggregated objective, in the order the candidates were proposed."""
    ordered = table.assign(number=table["config_id"].str.split("-").str[1].astype(int)).sort_values("number")
    return [float(value) for value in ordered[f"{OBJECTIVE}_mean"]]


def best_so_far(values: list[float], runs_per_candidate: int) -> list[dict[str, float]]:
    """After each candidate: the runs so far and the best objective so far."""
    return [{"runs": index * runs_per_candidate, "best": min(values[:index])} for index in range(1, len(values) + 1)]


def part_search(folder: Path) -> dict[str, Any]:
    grid = {"grid": {"policy.params.steal_fraction": STEAL_FRACTIONS, "reporting.threshold_pct": THRESHOLDS}}
    space = {
        "policy.params.steal_fraction": {"uniform": [STEAL_FRACTIONS[0], STEAL_FRACTIONS[-1]]},
        "reporting.threshold_pct": {"choice": THRESHOLDS},
    }
    samples = len(STEAL_FRACTIONS) * len(THRESHOLDS) // 3
    searches = {"grid": grid} | {
        f"optuna-seed-{seed}": {"optuna": {"samples": samples, "seed": seed, "space": space}} for seed in OPTUNA_SEEDS
    }
    found: dict[str, Any] = {}
    for label, search in searches.items():
        plan = plan_sweep(load_sweep(search_sweep(folder, search)))
        started = time.perf_counter()
        summary, results = execute_sweep(plan, folder / label, master=MASTER, progress=False)
        values = in_order(results.ranking.table)
        curve = best_so_far(values, len(plan.conditions) * len(plan.sweep.seeds))
        found[label] = {
            "values": values,
            "candidates": len(curve),
            "runs": curve[-1]["runs"],
            "wall_s": time.perf_counter() - started,
            "best": curve[-1]["best"],
            "best_knobs": results.summary["best"]["overrides"],
            "curve": curve,
        }
        print(f"  {label}: best {OBJECTIVE} {curve[-1]['best']:.3f} after {curve[-1]['runs']} runs", flush=True)
    bound = found["grid"]["best"] * 1.05
    for entry in found.values():
        entry["within_5pct"] = entry["best"] <= bound
        reached = [point["runs"] for point in entry["curve"] if point["best"] <= bound]
        entry["runs_to_within_5pct"] = reached[0] if reached else None
    grid_values = found["grid"]["values"]
    landscape = {  # how hard the target is: how many of the grid's candidates are within 5% of its best
        "grid_within_5pct": sum(value <= bound for value in grid_values),
        "grid_median": statistics.median(grid_values),
        "grid_worst": max(grid_values),
    }
    objective = f"{OBJECTIVE}, worst over loss 0 / 30% x seeds 1, 2"
    return {"objective": objective, "samples": samples, "landscape": landscape, **found}


def old_executor() -> Any:
    """Today's loop of Ray tasks, as it was at 915f03d, loaded from git into a module of its own."""
    source = subprocess.run(["git", "show", OLD_EXECUTOR], cwd=ROOT, check=True, capture_output=True, text=True)
    path = Path(tempfile.mkdtemp(prefix="bench-tune-")) / "old_execute.py"
    path.write_text(source.stdout)
    spec = importlib.util.spec_from_file_location("old_execute", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)  # its task runs in workers that cannot import it
    return module


def part_overhead(folder: Path) -> dict[str, Any]:
    from experiments.report.session import spark_session

    plan = plan_sweep(load_sweep(SWEEPS / "quick.yaml"))
    runs = [run for config in plan.configurations for run in plan.runs(config)]
    old = old_executor()
    old_plan = SimpleNamespace(sweep=plan.sweep, runs=runs)  # the attributes the old loop reads
    spark_jobs = spark_actor(MASTER)  # Tune's Spark jobs, kept by this program: found by every sweep below
    spark = spark_session(MASTER)  # the old loop's metrics
    samples: dict[str, list[dict[str, float]]] = {"tune": [], "tasks": []}
    try:
        for repeat in range(REPEATS + 1):  # the first of each warms its JVM up and is not counted
            summary, _ = execute_sweep(plan, folder / f"tune-{repeat}", master=MASTER, progress=False, rank=False)
            runs_dir = folder / f"tasks-{repeat}" / "runs"
            execution = old.execute_sweep(old_plan, runs_dir, progress=False)
            started = time.perf_counter()
            collect_run_metrics(spark, [runs_dir / run.run_id for run in runs])
            if repeat == 0:
                continue
            samples["tune"].append(
                {"wall_s": summary.wall_s, "run_s": summary.run_seconds, "measure_s": summary.measure_seconds}
            )
            samples["tasks"].append(
                {
                    "wall_s": execution.wall_s,
                    "run_s": sum(execution.run_seconds.values()),
                    "measure_s": time.perf_counter() - started,
                }
            )
    finally:
        ray.get(spark_jobs.close.remote())
        ray.kill(spark_jobs)
    tune = {
        "overhead_s": statistics.median((s["wall_s"] - s["run_s"]) / len(runs) for s in samples["tune"]),
        "measure_s": statistics.median(s["measure_s"] / len(runs) for s in samples["tune"]),
    }
    tasks = {
        "overhead_s": statistics.median(
            (s["wall_s"] + s["measure_s"] - s["run_s"]) / len(runs) for s in samples["tasks"]
        ),
        "executor_only_s": statistics.median((s["wall_s"] - s["run_s"]) / len(runs) for s in samples["tasks"]),
        "measure_s": statistics.median(s["measure_s"] / len(runs) for s in samples["tasks"]),
    }
    return {
        "sweep": "quick.yaml",
        "runs": len(runs),
        "repeats": REPEATS,
        "run_s": statistics.median(s["run_s"] / len(runs) for got in samples.values() for s in got),
        "per_run": {"tune": tune, "tasks": tasks},
        "overhead_ratio": tune["overhead_s"] / tasks["overhead_s"],
        "samples": samples,
    }


def part_safe(folder: Path) -> dict[str, Any]:
    load_before = loadavg_1m()
    started = time.perf_counter()
    plan = plan_sweep(load_sweep(SWEEPS / "tune-safe.yaml"))
    summary, results = execute_sweep(plan, folder / "tune-safe", master=MASTER, max_parallel=2, progress=True)
    best = results.summary["best"]
    return {
        "wall_s": time.perf_counter() - started,
        "candidates": len(summary.candidates),
        "runs": len(summary.ran),
        "stopped_early": len(summary.stopped_early),
        "runs_saved": len(summary.stopped_early) * (len(plan.conditions) - 1) * len(plan.sweep.seeds),
        "run_s": summary.run_seconds,
        "measure_s": summary.measure_seconds,
        "best": {
            "config_id": best["config_id"],
            "knobs": best["overrides"],
            "objectives": {name: best["metrics"][name]["mean"] for name in plan.sweep.objective.names},
            "conditions": best["conditions"],
        },  # fmt: skip
        "pareto": len(results.summary["pareto"]),
        "loadavg_1m": load_since(load_before),
    }


def draw(search: dict[str, Any]) -> None:
    """Best-so-far against runs: the grid and each Optuna search, the grid's best +5% dashed."""
    figure = Figure(figsize=(6.4, 3.8), layout="constrained")
    axes = figure.subplots()
    for label, entry in search.items():
        if isinstance(entry, dict) and "curve" in entry:
            runs = [point["runs"] for point in entry["curve"]]
            axes.step(runs, [point["best"] for point in entry["curve"]], where="post", label=label)
    axes.axhline(search["grid"]["best"] * 1.05, color="gray", linestyle="--", linewidth=1, label="grid's best + 5%")
    axes.set_xlabel("runs")
    axes.set_ylabel(f"best {OBJECTIVE} so far (worst case)")
    axes.legend(fontsize=8)
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(FIGURE, dpi=110)


BEGIN, END = "<!-- tune: begin (generated by python -m evaluations.tune --docs) -->", "<!-- tune: end -->"


def render_docs(results: dict[str, Any]) -> None:
    """Rewrite the section of docs/tuning.md between BEGIN and END from the saved results, and the figure."""
    lines = []
    search = results.get("search")
    if search:
        draw(search)
        grid, landscape = search["grid"], search["landscape"]
        lines.append(
            f"On `tune-steal`'s space ({search['objective']}), the grid of {grid['candidates']} candidates "
            f"({grid['runs']} runs, {grid['wall_s']:.0f} s) finds {grid['best']:.3g} at {_knobs(grid['best_knobs'])} "
            f"(median {landscape['grid_median']:.3g}, worst {landscape['grid_worst']:.3g}; "
            f"{landscape['grid_within_5pct']} of its {grid['candidates']} candidates are within 5% of its best, and "
            f"in its own order it gets there after {grid['runs_to_within_5pct']} runs)."
        )
        for label, entry in search.items():
            if label.startswith("optuna"):
                reached = entry["runs_to_within_5pct"]
                within = f"within 5% after {reached} runs" if reached else "not within 5%"
                lines.append(
                    f"- Optuna, {label.removeprefix('optuna-')}: {entry['candidates']} candidates ({entry['runs']} "
                    f"runs, {entry['wall_s']:.0f} s), best {entry['best']:.3g} at {_knobs(entry['best_knobs'])}: "
                    f"{within}."
                )
        lines.append("\n![best so far against runs](figures/tune-best-so-far.png)")
    overhead = results.get("overhead")
    if overhead:
        tune, tasks = overhead["per_run"]["tune"], overhead["per_run"]["tasks"]
        load = overhead["loadavg_1m"]
        lines.append(
            f"\nExecutor overhead per run on `quick.yaml` ({overhead['runs']} runs of {overhead['run_s']:.2f} s, "
            f"median of {overhead['repeats']}, load {load['before']:.1f}): from the start to every run on disk "
            f"with its metrics, Tune {tune['overhead_s']:.2f} s a run, the old loop of Ray tasks then one Spark "
            f"pass {tasks['overhead_s']:.2f} s: **{overhead['overhead_ratio']:.1f}x**. The loop alone cost "
            f"{tasks['executor_only_s']:.2f} s a run; the metrics are most of the rest (a Spark pass per "
            f"candidate, {tune['measure_s']:.2f} s of passes a run, against one pass for the whole sweep, "
            f"{tasks['measure_s']:.2f} s a run)."
        )
    safe = results.get("safe")
    if safe:
        lines.append("\n" + safe_summary(safe))
        replace_marked(README, "tune-safe", safe_summary(safe))
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{chr(10).join(lines)}\n{END}{tail}")


def safe_summary(safe: dict[str, Any]) -> str:
    """`tune-safe.yaml`'s measured run in one paragraph (docs/tuning.md and the README quote it)."""
    load = safe["loadavg_1m"]
    return (
        f"`tune-safe.yaml` on 2 cores: **{safe['wall_s'] / 60:.1f} min** from the file to report.html "
        f"({safe['candidates']} candidates, {safe['runs']} runs; {safe['stopped_early']} stopped early, which "
        f"saved {safe['runs_saved']} runs; load {load['before']:.1f} before, {load['after']:.1f} after). Best: "
        f"{_knobs(safe['best']['knobs'])}; "
        + ", ".join(f"{name} {value:.3g}" for name, value in safe["best"]["objectives"].items())
        + f" (worst over its runs); {safe['pareto']} candidates on the Pareto front."
    )


def _knobs(knobs: dict[str, Any]) -> str:
    return ", ".join(f"`{key.split('.')[-1]}` {value}" for key, value in knobs.items())


def main() -> None:
    parser = command_line(__doc__)
    parser.add_argument("--part", choices=["search", "overhead", "safe", "all"], default=None)
    parser.add_argument("--docs", action="store_true", help="only redraw the figure and the docs from the results")
    args = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if not args.docs:
        parts = {"all": ["search", "overhead", "safe"], None: ["search", "overhead"]}.get(args.part, [args.part])
        init_ray()
        try:
            with tempfile.TemporaryDirectory(prefix="bench-tune-") as folder:
                for part in parts:
                    load_before = loadavg_1m()
                    print(f"{part} ...", flush=True)
                    entry = {"search": part_search, "overhead": part_overhead, "safe": part_safe}[part](Path(folder))
                    entry.setdefault("loadavg_1m", load_since(load_before))
                    results[part] = entry | {"cpus": int(ray.cluster_resources().get("CPU", 0)), **environment(
                        "ray", "optuna", "pyspark")}  # fmt: skip
                    save_results(RESULTS, results)
        finally:
            ray.shutdown()
    render_docs(results)
    print(f"wrote {DOC.relative_to(ROOT)} and {FIGURE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
