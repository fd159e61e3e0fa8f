"""One broker's validated view of the usage table, and the post-processing shared by every policy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from allocator.policies.settings import Settings


@dataclass(frozen=True)
class View:
    """The arrays a rule reads, checked and masked: absent entries hold 0 in `usage` and `demand`.

    `quota` is 0 for unlimited groups so that rules compute quietly; `finish` marks those groups -1.
    `limited` says where a present broker's own limit is a finite non-negative number (a negative or infinite
    limit is the "was unlimited" marker, so it neither throttles nor anchors smoothing and `max_step`);
    `limit` holds 0 everywhere else, so the arithmetic on it stays finite.
    """

    quota: np.ndarray  # [G]
    unlimited: np.ndarray  # [G] bool
    usage: np.ndarray  # [G, B]
    limit: np.ndarray  # [G, B], column b is broker b's own limit
    demand: np.ndarray | None  # [G, B]
    present: np.ndarray  # [G, B] bool
    limited: np.ndarray  # [G, B] bool, False where absent
    n_present: np.ndarray  # [G], a count held as float64
    total_usage: np.ndarray  # [G]

    @property
    def residual(self) -> np.ndarray:
        """[G] quota left over after everyone's usage (negative over quota)."""
        return self.quota - self.total_usage

    @property
    def equal_share(self) -> np.ndarray:
        """[G] quota / n_present (the whole quota when nobody is present)."""
        return self.quota / np.maximum(self.n_present, 1.0)

    def throttled(self, tolerance: float) -> np.ndarray:
        """[G, B] a present broker using its own limit up to `tolerance` is taken as throttled."""
        return self.limited & (self.usage >= self.limit * (1.0 - tolerance))


def make_view(
    quota: np.ndarray,
    usage: np.ndarray,
    limit: np.ndarray,
    demand: np.ndarray | None,
    present: np.ndarray | None,
) -> View:
    """Check shapes and values (ValueError naming the array and the problem) and build the view."""
    quota, unlimited = checked_quota(quota)
    usage = np.asarray(usage, dtype=np.float64)
    if usage.ndim != 2 or usage.shape[0] != len(quota):
        raise ValueError(f"usage: expected shape (G, B) with G = {len(quota)}, got {usage.shape}")
    limit = _matrix("limit", np.asarray(limit, dtype=np.float64), usage.shape)
    present = np.ones(usage.shape, dtype=bool) if present is None else _matrix("present", present, usage.shape)
    present = present.astype(bool, copy=False)
    usage = _rates("usage", usage, present)
    if demand is not None:
        demand = _rates("demand", _matrix("demand", np.asarray(demand, dtype=np.float64), usage.shape), present)
    if limit.size and np.isnan(limit.min()) and (present & np.isnan(limit)).any():
        raise ValueError("limit: NaN for a present broker")
    limited = present & (limit >= 0) & (limit < np.inf)
    return View(
        quota=np.where(unlimited, 0.0, quota),
        unlimited=unlimited,
        usage=usage,
        limit=np.where(limited, limit, 0.0),
        demand=demand,
        present=present,
        limited=limited,
        n_present=row_sum(present.astype(np.float32)).astype(np.float64),
        total_usage=row_sum(usage),
    )


def checked_quota(quota: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[G] quotas as float64 and [G] whether each is unlimited (< 0, or +inf); ValueError for NaN or a bad shape."""
    quota = np.asarray(quota, dtype=np.float64)
    if quota.ndim != 1:
        raise ValueError(f"quota: expected shape (G,), got {quota.shape}")
    if np.isnan(quota).any():
        raise ValueError("quota: must not be NaN (a negative quota means unlimited)")
    return quota, (quota < 0) | (quota == np.inf)


def row_sum(values: np.ndarray) -> np.ndarray:
    """[G] the sum over brokers; a product with ones is several times faster than `sum(axis=1)` on short rows."""
    return values @ np.ones(values.shape[1], values.dtype)


def _matrix(name: str, values: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    values = np.asarray(values)
    if values.shape != shape:
        raise ValueError(f"{name}: expected shape {shape} like usage, got {values.shape}")
    return values


def _rates(name: str, values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Per-second rates: finite and non-negative where the broker is present; absent entries read as 0."""
    rates = np.where(present, values, 0.0)
    if rates.size and not (rates.min() >= 0 and rates.max() < np.inf):  # a NaN fails both
        wrong = rates[~((rates >= 0) & (rates < np.inf))][0]
        raise ValueError(f"{name}: must be finite and non-negative for present brokers, got {wrong}")
    return rates


def finish(new_limit: np.ndarray, view: View, settings: Settings) -> np.ndarray:
    """The post-processing every policy shares, in place on a rule's result: the knobs, clamps and markers.

    In order: `smoothing` (EWMA with the own previous limit), `max_step` (bound the change against it),
    `min_share` (floor at that fraction of the equal share); then limits are clamped at 0, absent entries
    get 0 and present brokers of unlimited groups get -1. Smoothing and `max_step` act only where the
    previous own limit was a number (not the unlimited marker).
    """
    own, anchored = view.limit, view.limited
    if settings.smoothing:
        np.multiply(new_limit, 1.0 - settings.smoothing, out=new_limit, where=anchored)
        np.add(new_limit, settings.smoothing * own, out=new_limit, where=anchored)
    if settings.max_step is not None:
        largest_change = (settings.max_step * view.quota)[:, None]
        np.minimum(new_limit, own + largest_change, out=new_limit, where=anchored)
        np.maximum(new_limit, own - largest_change, out=new_limit, where=anchored)
    if settings.min_share:
        np.maximum(new_limit, (settings.min_share * view.equal_share)[:, None], out=new_limit)
    np.maximum(new_limit, 0.0, out=new_limit)
    new_limit *= view.present  # rules are finite everywhere, so absent entries become 0
    if view.unlimited.any():
        np.copyto(new_limit, -1.0, where=view.present & view.unlimited[:, None])
    return new_limit
