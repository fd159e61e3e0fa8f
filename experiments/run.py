"""`quotalab run SCENARIO`: one experiment, Parquet telemetry out."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from actors.drivers.lockstep import run_lockstep
from actors.hosts.backends import make_backend
from actors.plan import Plan
from actors.telemetry.writer import TelemetryWriter
from experiments import catalog, prerequisites
from experiments.errors import UserError
from experiments.final_table import final_table
from experiments.planner import build_plan
from experiments.progress import progress as progress_bar
from experiments.scenario import apply_overrides, parse_override, parse_scenario, read_scenario
from experiments.scenario.keys import shared_key_warning
from experiments.scenario.spec import Scenario

if TYPE_CHECKING:
    from experiments.importing.capture import CaptureWriter
    from experiments.live_metrics import MetricsServer


def default_run_dir(scenario: Scenario) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{scenario.name}-{scenario.policy.name}-s{scenario.seed}-{stamp}"


def scenario_manifest(scenario: Scenario) -> dict:
    """The resolved scenario for manifest.json; a generated one keeps its `generated` block, not the
    hundreds of thousands of groups and workloads it expands to."""
    if scenario.generated is None:
        return scenario.to_dict()
    compact = dataclasses.replace(scenario, groups=(), brokers=())
    return {
        **compact.to_dict(),
        "groups": f"{len(scenario.groups)} generated",
        "brokers": f"{len(scenario.brokers)} generated",
    }


@dataclass(frozen=True)
class MetricsAddress:
    """Where `--metrics-port` serves the run's Prometheus metrics (`experiments/live_metrics.py`)."""

    port: int
    host: str = "127.0.0.1"


def run_scenario(
    scenario: Scenario,
    run_dir: Path,
    *,
    address: str | None = None,
    progress: bool = True,
    metrics: MetricsAddress | None = None,
    capture: Path | None = None,
) -> Path:
    """Run `scenario` into `run_dir` (created); returns it. The manifest's status tells how it ended.

    With `metrics`, the run's Prometheus metrics are served at `http://HOST:PORT/metrics` while it runs. With
    `capture`, every report the brokers publish is written there as Pulsar's `ResourceUsageInfo` (lockstep runs:
    `experiments.importing.capture.CaptureWriter`)."""
    run_dir = Path(run_dir)
    if (run_dir / "manifest.json").exists():
        raise UserError(f"{run_dir}: already holds a run; choose another --out")
    if metrics is not None and scenario.mode != "realtime":
        raise UserError("--metrics-port: serves realtime runs only (add --mode realtime)")
    if capture is not None and scenario.mode != "lockstep":
        raise UserError("--capture: records what a lockstep run's driver sees published (use --mode lockstep)")
    plan = build_plan(scenario)
    if warning := shared_key_warning(scenario):
        print(f"warning: {warning}", file=sys.stderr)
    for key, url in _given_redis_urls(plan):
        prerequisites.check_redis(url, key)
    if address is not None and scenario.backend == "ray":
        prerequisites.check_ray_address(address)
    backend = make_backend(scenario.backend, address)
    manifest = {
        "scenario_name": scenario.name,
        "policy": scenario.policy.name,
        "seed": scenario.seed,
        "backend": scenario.backend,
        "mode": scenario.mode,
        "scenario": scenario_manifest(scenario),
    }
    services = backend.services_node()  # on Ray: the driver's node, where the registry and channel actors live
    if services is not None:
        manifest["services_node"] = {"node_id": services.node_id, "address": services.address}
    brokers = [broker.name for broker in plan.brokers]
    names = {"broker": brokers, "group": plan.group_names, "dimension": plan.dimensions}
    server = _serve_metrics(metrics, names) if metrics is not None else None  # a port in use: before any file
    try:
        writer = TelemetryWriter(run_dir, run_dir.name, manifest, names)
    except BaseException:
        if server is not None:
            server.stop()
        raise
    if server is not None:
        writer.observers.append(server.metrics)
        if progress:
            print(f"metrics: {server.url}", file=sys.stderr)
    capturing = None if capture is None else _capture_writer(capture, scenario, plan)
    bar = progress_bar(scenario.rounds, scenario.name, "rounds", enabled=progress)
    status = "failed"
    restore = _terminate_as_interrupt()
    try:
        if scenario.mode == "realtime":
            from actors.drivers.realtime import run_realtime

            run_realtime(plan, backend, writer, on_round=lambda _: bar.update())
        else:
            on_publish = None if capturing is None else capturing.write_round
            run_lockstep(plan, backend, writer, on_round=lambda _: bar.update(), on_publish=on_publish)
        status = "complete"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        restore()
        bar.close()
        writer.close(status)
        if capturing is not None:
            capturing.close()
        if server is not None:
            server.stop()
    return run_dir


def _capture_writer(path: Path, scenario: Scenario, plan: Plan) -> CaptureWriter:
    from experiments.importing.capture import CaptureWriter

    try:
        return CaptureWriter(path, scenario.reporting.wire, plan.group_names, plan.interval_s)
    except OSError as error:
        raise UserError(f"--capture {path}: cannot write: {error.strerror}") from None


def _serve_metrics(address: MetricsAddress, names: dict[str, list[str]]) -> MetricsServer:
    from experiments.live_metrics import LiveMetrics, MetricsServer  # prometheus_client only when asked

    try:
        return MetricsServer(LiveMetrics(names), address.host, address.port)
    except OSError as error:
        raise UserError(f"--metrics-port {address.port}: cannot serve on {address.host} ({error.strerror})") from None


def _given_redis_urls(plan: Plan) -> list[tuple[str, str]]:
    """(scenario key, url) of each Redis the scenario names (a run without a URL starts its own server)."""
    keys = {}
    if plan.consensus is not None and plan.consensus.store == "redis" and plan.consensus.url is not None:
        keys[plan.consensus.url] = "membership.url"
    if plan.channel.redis_url is not None:  # the consensus may use it too: one check, under the channel's key
        keys[plan.channel.redis_url] = "channel.redis_url"
    return [(key, url) for url, key in keys.items()]


def _terminate_as_interrupt() -> Callable[[], None]:
    """While a run goes, SIGTERM (a scheduler stopping the driver) ends it like Ctrl-C: the buffered rows are
    flushed and the manifest says `interrupted`. Returns what restores the previous handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run one scenario and write its telemetry",
        description="Run one scenario file. Telemetry (Parquet) and manifest.json go to the run directory.",
    )
    parser.add_argument(
        "scenario", help="a scenario file, or the name of a shipped one (`quotalab scenarios` lists them)"
    )
    parser.add_argument("--backend", choices=["local", "ray"], help="override the scenario's backend")
    parser.add_argument("--mode", choices=["lockstep", "realtime"], help="override the scenario's mode")
    parser.add_argument("--seed", type=int, help="override the scenario's seed")
    parser.add_argument(
        "--rounds", type=int, metavar="N", help="run only the first N rounds (later events are dropped)"
    )
    parser.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override any scenario key, dotted, the value read as YAML (repeatable): --set channel.routing=interest",
    )
    parser.add_argument(
        "--out", type=Path, help="the run directory itself (default: runs/<name>-<policy>-s<seed>-<time>)"
    )
    parser.add_argument("--address", help="Ray address of an existing cluster, e.g. 'auto' (ray backend)")
    parser.add_argument(
        "--redis-url",
        metavar="URL",
        help="carry the reports over the Redis at URL, e.g. redis://10.0.0.5:6379/0 (sets channel.transport=redis "
        "and channel.redis_url; realtime mode; without it a Redis run starts its own redis-server on 127.0.0.1)",
    )
    parser.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve the run's Prometheus metrics at http://HOST:PORT/metrics while it runs (realtime mode only)",
    )
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address to serve the metrics on (default: %(default)s; 0.0.0.0 for every interface)",
    )
    parser.add_argument(
        "--capture",
        type=Path,
        metavar="FILE",
        help="write every report the brokers publish to FILE as Pulsar's ResourceUsageInfo, in the capture format "
        "`quotalab import capture` reads (lockstep runs; see docs/pulsar.md)",
    )
    parser.set_defaults(handler=_handle)


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a TCP port, 1 to 65535")
    return int(text)


def load_for_run(text: str, overrides: dict[str, object], rounds: int | None) -> Scenario:
    """The scenario `text` names (a path or a shipped name), with `overrides`, cut to `rounds` when given:
    events from round `rounds` on and brokers that would join then are dropped, with a note on stderr."""
    path = catalog.scenario_file(text)
    data = read_scenario(path)
    if catalog.is_sweep(data):
        raise UserError(f"{text}: a sweep file (it names a base scenario to vary); run it with: quotalab sweep {text}")
    data = apply_overrides(data, overrides)
    if rounds is not None:  # checked with the rest of the file: `rounds: must be >= 1, got 0`
        data = shortened(data, rounds) if rounds >= 1 else {**data, "rounds": rounds}
    return parse_scenario(data, str(path))


def shortened(data: dict, rounds: int) -> dict:
    """The raw scenario cut to its first `rounds` rounds (see `load_for_run`)."""
    brokers = data.get("brokers")
    late = set()
    if isinstance(brokers, list):
        late = {b.get("name") for b in brokers if isinstance(b, dict) and _round(b.get("join_at")) >= rounds}
        brokers = [b for b in brokers if not (isinstance(b, dict) and b.get("name") in late)]
    events = data.get("events")
    dropped: list[str] = []
    if isinstance(events, list):
        kept = []
        for event in events:
            at = _round(event.get("at")) if isinstance(event, dict) else -1
            if at >= rounds or late & _names_in(event):
                dropped.append(str(at))
            else:
                kept.append(event)
        events = kept
    notes = [f"{len(dropped)} event(s) dropped (at {', '.join(dropped)})"] if dropped else []
    notes += [f"broker(s) joining later left out: {', '.join(sorted(map(str, late)))}"] if late else []
    if notes:
        print(f"--rounds {rounds}: {'; '.join(notes)}", file=sys.stderr)
    cut = {**data, "rounds": rounds}
    if isinstance(data.get("events"), list):
        cut["events"] = events
    if isinstance(data.get("brokers"), list):
        cut["brokers"] = brokers
    return cut


def _names_in(event: object) -> set[str]:
    """The strings an event names, one level deep (`crash: broker-5`, `demand: {broker: broker-5, ...}`)."""
    if not isinstance(event, dict):
        return set()
    values = [v for value in event.values() for v in (value.values() if isinstance(value, dict) else [value])]
    return {value for value in values if isinstance(value, str)}


def _round(value: object) -> int:
    """A round number as written in the file (anything else sorts first: the full check comes later)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _handle(args: argparse.Namespace) -> int:
    options = {key: getattr(args, key) for key in ("backend", "mode", "seed")}
    overrides = dict(map(parse_override, args.set))  # the values read as YAML, as strictly as a file
    overrides |= {key: value for key, value in options.items() if value is not None}
    if args.redis_url is not None:
        overrides |= {"channel.transport": "redis", "channel.redis_url": args.redis_url}
    scenario = load_for_run(args.scenario, overrides, args.rounds)
    if args.address and scenario.backend != "ray":
        scenario = dataclasses.replace(scenario, backend="ray")
    metrics = None if args.metrics_port is None else MetricsAddress(args.metrics_port, args.metrics_host)
    run_dir = run_scenario(
        scenario, args.out or default_run_dir(scenario), address=args.address, metrics=metrics, capture=args.capture
    )
    print(final_table(run_dir))
    print(f"telemetry: {run_dir}")
    return 0
