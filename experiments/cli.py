"""The `quotalab` command: one subcommand per module, each registering itself with `register(subparsers)`.

A user mistake (bad scenario, missing run directory) raises `experiments.errors.UserError`; it is printed as
one line and the command exits with status 2, without a traceback. A run that cannot go on (an actor it needs
died: `actors.errors.RunFailedError`) is one line too, exit status 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import PackageNotFoundError, version

from actors.errors import RunFailedError
from experiments.errors import UserError

SUBCOMMANDS = (
    "experiments.run",
    "experiments.catalog",
    "experiments.report.command",
    "experiments.sweep.command",
    "experiments.demo",
    "experiments.keys_command",
    "experiments.adversaries",
    "experiments.policies_command",
    "experiments.importing.command",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="quotalab",
        description="Cooperative quota allocation across brokers: run experiments, sweep parameters, report.",
    )
    parser.add_argument("--version", action="version", version=f"quotalab {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in SUBCOMMANDS:  # a module that fails to import fails the command: nothing is left out quietly
        importlib.import_module(module_name).register(subparsers)
    return parser


def _version() -> str:
    try:
        return version("quotalab")
    except PackageNotFoundError:  # run from a checkout that was not installed
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args) or 0
    except UserError as error:
        print(f"quotalab {args.command}: {one_line(str(error))}", file=sys.stderr)
        return 2
    except RunFailedError as error:  # an actor the run needs died, or stopped answering: the manifest says failed
        print(f"quotalab {args.command}: failed: {one_line(str(error))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"quotalab {args.command}: interrupted", file=sys.stderr)
        return 130


def one_line(message: str) -> str:
    """`message` with line breaks and other control characters escaped: a name read from a file may hold one."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in message)


if __name__ == "__main__":
    sys.exit(main())
