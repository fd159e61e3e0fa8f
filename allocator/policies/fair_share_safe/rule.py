"""fair-share-safe's rule: max-min fair over the demands, and never more than the residual heard."""

from __future__ import annotations

import numpy as np

from allocator.policies.chunks import RuleChunk
from allocator.policies.fair_share_safe.safe_settings import SafeSettings
from allocator.policies.hooks import OWN
from allocator.policies.rows import row_sum
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


def own_safe_limit(
    pool: np.ndarray, fair_share: np.ndarray, counted: np.ndarray, present: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """([G], [G]) slot `OWN`'s split by `safe_max_min_fair_share` and its limit after `chunks.finish`, from the
    max-min fair shares of the pool the hooks computed already (`fair_share [G, K]`, over the wants the rule reads):
    the rule computes every broker's row of a [B, g] chunk, of which a broker keeps its own, and its water level is
    the one of the fair shares (where the pool is bounded). `pool [G]` (`np.inf`: unlimited), `counted` and
    `present` [G, K] as the hooks hand them to the rule; the numbers are the rule's and `finish`'s, operation for
    operation (a test holds them to it). fair-share-safe's settings have no shaping knob, so `finish` only clamps."""
    unlimited = ~np.isfinite(pool)
    quota = np.where(unlimited, 0.0, pool)  # as the rule computes (`checked_inputs`)
    share = np.where(unlimited, 0.0, fair_share[:, OWN])  # its water level over a quota of 0: 0
    usage = counted if present.all() else np.where(present, counted, 0.0)  # an absent entry reads as 0
    residual_heard = usage[:, OWN] + (quota - row_sum(usage))
    split = np.minimum(share, np.maximum(residual_heard, 0.0))
    limit = np.minimum(split, quota) * present[:, OWN]
    limit[unlimited & present[:, OWN]] = np.inf
    return split, limit
