"""`quotalab keys`: a fresh Ed25519 key pair per broker in a key directory, for `reporting.key_dir`.

Each broker gets `<broker>.key` (its private key, hex, mode 0600: readable by its owner only) and `<broker>.pub`
(its public key, mode 0644), in a directory created mode 0700, whatever the umask; an existing directory others
may write in is refused. Existing keys are never overwritten. The keys are printed nowhere: only the files'
names are.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from allocator.wire.signing import write_key_directory
from experiments import checks
from experiments.errors import UserError
from experiments.scenario import parse_scenario, read_scenario
from experiments.scenario.keys import directory_problem

KEY_SETTINGS = ("hmac_key", "key_dir")  # reporting's hmac_key_file, hmac_key_env, key_dir, key_dir_env


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "keys",
        help="write a per-broker Ed25519 key pair for each broker into a key directory (reporting.key_dir)",
        description=(
            "Writes DIR/<broker>.key (private, mode 0600) and DIR/<broker>.pub (mode 0644) for every broker named, "
            "in DIR (created mode 0700), for a scenario's reporting.key_dir: per-broker Ed25519 keys, which no "
            "broker can forge another's reports with (a cluster key, reporting.hmac_key_*, lets any holder speak "
            "for every broker). Refuses to overwrite a key that exists, and a DIR others may write in."
        ),
    )
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="the key directory (created if needed)")
    brokers = parser.add_mutually_exclusive_group(required=True)
    brokers.add_argument("--brokers", nargs="+", metavar="BROKER", help="the brokers' names")
    brokers.add_argument(
        "--scenario", type=Path, metavar="FILE", help="every broker of this scenario file (written or generated)"
    )
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    if args.scenario is not None:
        args.brokers = scenario_brokers(args.scenario)
    for index, broker in enumerate(args.brokers):
        try:
            checks.file_name(broker, f"--brokers[{index}]")
        except checks.FieldError as error:
            raise UserError(str(error)) from None
    problem = args.out.is_dir() and directory_problem(args.out)
    if problem:
        raise UserError(f"--out: {problem}")
    try:
        written = write_key_directory(args.out, args.brokers)
    except FileExistsError as error:
        raise UserError(f"{error.filename} exists: keys are never overwritten") from None
    except OSError as error:
        raise UserError(f"cannot write keys in {args.out}: {error.strerror}") from None
    print(f"wrote {len(written)} files in {args.out}: {', '.join(path.name for path in written)}")
    return 0


def scenario_brokers(path: Path) -> list[str]:
    """The brokers of the scenario at `path`, read without its key settings (its key directory may not exist
    yet: this command is what writes it)."""
    data = read_scenario(path)
    reporting = data.get("reporting")
    if isinstance(reporting, dict):
        data["reporting"] = {name: value for name, value in reporting.items() if not name.startswith(KEY_SETTINGS)}
        if data.get("events"):  # a forged report signed with a stolen key needs the keys: not what is asked here
            data["events"] = [e for e in data["events"] if not (isinstance(e, dict) and "forge" in e)]
    return [broker.name for broker in parse_scenario(data, str(path)).brokers]
