"""fair-share-safe's rule: max-min fair over the demands, and never more than the residual heard."""

from __future__ import annotations

import numpy as np

from allocator.policies.chunks import RuleChunk
from allocator.policies.fair_share_safe.safe_settings import SafeSettings
from allocator.policies.rules import max_min_fair_share
from allocator.policies.scratch import scratch


def safe_max_min_fair_share(chunk: RuleChunk, settings: SafeSettings) -> np.ndarray:
    """Max-min fair share that never takes what the others still use.

    "Fair" is max-min, as in `max_min_fair_share`: a broker wanting less than the water level gets what it
    wants, the others the level. "Safe" is that a broker raises its limit only into room the others have left:
    its limit is also at most the residual it hears, `usage + quota - sum(everyone's usage)` (at least 0). The
    brokers above their new share step down at once, the ones below step up a round later, into the room that
    has been freed. Over quota every broker cuts by the whole excess: the group falls under the quota at once.
    The limits computed from one chunk add up to at most the quota (margin 0).

    The usages it reads are the ones the hooks count (`counting.counted_usage`): a peer's usage as heard, a
    listed peer never heard at its fair share, a stale or excessive claim no higher than the peer can be
    known to hold.
    """
    share = max_min_fair_share(chunk, settings)
    residual_heard = np.add(chunk.usage, chunk.residual, out=scratch("residual_heard", chunk.shape))
    np.maximum(residual_heard, 0.0, out=residual_heard)
    return np.minimum(share, residual_heard, out=share)
