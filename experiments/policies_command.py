"""`quotalab policies`: every policy, what "fair" means for it, and the knobs it takes with their reasons.

The listing comes from the policies' own settings (`allocator.policies.describe`): the knob's docstring is the one
source of what docs/policies.md's table says (`--markdown` prints that table; a test checks they agree).
"""

from __future__ import annotations

import argparse
import textwrap

from allocator.policies import POLICIES, RECOMMENDED, describe


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "policies",
        help="list the policies and the knobs each takes (policy.params of a scenario)",
        description="Every policy with what it does, and each of its knobs: default, allowed values, and why.",
    )
    parser.add_argument("name", nargs="?", choices=sorted(POLICIES), metavar="POLICY", help="only this policy")
    parser.add_argument("--markdown", action="store_true", help="the knobs as docs/policies.md's table")
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    names = [args.name] if args.name else list(POLICIES)
    print(knobs_markdown(names) if args.markdown else listing(names))
    return 0


def listing(names: list[str]) -> str:
    """The plain-text listing: a paragraph per policy, a line per knob."""
    blocks = []
    for name in names:
        lines = [f"{name}{' (recommended)' if name == RECOMMENDED else ''}: {POLICIES[name].summary}"]
        for knob in describe(name):
            lines.append(f"  {knob.name} = {_default(knob.default)} ({knob.in_words})")
            lines += textwrap.wrap(knob.doc, width=100, initial_indent="      ", subsequent_indent="      ")
        if len(lines) == 1:
            lines.append("  (no knobs)")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def knobs_markdown(names: list[str]) -> str:
    """docs/policies.md's table of knobs: one row per knob, with the policies that take it."""
    takers: dict[object, list[str]] = {}
    for name in names:
        for knob in describe(name):
            takers.setdefault(knob, []).append(f"`{name}`")
    rows = ["| knob | policies | default | allowed | what it answers |", "|---|---|---|---|---|"]
    for knob, policies in takers.items():
        rows.append(
            f"| `{knob.name}` | {', '.join(policies)} | {_default(knob.default)} | {knob.in_words} | {knob.doc} |"
        )
    return "\n".join(rows)


def _default(value: object) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
