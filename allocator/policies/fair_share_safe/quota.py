"""What a quota change does to fair-share-safe's limits: they scale with it at once (and `SafeHooks.quota_changed`
keeps each at most its broker's fair share of the new quota)."""

from __future__ import annotations

import numpy as np


def ratio(old_quota: np.ndarray, new_quota: np.ndarray) -> np.ndarray:
    """[G, D] `new / old` where both quotas are finite and the old one positive, else 1."""
    scalable = np.isfinite(old_quota) & (old_quota > 0) & np.isfinite(new_quota)
    return np.divide(new_quota, old_quota, out=np.ones_like(new_quota), where=scalable)


def rescaled(
    old_quota: np.ndarray, new_quota: np.ndarray, limit: np.ndarray, brokers_in_view: np.ndarray
) -> np.ndarray:
    """[G, D] the limits scaled by `new / old` quota, so that after a cut they add up to at most the new quota
    the round it takes effect (the references keep the old limits for a round): kept where the old quota was 0,
    unlimited where the new one is, an equal share of the brokers in view where the old one was unlimited."""
    equal_share = new_quota / np.maximum(brokers_in_view, 1)[:, None]
    scaled = np.where(np.isfinite(old_quota), limit * ratio(old_quota, new_quota), equal_share)
    return np.where(np.isfinite(new_quota), scaled, np.inf)
