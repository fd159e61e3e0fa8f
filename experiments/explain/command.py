"""`quotalab explain RUN_DIR --group G [--broker B] [--round R] [--dimension D] [--json]`."""

from __future__ import annotations

import argparse
from pathlib import Path

DESCRIPTION = """\
Explain why a broker's limit of a group was what it was at a round: the quota, the loss the broker measured, each
peer it counted (with the value counted and why: heard this round, held from N rounds ago, unheard, a newcomer,
silent, a claim capped), and the steps from the policy's rule to the final limit, each with the limit after it and
its reason. The last step's limit is the `rounds` table's, exactly.

A lockstep run is replayed in-process up to the round (deterministic: the run itself records nothing); a realtime
run must have recorded its decisions (`telemetry: {decisions: true}` in its scenario). See docs/reports.md.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="why a limit is what it is: the peers counted and the steps from the rule to the limit",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory (written by `quotalab run`)")
    parser.add_argument("--group", required=True, metavar="G", help="the group, by name")
    parser.add_argument(
        "--broker", metavar="B", help="the broker (default: the one whose limit was highest at that round)"
    )
    parser.add_argument(
        "--round", type=int, metavar="R", help="the round (default: the round of the group's worst peak)"
    )
    parser.add_argument(
        "--dimension", metavar="D", help="the quota dimension, e.g. publish_msgs_per_s (default: the group's first)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from experiments.explain.run_limits import chosen_limit, read_run
    from experiments.explain.sources import explain_limits
    from experiments.explain.text import explanation_text

    run_ = read_run(args.run_dir)
    limit = chosen_limit(run_, args.group, args.broker, args.round, args.dimension)
    explanation = explain_limits(run_, [limit])[limit]
    if args.json:
        from allocator.node.explanation import to_json

        print(to_json(explanation))
    else:
        print(explanation_text(explanation))
    return 0
