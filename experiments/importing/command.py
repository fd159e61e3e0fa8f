"""`quotalab import prometheus|capture FILE... --out DIR`: a Pulsar cluster's usage as a scenario to run."""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments.errors import UserError
from experiments.importing.capture import capture_usage
from experiments.importing.prometheus import DEFAULT_BROKER_LABEL, prometheus_usage
from experiments.importing.scenario_writer import read_quotas, write_scenario


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "import",
        help="turn a Pulsar cluster's exported usage into a scenario",
        description="Turn what a Pulsar cluster exports into a scenario: each broker's publish usage per resource "
        "group becomes a trace workload (CSV files next to the scenario), quotas come from --quotas or --quota. "
        "The scenario is written as Pulsar runs (policy pulsar, wire pulsar); run it under any policy with "
        "quotalab run --set. Step by step: docs/pulsar.md.",
    )
    parser.add_argument(
        "kind",
        choices=["prometheus", "capture"],
        help="prometheus: JSON of /api/v1/query_range with pulsar_resource_group_messages_used (and _bytes_used, "
        "_local_usage_reported); capture: records of the resource-usage topic (float64 time, uint32 length, "
        "ResourceUsageInfo), as quotalab run --capture writes them",
    )
    parser.add_argument("files", type=Path, nargs="+", metavar="FILE", help="the export (prometheus: one or more)")
    parser.add_argument("--out", type=Path, required=True, help="folder for scenario.yaml and its traces/")
    parser.add_argument("--quotas", type=Path, metavar="FILE", help="YAML: GROUP: {publish_msgs_per_s: RATE, ...}")
    parser.add_argument(
        "--quota",
        action="append",
        default=[],
        metavar="GROUP:DIMENSION=RATE",
        help="a group's quota in one dimension (repeatable; wins over --quotas): tenant-a/ns-1:publish_msgs_per_s=100",
    )
    parser.add_argument(
        "--interval-s", type=_positive, help="the round (default: the export's step, or the reporting interval)"
    )
    parser.add_argument(
        "--broker-label",
        default=DEFAULT_BROKER_LABEL,
        help="prometheus: the label naming the broker (default: %(default)s, the target Prometheus scraped)",
    )
    parser.set_defaults(handler=_handle)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds > 0")
    return value


def _handle(args: argparse.Namespace) -> int:
    quotas = read_quotas(args.quotas, args.quota)  # a mistake in them before reading a large export
    if args.kind == "prometheus":
        usage = prometheus_usage(args.files, args.broker_label, args.interval_s)
    else:
        if len(args.files) > 1:
            raise UserError("import capture: one file (concatenate several first: cat a.bin b.bin > all.bin)")
        usage = capture_usage(args.files[0], args.interval_s)
    source = ", ".join(path.name for path in args.files)
    scenario = write_scenario(usage, quotas, args.out, f"{args.kind} export {source}")
    print(f"{len(usage.brokers)} brokers, {len(usage.groups)} groups, {usage.rounds} rounds of {usage.interval_s:g} s")
    for broker in usage.brokers:
        sent = usage.reports.get(broker)
        if sent is not None:
            print(f"  {broker}: {sent} reports in {usage.rounds} rounds")
    print(f"scenario: {scenario}")
    print(f"run it:   quotalab run {scenario}    (another policy: --set policy.name=... --set reporting.wire=quotalab)")
    return 0
