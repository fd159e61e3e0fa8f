"""Per-broker Ed25519 keys: a report is checked with the public key of the broker it names, so a key signs only
as its own broker; decoding with public keys still raises nothing but `ReportError` on any input."""

from __future__ import annotations

import os
import stat

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.wire.codec import ReportError, decode_batch, decode_report, encode_report
from allocator.wire.envelope import ED25519
from allocator.wire.signing import PublicKeys, Signer, write_key_directory
from allocator.wire.usage_report import UsageReport
from tests.allocator.test_codec import (
    FLOAT32_MAX,
    decode_or_report_error,
    make_report,
    mutate,
    mutations,
    usage_reports,
)

SIGNERS = {name: Signer(os.urandom(32)) for name in ("broker-1", "broker-2")}
PUBLIC = PublicKeys({name: signer.public_key() for name, signer in SIGNERS.items()})


def as_broker(report: UsageReport, broker: str) -> UsageReport:
    return UsageReport(**{**report.__dict__, "broker": broker})


def test_a_report_signed_by_its_broker_is_accepted_and_flagged() -> None:
    report = make_report()
    data = encode_report(report, signer=SIGNERS[report.broker], compress=True)
    assert decode_report(data, public_keys=PUBLIC) == report
    assert decode_report(data).broker == report.broker  # without keys nothing is checked


def test_a_key_holder_cannot_sign_as_another_broker() -> None:
    forged = as_broker(make_report(), "broker-2")
    data = encode_report(forged, signer=SIGNERS["broker-1"])  # broker-1's own key, broker-2's name
    with pytest.raises(ReportError, match="bad signature for broker 'broker-2'"):
        decode_report(data, public_keys=PUBLIC)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({}, "report is not signed"),
        ({"key": b"cluster-key"}, "signed with HMAC, not the key expected"),
    ],
)
def test_unsigned_or_hmac_reports_are_refused_when_public_keys_are_expected(kwargs: dict, reason: str) -> None:
    with pytest.raises(ReportError, match=reason):
        decode_report(encode_report(make_report(), **kwargs), public_keys=PUBLIC)


def test_an_ed25519_report_is_refused_where_the_cluster_key_is_expected() -> None:
    data = encode_report(make_report(), signer=SIGNERS["broker-1"])
    with pytest.raises(ReportError, match="signed with Ed25519"):
        decode_report(data, key=b"cluster-key")


def test_a_broker_without_a_public_key_is_refused() -> None:
    stranger = Signer(os.urandom(32))
    data = encode_report(as_broker(make_report(), "broker-9"), signer=stranger)
    with pytest.raises(ReportError, match="bad signature for broker 'broker-9'"):
        decode_report(data, public_keys=PUBLIC)


def test_every_signed_byte_matters() -> None:
    data = bytearray(encode_report(make_report(), signer=SIGNERS["broker-1"]))
    for position in range(len(data)):
        data[position] ^= 0x01
        with pytest.raises(ReportError):
            decode_report(bytes(data), public_keys=PUBLIC)
        data[position] ^= 0x01


def test_a_batch_keeps_the_honest_reports_and_names_the_forged_one() -> None:
    report = make_report()
    honest = encode_report(report, signer=SIGNERS["broker-1"])
    forged = encode_report(as_broker(report, "broker-2"), signer=SIGNERS["broker-1"])
    batch, rejected = decode_batch([honest, forged], report.dimensions, public_keys=PUBLIC)
    assert batch.brokers == ["broker-1"] and list(rejected) == [1]


def test_cluster_and_per_broker_keys_together_are_a_configuration_error() -> None:
    with pytest.raises(TypeError, match="not both"):
        encode_report(make_report(), key=b"k", signer=SIGNERS["broker-1"])
    with pytest.raises(TypeError, match="PublicKeys"):
        decode_report(b"", public_keys={"broker-1": b"x" * 32})  # type: ignore[arg-type]


def test_keys_never_show_in_a_repr() -> None:
    signer = Signer(bytes(range(32)))
    assert bytes(range(32)).hex() not in repr(signer) and "secret" in repr(signer)


def test_a_key_directory_holds_a_private_key_per_broker_readable_by_its_owner_only(tmp_path) -> None:
    written = write_key_directory(tmp_path, ["broker-1", "broker-2"])
    assert sorted(path.name for path in written) == ["broker-1.key", "broker-1.pub", "broker-2.key", "broker-2.pub"]
    assert stat.S_IMODE((tmp_path / "broker-1.key").stat().st_mode) == 0o600
    signer = Signer(bytes.fromhex((tmp_path / "broker-1.key").read_text()))
    assert signer.public_key() == bytes.fromhex((tmp_path / "broker-1.pub").read_text())
    with pytest.raises(FileExistsError):
        write_key_directory(tmp_path, ["broker-1"])


def test_the_flag_is_set_only_by_a_signer() -> None:
    assert msgpack.unpackb(encode_report(make_report(), signer=SIGNERS["broker-1"]))[1] & ED25519
    assert not msgpack.unpackb(encode_report(make_report(), key=b"k"))[1] & ED25519


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(usage_reports(max_rate=FLOAT32_MAX), st.booleans(), st.lists(mutations, min_size=1, max_size=4))
def test_mutated_signed_reports_raise_only_report_error(report: UsageReport, compress: bool, steps) -> None:
    report = as_broker(report, "broker-1")
    data = mutate(encode_report(report, signer=SIGNERS["broker-1"], compress=compress), steps)
    decoded = decode_or_report_error(data, public_keys=PUBLIC)
    if decoded is not None:  # a signed report either fails or is the one that was signed
        assert decoded == report


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_report_error(data: bytes) -> None:
    decode_or_report_error(data, public_keys=PUBLIC)
