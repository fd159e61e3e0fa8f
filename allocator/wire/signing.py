"""Per-broker signing keys: each broker signs its reports with its own Ed25519 private key, and a receiver checks
a report with the public key of the broker the report names, so a key holder can sign only as itself.

Why Ed25519 and not per-broker HMAC keys: with HMAC a receiver needs the sender's secret to check it, so every
broker would hold every other broker's key and could sign as any of them (the flaw of a shared key, issue 11).
A public key proves nothing but lets anyone check; a leaked private key speaks for one broker only. The cost is
measured by `benchmarks/bench_codec.py` against HMAC in the same run (README, "Keys and adversaries").

Keys are raw 32-byte values (RFC 8032), stored hex-encoded one per file: `<broker>.key` (private, mode 0600)
and `<broker>.pub` (public) in a key directory; `write_key_directory` makes one. Loading checks every key once,
where the scenario is read; below that, `Signer` and `PublicKeys` hold parsed keys.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

KEY_BYTES = 32
SIGNATURE_BYTES = 64
PRIVATE_SUFFIX, PUBLIC_SUFFIX = ".key", ".pub"

__all__ = [
    "KEY_BYTES",
    "SIGNATURE_BYTES",
    "PublicKeys",
    "Signer",
    "private_key_bytes",
    "public_key_bytes",
    "write_key_directory",
]


class Signer:
    """One broker's private key: signs messages as that broker. Its repr never shows the key."""

    def __init__(self, private_key: bytes) -> None:
        self._key = Ed25519PrivateKey.from_private_bytes(_raw(private_key, "private key"))

    def __repr__(self) -> str:
        return "Signer(<secret>)"

    def __reduce__(self) -> tuple:  # Ray ships a signer to the host of its broker only
        return (Signer, (private_key_bytes(self._key),))

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)

    def public_key(self) -> bytes:
        return public_key_bytes(self._key)


class PublicKeys:
    """Broker name -> public key: what every receiver checks signatures with (nothing secret)."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        self._raw = {broker: _raw(key, f"public key of {broker!r}") for broker, key in keys.items()}
        self._keys = {broker: Ed25519PublicKey.from_public_bytes(key) for broker, key in self._raw.items()}

    def __repr__(self) -> str:
        return f"PublicKeys({sorted(self._keys)})"

    def __reduce__(self) -> tuple:
        return (PublicKeys, (self._raw,))

    def __contains__(self, broker: object) -> bool:
        return broker in self._keys

    def verify(self, broker: str, signature: bytes, message: bytes) -> bool:
        """True if `signature` is `broker`'s over `message`; False for a bad signature or an unknown broker."""
        key = self._keys.get(broker)
        if key is None:
            return False
        try:
            key.verify(signature, message)
        except InvalidSignature:
            return False
        return True


def private_key_bytes(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def public_key_bytes(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def write_key_directory(directory: Path, brokers: Iterable[str]) -> list[Path]:
    """A fresh key pair per broker in `directory` (created mode 0700 if needed): `<broker>.key` (hex, mode 0600)
    and `<broker>.pub` (hex, mode 0644), whatever the umask. Refuses to overwrite an existing key
    (FileExistsError). Returns the files written."""
    if not directory.is_dir():  # an existing directory is the user's: its mode is checked where keys are read
        directory.mkdir(mode=0o700, parents=True)
    written = []
    for broker in brokers:
        key = Ed25519PrivateKey.generate()
        private_path, public_path = directory / f"{broker}{PRIVATE_SUFFIX}", directory / f"{broker}{PUBLIC_SUFFIX}"
        _write_new(private_path, private_key_bytes(key).hex() + "\n", 0o600)
        _write_new(public_path, public_key_bytes(key).hex() + "\n", 0o644)
        written += [private_path, public_path]
    return written


def _write_new(path: Path, text: str, mode: int) -> None:
    """Create `path` (never over an existing file) with exactly `mode` (not as the umask cuts it), before a byte
    is written."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(descriptor, "w") as file:
        os.fchmod(descriptor, mode)
        file.write(text)


def _raw(key: bytes, what: str) -> bytes:
    if not isinstance(key, bytes) or len(key) != KEY_BYTES:
        raise ValueError(f"{what} must be {KEY_BYTES} raw bytes")
    return key
