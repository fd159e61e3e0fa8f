"""The envelope around a report's body: format version, flags, optional zlib compression and a signature.

`seal` wraps a packed body: compressed if the flags say so, then signed with the cluster's key (HMAC-SHA256) or
the broker's own Ed25519 key. `parse_envelope`, `decompress_body`, `hmac_signature` and `signed_message` are
what `allocator.wire.codec` opens one with. The layout and what each flag means: docs/design.md, "Wire format".
"""

from __future__ import annotations

import hashlib
import hmac
import zlib
from typing import Any

import msgpack

from allocator.wire.report_fields import ReportError, int_field, type_name
from allocator.wire.signing import SIGNATURE_BYTES as ED25519_SIGNATURE_BYTES
from allocator.wire.signing import PublicKeys, Signer

FORMAT_VERSION = 2
"""2: the body names its dimensions by code (`report_fields.DIMENSIONS`), not by name (1). A broker reads its own
version only, so a cluster changes version all at once (a report of the other version is refused and counted)."""

COMPRESSED = 0x1
FLOAT32 = 0x2
ED25519 = 0x4
SIGNATURE_BYTES = hashlib.sha256().digest_size

_KNOWN_FLAGS = COMPRESSED | FLOAT32 | ED25519
_MAC_TAG = b"quotalab/usage-report"
_ZLIB_LEVEL = 1  # level 6 is 3-7x slower here for ~25% fewer bytes on rates; random floats barely compress


def envelope_flags(*, compress: bool, float32: bool, signer: Signer | None) -> int:
    """The flags an envelope carries for these encoding options."""
    return (COMPRESSED if compress else 0) | (FLOAT32 if float32 else 0) | (ED25519 if signer is not None else 0)


def seal(packer: msgpack.Packer, body: bytes, *, key: bytes | None, signer: Signer | None, flags: int) -> bytes:
    """The envelope around a packed body: compressed if `flags` say so, then signed with `key` or `signer`."""
    if flags & COMPRESSED:
        body = zlib.compress(body, _ZLIB_LEVEL)
    envelope: list[Any] = [FORMAT_VERSION, flags, body]
    if key is not None:
        envelope.append(hmac_signature(key, FORMAT_VERSION, flags, body))
    elif signer is not None:
        envelope.append(signer.sign(signed_message(FORMAT_VERSION, flags, body)))
    return packer.pack(envelope)


def hmac_signature(key: bytes, version: int, flags: int, body: bytes) -> bytes:
    mac = hmac.new(key, _MAC_TAG, hashlib.sha256)
    mac.update(bytes((version, flags)))
    mac.update(body)
    return mac.digest()


def signed_message(version: int, flags: int, body: bytes) -> bytes:
    """What an Ed25519 signature covers: the domain tag, version and flags, and the SHA-256 digest of the body.

    Ed25519 hashes its message twice to sign it (SHA-512) and once to check it; over a digest it does so on 65
    bytes, so the body is read once, by SHA-256, as for the HMAC (~4x less for a 340 kB report)."""
    return b"".join((_MAC_TAG, bytes((version, flags)), hashlib.sha256(body).digest()))


def check_key(key: bytes | None, signer: Signer | None = None, public_keys: PublicKeys | None = None) -> None:
    """A key of the wrong type, an empty one, or a cluster key together with a per-broker one, is the caller's
    configuration mistake: `TypeError`."""
    if key is not None and (not isinstance(key, bytes) or not key):
        raise TypeError(f"key must be non-empty bytes or None, got {type_name(key) if key else 'empty bytes'}")
    if signer is not None and not isinstance(signer, Signer):
        raise TypeError(f"signer must be an allocator.wire.signing.Signer, got {type_name(signer)}")
    if public_keys is not None and not isinstance(public_keys, PublicKeys):
        raise TypeError(f"public_keys must be allocator.wire.signing.PublicKeys, got {type_name(public_keys)}")
    if key is not None and (signer is not None or public_keys is not None):
        raise TypeError("give the cluster key (HMAC) or per-broker keys (Ed25519), not both")


def parse_envelope(envelope: Any) -> tuple[int, bytes, bytes | None]:
    """Check the envelope; returns `(flags, body, signature or None)`. The version is checked first."""
    if not isinstance(envelope, list):
        raise ReportError(f"envelope is {type_name(envelope)}, not an array")
    if not envelope:
        raise ReportError("envelope is empty")
    version = int_field(envelope[0], "version")
    if version != FORMAT_VERSION:
        raise ReportError(f"version {version} not supported (this broker reads version {FORMAT_VERSION})")
    if len(envelope) not in (3, 4):
        raise ReportError(f"envelope has {len(envelope)} items, not 3 or 4")
    flags = int_field(envelope[1], "flags")
    if flags & ~_KNOWN_FLAGS:
        raise ReportError(f"unknown flags {flags:#x}")
    body = envelope[2]
    if not isinstance(body, bytes):
        raise ReportError(f"body is {type_name(body)}, not bytes")
    signature = envelope[3] if len(envelope) == 4 else None
    if signature is not None:
        if not isinstance(signature, bytes):
            raise ReportError(f"signature is {type_name(signature)}, not bytes")
        expected = ED25519_SIGNATURE_BYTES if flags & ED25519 else SIGNATURE_BYTES
        if len(signature) != expected:
            raise ReportError(f"signature is {len(signature)} bytes, not {expected}")
    return flags, body, signature


def decompress_body(body: bytes, max_bytes: int) -> bytes:
    """Inflate at most `max_bytes` (+1 to notice the excess), so a zip bomb costs no more than that."""
    inflater = zlib.decompressobj()
    try:
        plain = inflater.decompress(body, max_bytes + 1)
    except zlib.error as error:
        raise ReportError("body does not decompress") from error
    if len(plain) > max_bytes:
        raise ReportError(f"body decompresses to over {max_bytes} bytes")
    if not inflater.eof:
        raise ReportError("compressed body is truncated")
    if inflater.unused_data:
        raise ReportError("data after the compressed body")
    return plain
