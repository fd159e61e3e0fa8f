"""fair-share-safe, the recommended policy: max-min fair, and it holds the quota in its worst round.

One principle runs through it: **a broker takes only room it knows is free.** A peer counts at the usage it can
be known to hold (`counting`); a broker new to a group takes nothing until the others can know it is there
(`start`); what others need to hear is sent until they can be expected to have heard it (`reporting`), and
a few brokers that heard a peer's news pass it on, so that one lossy link does not hold it back (`news_relays`,
`allocator.node.relay`); a quota change applies to the limits at once (`quota`); and the rule caps the max-min
fair share at the residual heard (`rule`). Where the membership registry lists who serves a group (a Pulsar
broker reads a bundle's owner from the metadata store), a broker leaves room for a peer it has not heard yet.
"""

from allocator.policies.fair_share_safe.rule import safe_max_min_fair_share
from allocator.policies.fair_share_safe.safe_hooks import SafeHooks
from allocator.policies.fair_share_safe.safe_settings import SafeSettings
from allocator.policies.policy import Policy

POLICY = Policy(
    "fair-share-safe",
    "max-min fair over the demands, never more than the room it knows is free",
    safe_max_min_fair_share,
    SafeSettings,
    SafeHooks,
)
