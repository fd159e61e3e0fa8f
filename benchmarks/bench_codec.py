"""How many bytes does a usage report cost per group, and how fast are `encode_report` / `decode_report`?

Reports are PIP-82 sized: 5,000 groups per broker, ids drawn from a catalogue of 100,000 namespaces (so
group ids travel as 4-byte integers), 80-byte group names in the dictionary. Rates are what a broker would
measure: admitted message counts (Poisson around a log-normal per-group rate) divided by the interval. With a
1 s interval they are whole numbers, which zlib squeezes well; with PIP-82's 60 s interval they are
fractions whose float64 mantissas barely compress. Uncompressed size does not depend on the values.

Sizes: bytes per group entry (whole report / groups, the fixed header included) for 1, 2 and 4 dimensions,
with and without demand and the dictionary, uncompressed, zlib-compressed, and uncompressed with float32 rates.
Speed: encode and decode of one 5,000-group report, best of `repeats` runs, as reports/s and group entries/s, for a
few configurations.
Signing: the signature alone of that report (4 dimensions with demand), made and checked, with the broker's own
Ed25519 key (`allocator.wire.signing`) against the cluster's HMAC-SHA256 key, in the same run (target: < 1 ms each).

Run from the repository root: `python -m benchmarks.bench_codec` (prints tables, writes
`benchmarks/results/codec.json`).
"""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Callable

import msgpack
import numpy as np

from allocator.wire import envelope
from allocator.wire.codec import decode_report, encode_report
from allocator.wire.report_fields import DIMENSIONS
from allocator.wire.signing import PublicKeys, Signer
from allocator.wire.usage_report import UsageReport
from benchmarks.common import command_line, environment, results_path, save_results

RESULTS = results_path("codec")
GROUPS = 5_000
CATALOGUE = 100_000
NAME_BYTES = 80
KEY = b"benchmark-cluster-key"
SIGNER = Signer(os.urandom(32))
PUBLIC_KEYS = PublicKeys({"broker-042": SIGNER.public_key()})
PIP82_BROKERS = 100


def make_report(
    groups: int, n_dimensions: int, interval_s: int, *, demand: bool, dictionary: bool, seed: int = 82
) -> UsageReport:
    """A report as a broker would send it: rates are admitted counts over the interval."""
    rng = np.random.default_rng(seed)
    group_ids = rng.choice(CATALOGUE, groups, replace=False).astype(np.int64)
    mean_rates = rng.lognormal(mean=4.0, sigma=1.5, size=(groups, n_dimensions))
    usage = rng.poisson(mean_rates * interval_s) / interval_s
    wanted = (rng.poisson(mean_rates * 1.2 * interval_s) / interval_s) if demand else None
    names = (
        {int(g): f"tenant-{g // 100:04d}/namespace-{g:06d}/".ljust(NAME_BYTES, "-") for g in group_ids}
        if dictionary
        else None
    )
    return UsageReport(
        broker="broker-042",
        incarnation=3,
        seq=1_234,
        sent_at_ms=1_700_000_000_000,
        interval_ms=interval_s * 1000,
        dimensions=DIMENSIONS[:n_dimensions],
        group_ids=group_ids,
        usage=usage,
        demand=wanted,
        dictionary=names,
    )


def sizes(groups: int = GROUPS) -> list[dict]:
    """Bytes per group entry over dimensions x demand x dictionary, plain, compressed and with float32 rates."""
    rows = []
    for n_dimensions in (1, 2, 4):
        for demand in (False, True):
            for dictionary in (False, True):
                row: dict = {"dimensions": n_dimensions, "demand": demand, "dictionary": dictionary}
                for interval_s in (1, 60):
                    report = make_report(groups, n_dimensions, interval_s, demand=demand, dictionary=dictionary)
                    if interval_s == 1:
                        row["plain_bytes_per_group"] = len(encode_report(report)) / groups
                        row["float32_bytes_per_group"] = len(encode_report(report, float32=True)) / groups
                    row[f"zlib_{interval_s}s_bytes_per_group"] = len(encode_report(report, compress=True)) / groups
                rows.append(row)
    return rows


def _best_seconds(call: Callable[[], object], repeats: int, min_seconds: float = 0.2) -> float:
    """Best mean time per call over `repeats` batches, each long enough to time reliably."""
    call()
    start = time.perf_counter()
    call()
    batch = max(1, int(min_seconds / max(time.perf_counter() - start, 1e-9)))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(batch):
            call()
        best = min(best, (time.perf_counter() - start) / batch)
    return best


SPEED_CASES: dict[str, dict] = {
    "1 dim": {"n_dimensions": 1},
    "4 dims": {"n_dimensions": 4},
    "4 dims + demand": {"n_dimensions": 4, "demand": True},
    "4 dims + demand, signed": {"n_dimensions": 4, "demand": True, "key": KEY},
    "4 dims + demand, Ed25519": {"n_dimensions": 4, "demand": True, "signer": SIGNER},
    "4 dims + demand, float32": {"n_dimensions": 4, "demand": True, "float32": True},
    "4 dims + demand, zlib (1 s rates)": {"n_dimensions": 4, "demand": True, "compress": True},
    "4 dims + demand, zlib (60 s rates)": {"n_dimensions": 4, "demand": True, "compress": True, "interval_s": 60},
    "4 dims + demand + dictionary, signed": {"n_dimensions": 4, "demand": True, "dictionary": True, "key": KEY},
}


def speeds(groups: int = GROUPS, repeats: int = 5) -> list[dict]:
    """Encode and decode time of one report of `groups` groups for each of `SPEED_CASES`."""
    rows = []
    for name, case in SPEED_CASES.items():
        key, compress, float32 = case.get("key"), case.get("compress", False), case.get("float32", False)
        signer = case.get("signer")
        public_keys = PUBLIC_KEYS if signer is not None else None
        report = make_report(
            groups,
            case["n_dimensions"],
            case.get("interval_s", 1),
            demand=case.get("demand", False),
            dictionary=case.get("dictionary", False),
        )
        options = {"key": key, "signer": signer, "compress": compress, "float32": float32}
        data = encode_report(report, **options)
        if decode_report(data, key=key, public_keys=public_keys) != report:  # 1 s rates are whole: float32 holds them
            raise RuntimeError(f"{name}: the report did not survive the round trip")
        encode_s = _best_seconds(lambda r=report, o=options: encode_report(r, **o), repeats)
        decode_s = _best_seconds(lambda d=data, k=key, p=public_keys: decode_report(d, key=k, public_keys=p), repeats)
        rows.append(
            {
                "case": name,
                "groups": groups,
                "bytes": len(data),
                "encode_us": encode_s * 1e6,
                "decode_us": decode_s * 1e6,
                "encode_reports_per_s": 1 / encode_s,
                "decode_reports_per_s": 1 / decode_s,
                "encode_groups_per_s": groups / encode_s,
                "decode_groups_per_s": groups / decode_s,
            }
        )
    return rows


def signing(groups: int = GROUPS, repeats: int = 5) -> list[dict]:
    """Make and check the signature of one report (1 dimension; 4 with demand): Ed25519 with the broker's own key
    against HMAC-SHA256 with the cluster key, over the same body bytes, in the same run."""
    rows = []
    flags = 0
    for n_dimensions, demand in ((1, False), (4, True)):
        report = make_report(groups, n_dimensions, 1, demand=demand, dictionary=False)
        body = msgpack.unpackb(encode_report(report))[2]  # the body bytes a signature covers
        signature = SIGNER.sign(envelope.signed_message(envelope.FORMAT_VERSION, flags, body))
        mac = envelope.hmac_signature(KEY, envelope.FORMAT_VERSION, flags, body)
        timings = {
            "hmac_sign_us": lambda b=body: envelope.hmac_signature(KEY, envelope.FORMAT_VERSION, flags, b),
            "hmac_verify_us": lambda b=body, m=mac: hmac.compare_digest(
                m, envelope.hmac_signature(KEY, envelope.FORMAT_VERSION, flags, b)
            ),
            "ed25519_sign_us": lambda b=body: SIGNER.sign(envelope.signed_message(envelope.FORMAT_VERSION, flags, b)),
            "ed25519_verify_us": lambda b=body, s=signature: PUBLIC_KEYS.verify(
                "broker-042", s, envelope.signed_message(envelope.FORMAT_VERSION, flags, b)
            ),
        }
        if not timings["ed25519_verify_us"]():
            raise RuntimeError("the Ed25519 signature does not verify")
        row: dict = {"groups": groups, "dimensions": n_dimensions, "demand": demand, "body_bytes": len(body)}
        for name, call in timings.items():
            row[name] = _best_seconds(call, repeats) * 1e6
        row["sign_ratio"] = row["ed25519_sign_us"] / row["hmac_sign_us"]
        row["verify_ratio"] = row["ed25519_verify_us"] / row["hmac_verify_us"]
        rows.append(row)
    return rows


def run(groups: int = GROUPS, repeats: int = 5) -> dict:
    """Sizes and speeds; `pip82_round` scales the 2-dimension report to PIP-82's 100 brokers all hearing all."""
    size_rows = sizes(groups)
    publish_only = next(r for r in size_rows if r["dimensions"] == 2 and not r["demand"] and not r["dictionary"])
    report_bytes = publish_only["plain_bytes_per_group"] * groups
    return {
        "groups": groups,
        "catalogue": CATALOGUE,
        "sizes": size_rows,
        "speeds": speeds(groups, repeats),
        "signing": signing(groups, repeats),
        "pip82_round": {
            "brokers": PIP82_BROKERS,
            "report_bytes": report_bytes,
            "published_bytes": report_bytes * PIP82_BROKERS,
            "delivered_bytes": report_bytes * PIP82_BROKERS * (PIP82_BROKERS - 1),
        },
        "repeats": repeats,
        **environment("numpy", "msgpack", "cryptography"),
    }


def _table(result: dict) -> str:
    lines = [
        f"bytes per group entry, {result['groups']:,} groups (ids from {result['catalogue']:,})",
        f"{'dims':>4} {'demand':>6} {'dictionary':>10} {'plain':>8} {'zlib 1 s':>9} {'zlib 60 s':>10} {'float32':>8}",
    ]
    for row in result["sizes"]:
        lines.append(
            f"{row['dimensions']:>4} {'yes' if row['demand'] else 'no':>6} {'yes' if row['dictionary'] else 'no':>10}"
            f" {row['plain_bytes_per_group']:>8.1f} {row['zlib_1s_bytes_per_group']:>9.1f}"
            f" {row['zlib_60s_bytes_per_group']:>10.1f} {row['float32_bytes_per_group']:>8.1f}"
        )
    lines.append("")
    lines.append(
        f"{'case':<38} {'bytes':>9} {'encode us':>10} {'decode us':>10} {'enc reports/s':>14}"
        f" {'dec reports/s':>14} {'enc groups/s':>13} {'dec groups/s':>13}"
    )
    for row in result["speeds"]:
        lines.append(
            f"{row['case']:<38} {row['bytes']:>9,} {row['encode_us']:>10.0f} {row['decode_us']:>10.0f}"
            f" {row['encode_reports_per_s']:>14,.0f} {row['decode_reports_per_s']:>14,.0f}"
            f" {row['encode_groups_per_s']:>13.3g} {row['decode_groups_per_s']:>13.3g}"
        )
    lines.append("")
    for sign in result["signing"]:
        lines.append(
            f"signature, {sign['groups']:,} groups x {sign['dimensions']} dims ({sign['body_bytes'] / 1e3:.0f} kB):"
            f" Ed25519 sign {sign['ed25519_sign_us']:.0f} us, verify {sign['ed25519_verify_us']:.0f} us;"
            f" HMAC-SHA256 sign {sign['hmac_sign_us']:.0f} us, verify {sign['hmac_verify_us']:.0f} us"
            f" (Ed25519 / HMAC: {sign['sign_ratio']:.1f}x sign, {sign['verify_ratio']:.1f}x verify)"
        )
    pip82 = result["pip82_round"]
    lines.append("")
    lines.append(
        f"PIP-82 round ({pip82['brokers']} brokers, 2 dims, plain): {pip82['report_bytes'] / 1e3:.0f} kB a report,"
        f" {pip82['published_bytes'] / 1e6:.1f} MB published, {pip82['delivered_bytes'] / 1e9:.2f} GB delivered"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    command_line(__doc__).parse_args()
    result = run()
    save_results(RESULTS, result, f"Python {result['python']}, best of {result['repeats']}", _table(result))
