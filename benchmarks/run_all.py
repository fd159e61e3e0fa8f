"""Run every benchmark's `run()` and write `benchmarks/results/all.json`.

Modules (`benchmarks.bench_<name>`), in order: token_bucket, codec, allocator, node_scale, runtime, scale, report,
sweep (these two need Spark; report is recorded as missing when `benchmarks/bench_report.py` does not exist), soak
(a 30-minute realtime run; 2 minutes under `--quick`) and redis (the reports over Redis Pub/Sub). The policies'
quality is measured apart: `python -m evaluations.run_all`. A module without a `run()` is recorded as skipped; a
benchmark that fails is recorded with its error, and the others still run. Only `all.json` is written here: each
module's own `results/<name>.json` is written when that module is run on its own.

Run from the repository root:

    python -m benchmarks.run_all                  # everything (the PIP-82 scale runs take several minutes)
    python -m benchmarks.run_all --quick          # fewer repetitions, a fifth of PIP-82's size, a 2-minute soak
    python -m benchmarks.run_all --only allocator runtime
    python -m benchmarks.run_all --skip report --no-ray
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, command_line, results_path

NAMES = ("token_bucket", "codec", "allocator", "node_scale", "runtime", "scale", "report", "sweep", "soak", "redis")

QUICK: dict[str, dict[str, Any]] = {
    "token_bucket": {"calls": 20_000, "repeats": 2, "array_calls": 200},
    "codec": {"repeats": 2},
    "allocator": {"step_repeats": 100, "round_repeats": 15},
    "node_scale": {"repeats": 1},
    "scale": {"quick": True},
    "redis": {"quick": True},
    "soak": {"minutes": 2.0, "warmup_minutes": 0.5, "sample_s": 2.0},
}


def run_one(module_name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Import `module_name` and call its `run(**kwargs)`; the result, or the error, with the time taken."""
    record: dict[str, Any] = {"started_at": datetime.now(UTC).isoformat(timespec="seconds")}
    load = os.getloadavg()[0]
    start = time.perf_counter()
    try:
        module = importlib.import_module(module_name)
        if not callable(getattr(module, "run", None)):
            record["status"] = "skipped"
            record["error"] = f"{module_name} has no run()"
        else:
            record["result"] = module.run(**kwargs)
            record["status"] = "ok"
    except Exception as error:  # noqa: BLE001 - one failing benchmark must not stop the others
        record["status"] = "failed"
        record["error"] = f"{type(error).__name__}: {error}"
        record["traceback"] = traceback.format_exc()[-4000:]
    record["seconds"] = time.perf_counter() - start
    record["loadavg_1m"] = {"before": load, "after": os.getloadavg()[0]}
    return record


def run_all_command_line(doc: str, names: Sequence[str], quick: str) -> argparse.ArgumentParser:
    """The runner's command line (`--help` prints `doc`): `--only`, `--skip` and `--quick` (`quick` says what it
    changes) over the modules `names`."""
    parser = command_line(doc)
    parser.add_argument("--only", nargs="+", choices=names, help="run only these")
    parser.add_argument("--skip", nargs="+", choices=names, default=[], help="leave these out")
    parser.add_argument("--quick", action="store_true", help=quick)
    return parser


def run_all(modules: dict[str, str], kwargs: dict[str, dict[str, Any]], quick: bool, path: Path) -> dict[str, Any]:
    """Run `modules` (name -> module) in order, each with its `kwargs`; write the records to `path` (JSON)."""
    results: dict[str, Any] = {}
    for name, module_name in modules.items():
        if importlib.util.find_spec(module_name) is None:
            print(f"{name}: skipped ({module_name} does not exist)")
            results[name] = {"status": "missing"}
            continue
        print(f"{name}: running ...", flush=True)
        record = run_one(module_name, kwargs.get(name, {}))
        results[name] = record
        print(f"{name}: {record['status']} in {record['seconds']:.1f} s", flush=True)
        if record["status"] != "ok":
            print(f"  {record['error']}")
    summary = {
        "benchmarks": results,
        "quick": quick,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.platform(),
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"saved {path.relative_to(ROOT)}")
    return summary


def failed(summary: dict[str, Any]) -> bool:
    """Whether a module of `summary` failed."""
    return any(record.get("status") == "failed" for record in summary["benchmarks"].values())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = run_all_command_line(
        __doc__, NAMES, "fewer repetitions, 20 brokers x 20,000 groups for the scale runs, a 2-minute soak"
    )
    parser.add_argument("--no-ray", action="store_true", help="runtime and scale benchmarks on the local backend only")
    args = parser.parse_args(argv)
    chosen = [name for name in (args.only or NAMES) if name not in args.skip]
    kwargs = {name: dict(QUICK.get(name, {})) if args.quick else {} for name in chosen}
    if args.no_ray:
        kwargs.get("runtime", {})["backends"] = ("local",)
        kwargs.get("scale", {})["no_ray"] = True
    modules = {name: f"benchmarks.bench_{name}" for name in chosen}
    return run_all(modules, kwargs, args.quick, results_path("all"))


if __name__ == "__main__":
    sys.exit(1 if failed(main()) else 0)
