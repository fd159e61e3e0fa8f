"""The one error the runtime raises to its callers."""


class RunFailedError(RuntimeError):
    """The run cannot go on: an actor it cannot do without (the channel, the registry) died, or a call got no
    answer within `actors.hosts.backends.CALL_TIMEOUT_S`. The message is one line."""
