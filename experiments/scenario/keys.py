"""Per-broker keys of a scenario: read once, when it loads, from a key directory (`reporting.key_dir`).

The directory holds `<broker>.key` for every broker of the scenario: its Ed25519 private key, 32 bytes in hex
(`quotalab keys --out DIR --brokers ...` writes one, see `allocator.wire.signing.write_key_directory`). A missing,
unreadable or malformed key, or one its group or others may read, is one line naming `reporting.key_dir` and the
file; a key is never echoed.
"""

from __future__ import annotations

import stat
from collections.abc import Sequence
from pathlib import Path

from allocator.wire.signing import KEY_BYTES, PRIVATE_SUFFIX, Signer
from experiments import checks
from experiments.scenario.spec import Scenario
from experiments.user_files import UnreadableFileError, read_capped

MAX_KEY_FILE_BYTES = 1024

SHARED_KEY_WARNING = (
    "reports are signed with one cluster key (reporting.hmac_key_*): whoever holds it can sign reports as any "
    "broker and move every broker's limits; per-broker keys (reporting.key_dir, written by "
    "`quotalab keys --scenario FILE --out DIR`) let a key speak for its own broker only"
)


def shared_key_warning(scenario: Scenario) -> str | None:
    """The warning a run signed with the cluster's shared HMAC key prints once when it starts, or None."""
    return SHARED_KEY_WARNING if scenario.reporting.hmac_key is not None else None


def broker_keys(directory: Path, key: str, brokers: Sequence[str]) -> dict[str, bytes]:
    """broker -> its private key (raw bytes) from `directory`; `checks.FieldError` naming `key` otherwise."""
    if not directory.is_dir():
        raise checks.FieldError(key, f"no such directory {str(directory)!r}")
    problem = directory_problem(directory)
    if problem:
        raise checks.FieldError(key, problem)
    for broker in brokers:  # a name with a '/' or '..' would read a key outside the directory
        try:
            checks.file_name(broker, key)
        except checks.FieldError:
            problem = "cannot name a key file (at most 100 letters, digits, '.', '_' or '-')"
            raise checks.FieldError(key, f"broker {checks.show(broker)} {problem}") from None
    return {broker: _private_key(directory / f"{broker}{PRIVATE_SUFFIX}", key) for broker in brokers}


def directory_problem(directory: Path) -> str | None:
    """Why keys in the existing `directory` are not safe, or None: others may write in it, so they could swap
    a broker's key for one they know (a sticky directory such as /tmp lets no one replace another's file)."""
    mode = directory.stat().st_mode
    if mode & 0o022 and not mode & stat.S_ISVTX:
        permissions = f"{stat.S_IMODE(mode):04o}"
        return f"others may replace the keys in {str(directory)!r} (mode {permissions}): run chmod 700 {directory}"
    return None


def _private_key(path: Path, key: str) -> bytes:
    try:
        text = read_capped(path, MAX_KEY_FILE_BYTES, secret=True).strip()
    except UnreadableFileError as problem:
        if str(problem) == "no such file":
            raise checks.FieldError(key, f"no key file {path.name!r} in {str(path.parent)!r}") from None
        raise checks.FieldError(key, f"{path.name}: {problem}") from None
    try:
        secret = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        secret = b""
    if len(secret) != KEY_BYTES:
        raise checks.FieldError(key, f"{path.name} does not hold a {KEY_BYTES}-byte key in hex")
    Signer(secret)  # any 32 bytes are an Ed25519 private key; this checks the library agrees
    return secret
