"""Numaflow's split (`numaflow-equal`): every broker takes `pool / N`, N the pool size the brokers agree on.

N is not in the usage table: it comes from the pool-size consensus (`allocator.node.consensus`), an explicit input a
`BrokerNode` gets from its host every round (`BrokerNode.set_pool_size`). The policy keeps the registry's
signature and reads no store: N is the number of brokers present in the view it is given, and a node with
an agreed pool size gives it the pool as its view (N present brokers), so the common knobs (`min_share`,
`smoothing`, `max_step`) work as for every policy. Given the usage view instead (a run without a membership
registry, `policies.step`), N is the brokers in view: the seed's "use pod count to throttle" without an
external store.

The remainder is carried as fractional tokens: a limit is a rate, and the token bucket accrues fractions of a
token and keeps them from one second to the next, so a pool of 1 msg/s on 2 brokers is 0.5 msg/s each (a
message every 2 s) where Numaflow's `floor(pool / N)` gives each 0; 2 on 2 is 1 each. The limits of N
brokers add up to the pool.
"""

from __future__ import annotations

import numpy as np

from allocator.policies.settings import Settings
from allocator.policies.view import View


def pool_share(quota: np.ndarray, pool_size: float | np.ndarray) -> np.ndarray:
    """`quota / pool_size` (the whole quota for a pool size of 0 or 1); an infinite quota stays infinite."""
    return np.asarray(quota, dtype=np.float64) / np.maximum(pool_size, 1.0)


def numaflow_equal(view: View, settings: Settings) -> np.ndarray:
    """Every present broker's row is `quota / N`, N the brokers present in the view."""
    return np.repeat(pool_share(view.quota, view.n_present)[None, :], view.present.shape[0], axis=0)
