"""`quotalab keys`: a fresh Ed25519 key pair per broker in a key directory, for `reporting.key_dir`.

Each broker gets `<broker>.key` (its private key, hex, readable by its owner only) and `<broker>.pub` (its
public key). Existing keys are never overwritten. The keys are printed nowhere: only the files' names are.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from allocator.wire.signing import write_key_directory
from experiments import checks
from experiments.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "keys",
        help="write a per-broker Ed25519 key pair for each broker into a key directory (reporting.key_dir)",
        description=(
            "Writes DIR/<broker>.key (private, mode 0600) and DIR/<broker>.pub for every broker named, for a "
            "scenario's reporting.key_dir. Refuses to overwrite a key that exists."
        ),
    )
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="the key directory (created if needed)")
    parser.add_argument("--brokers", nargs="+", required=True, metavar="BROKER", help="the brokers' names")
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    for index, broker in enumerate(args.brokers):
        try:
            checks.file_name(broker, f"--brokers[{index}]")
        except checks.FieldError as error:
            raise UserError(str(error)) from None
    try:
        written = write_key_directory(args.out, args.brokers)
    except FileExistsError as error:
        raise UserError(f"{error.filename} exists: keys are never overwritten") from None
    except OSError as error:
        raise UserError(f"cannot write keys in {args.out}: {error.strerror}") from None
    print(f"wrote {len(written)} files in {args.out}: {', '.join(path.name for path in written)}")
    return 0
