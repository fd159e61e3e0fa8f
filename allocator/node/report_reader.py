"""What a broker reads each round: its peers' payloads decoded in the cluster's wire (`NodeSettings.wire`).

`quotalab` is `allocator.wire.codec` (versioned msgpack, checked against the keys); `pulsar` is Pulsar's own
`ResourceUsageInfo` (`allocator.wire.pulsar.reader`, which stands in for what that format does not carry).
Either way the outcome is the `ReportBatch` the usage table merges and how many payloads were refused: those
that failed to decode or validate, and those of a broker or an incarnation the membership registry did not issue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from allocator.node.node_settings import NodeSettings
from allocator.wire.codec import MAX_REPORT_BYTES, decode_batch
from allocator.wire.pulsar.reader import PulsarReader
from allocator.wire.report_fields import ReportError
from allocator.wire.usage_report import ReportBatch


@dataclass
class Inbox:
    """What became of the reports a broker received, counted by outcome."""

    accepted: int = 0
    rejected: int = 0  # failed to decode or validate, or from an incarnation the registry did not issue
    discarded: int = 0  # valid, but too old or new, from an old incarnation, a duplicate, a sequence jump, or own


class ReportReader:
    """Decodes one broker's inbox in `settings.wire`. Pulsar's reports name groups: `group_names` (group id ->
    name, this broker's groups) is required with `wire: pulsar`."""

    def __init__(
        self, settings: NodeSettings, *, group_names: Mapping[int, str] | None, known_brokers: set[str] | None
    ) -> None:
        self.settings = settings
        self.known_brokers = known_brokers
        self._pulsar: PulsarReader | None = None
        if settings.wire == "pulsar":
            if group_names is None:
                raise ValueError("wire pulsar: reports name their groups, so a broker needs group_names")
            ids_by_name = {name: group_id for group_id, name in group_names.items()}
            self._pulsar = PulsarReader(
                settings.dimensions,
                settings.interval_s,
                ids_by_name,
                known_brokers=known_brokers,
                max_bytes=MAX_REPORT_BYTES,
            )

    def decode(
        self, payloads: Sequence[bytes], now_s: float, issued: Mapping[str, int] | None = None
    ) -> tuple[ReportBatch, int, np.ndarray]:
        """The valid reports as one batch, how many payloads were refused, and the position in `payloads` of each
        report of the batch. With `issued` (broker -> the highest incarnation the registry issued it), a report of
        a broker or an incarnation it did not issue is refused."""
        batch, errors = self._decoded(payloads, now_s, issued)
        positions = np.delete(np.arange(len(payloads), dtype=np.int64), list(errors))
        if self._pulsar is not None:  # it reads the last arrived first
            positions = positions[::-1]
        if issued is None or not len(batch):
            return batch, len(errors), positions
        credible = np.array(
            [inc <= issued.get(b, -1) for b, inc in zip(batch.brokers, batch.incarnation, strict=True)], dtype=bool
        )
        return batch.select(credible), len(errors) + int((~credible).sum()), positions[credible]

    def _decoded(
        self, payloads: Sequence[bytes], now_s: float, issued: Mapping[str, int] | None
    ) -> tuple[ReportBatch, dict[int, ReportError]]:
        if self._pulsar is not None:
            return self._pulsar.decode(payloads, now_s, issued)
        return decode_batch(
            payloads,
            self.settings.dimensions,
            key=self.settings.hmac_key,
            public_keys=self.settings.public_keys,
            known_brokers=self.known_brokers,
        )
