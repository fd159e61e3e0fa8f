"""Per-broker keys of a scenario: read once, when it loads, from a key directory (`reporting.key_dir`).

The directory holds `<broker>.key` for every broker of the scenario: its Ed25519 private key, 32 bytes in hex
(`quotalab keys --out DIR --brokers ...` writes one, see `allocator.wire.signing.write_key_directory`). A missing,
unreadable or malformed key is one line naming `reporting.key_dir` and the file; a key is never echoed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from allocator.wire.signing import KEY_BYTES, PRIVATE_SUFFIX, Signer
from experiments import checks

MAX_KEY_FILE_BYTES = 1024


def broker_keys(directory: Path, key: str, brokers: Sequence[str]) -> dict[str, bytes]:
    """broker -> its private key (raw bytes) from `directory`; `checks.FieldError` naming `key` otherwise."""
    if not directory.is_dir():
        raise checks.FieldError(key, f"no such directory {str(directory)!r}")
    return {broker: _private_key(directory / f"{broker}{PRIVATE_SUFFIX}", key) for broker in brokers}


def _private_key(path: Path, key: str) -> bytes:
    try:
        with path.open("rb") as file:
            text = file.read(MAX_KEY_FILE_BYTES + 1).strip()
    except FileNotFoundError:
        raise checks.FieldError(key, f"no key file {path.name!r} in {str(path.parent)!r}") from None
    except OSError as error:
        raise checks.FieldError(key, f"cannot read {path.name!r}: {error.strerror}") from None
    try:
        secret = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        secret = b""
    if len(secret) != KEY_BYTES:
        raise checks.FieldError(key, f"{path.name} does not hold a {KEY_BYTES}-byte key in hex")
    Signer(secret)  # any 32 bytes are an Ed25519 private key; this checks the library agrees
    return secret
