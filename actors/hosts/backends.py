"""Where the runtime's objects live: in this process (`local`) or as Ray actors (`ray`).

Both backends take the same plain classes and the same calls, so a driver is written once:
`handle = backend.create(Cls, *args)`, `future = backend.call(handle, "method", *args)`,
`values = backend.gather(futures)`. Locally a call runs at once and its "future" is its value.

The run's own services (the channel, the membership registry, the pool-size consensus) are created with
`create_service`: on Ray they are pinned to the driver's node, so that losing any other node never takes them
(the telemetry is collected in the driver's process, and the run's own `redis-server` is its child). Broker
hosts (`create`) go anywhere; `where` names the node a host actor was placed on, which a lost host's `crash`
events say.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any, Protocol

from actors.errors import RunFailedError
from actors.hosts import ray_reaper

CALL_TIMEOUT_S = 600.0  # a call unanswered this long stops the run as failed instead of hanging it
PLACEMENT_TIMEOUT_S = 10.0  # a lost host's node, asked when it started: answered long ago, or never


@dataclass(frozen=True)
class Placement:
    """The Ray node an actor (or the driver) runs on: its id and its address."""

    node_id: str
    address: str


@dataclass(frozen=True)
class Lost:
    """The answer to a call whose actor's process died (killed from outside, out of memory...)."""

    reason: str


class Backend(Protocol):
    name: str

    def create(self, cls: type, *args: Any) -> Any: ...

    def create_service(self, cls: type, *args: Any) -> Any: ...

    def where(self, handle: Any) -> Placement | None: ...

    def services_node(self) -> Placement | None: ...

    def call(self, handle: Any, method: str, *args: Any, **kwargs: Any) -> Any: ...

    def gather(self, futures: list[Any]) -> list[Any]: ...

    def gather_hosts(self, futures: list[Any]) -> list[Any]: ...

    def kill(self, handle: Any) -> None: ...


class LocalBackend:
    name = "local"

    def create(self, cls: type, *args: Any) -> Any:
        return cls(*args)

    def create_service(self, cls: type, *args: Any) -> Any:
        return cls(*args)

    def where(self, handle: Any) -> Placement | None:
        """Every object is in this process: no node to name."""
        return None

    def services_node(self) -> Placement | None:
        return None

    def call(self, handle: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(handle, method)(*args, **kwargs)

    def gather(self, futures: list[Any]) -> list[Any]:
        return list(futures)

    def gather_hosts(self, futures: list[Any]) -> list[Any]:
        """Host objects in this process die only with it."""
        return list(futures)

    def kill(self, handle: Any) -> None:
        """A local object just stops being used; one that runs its own timer (a realtime host) has it
        stopped, as the thread of a killed actor would be, so a crashed broker neither reports nor
        heartbeats any more."""
        stop_clock = getattr(handle, "stop_clock", None)
        if stop_clock is not None:
            stop_clock()


class RayBackend:
    """Actors need no CPU of their own (they mostly wait), so a dozen fit on two cores; SPREAD places
    them over the nodes of a cluster.

    Their calls record no task events: a realtime run makes hundreds of calls a second (each broker's tick
    publishes, fetches and heartbeats), and the GCS kept an event record of each, up to its cap of tasks,
    growing by hundreds of MB (`benchmarks/bench_soak.py --ray`); quotalab reads none of them (they feed
    Ray's dashboard and state API, which it does not start)."""

    name = "ray"

    def __init__(self, address: str | None = None):
        import ray

        self._ray = ray
        if not ray.is_initialized():
            init_ray(address)
        # actor -> the answer to its first call, where it runs: asked as it starts (no wait), read once it is lost
        self._placements: dict[Any, Any] = {}

    def create(self, cls: type, *args: Any) -> Any:
        handle = self._actor(cls, self.host_strategy(cls)).remote(*args)
        self._placements[handle] = handle.__ray_call__.remote(placement_here)
        return handle

    def host_strategy(self, cls: type) -> Any:
        """Where a host actor may go: `SPREAD` over the nodes (a test pins hosts to nodes in turn)."""
        return "SPREAD"

    def create_service(self, cls: type, *args: Any) -> Any:
        """A service actor on the driver's node, never moved (soft=False): it lives as long as the driver's node."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        pinned = NodeAffinitySchedulingStrategy(self.services_node().node_id, soft=False)
        return self._actor(cls, pinned).remote(*args)

    def services_node(self) -> Placement:
        """Where the run's services live: the node this process (the run's driver) runs on."""
        return placement_here()

    def where(self, handle: Any) -> Placement | None:
        """The node the host actor `handle` was placed on, as it answered when it started (None if it died
        before it could answer)."""
        asked = self._placements.get(handle)
        if asked is None:
            return None
        try:
            return self._ray.get(asked, timeout=PLACEMENT_TIMEOUT_S)
        except (self._ray.exceptions.RayError, self._ray.exceptions.GetTimeoutError):
            return None

    def _actor(self, cls: type, strategy: Any) -> Any:
        return self._ray.remote(cls).options(num_cpus=0, scheduling_strategy=strategy, enable_task_events=False)

    def call(self, handle: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(handle, method).remote(*args, **kwargs)

    def gather(self, futures: list[Any]) -> list[Any]:
        """The answers; a dead actor or a call unanswered within `CALL_TIMEOUT_S` is a `RunFailedError`."""
        try:
            return self._get(list(futures))
        except self._ray.exceptions.RayActorError as error:
            raise RunFailedError(f"an actor's process died ({type(error).__name__}): the run cannot go on") from error

    def gather_hosts(self, futures: list[Any]) -> list[Any]:
        """The answers of calls to host actors, a `Lost` for each whose process died; a call unanswered within
        `CALL_TIMEOUT_S` is a `RunFailedError`."""
        try:
            return self._get(list(futures))
        except self._ray.exceptions.RayActorError:
            pass  # one host or more died: each answer on its own
        answers: list[Any] = []
        for future in futures:
            try:
                answers.append(self._get(future))
            except self._ray.exceptions.RayActorError as error:
                answers.append(Lost(f"the host actor's process died ({type(error).__name__})"))
        return answers

    def _get(self, futures: Any) -> Any:
        try:
            return self._ray.get(futures, timeout=CALL_TIMEOUT_S)
        except self._ray.exceptions.GetTimeoutError as error:
            unanswered = f"an actor call got no answer within {CALL_TIMEOUT_S:g} s"
            raise RunFailedError(f"{unanswered}: the run cannot go on") from error

    def kill(self, handle: Any) -> None:
        self._placements.pop(handle, None)
        self._ray.kill(handle, no_restart=True)


def placement_here(_actor: Any = None) -> Placement:
    """The node of the calling process, on Ray (run inside an actor by `__ray_call__`, which passes the actor)."""
    import ray

    return Placement(ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address())


def init_ray(address: str | None = None) -> None:
    """Start or join Ray. No address: a Ray job's RAY_ADDRESS, else a new local instance; never whichever
    instance this machine happens to run (another sweep's, a test session's), which may stop under us.

    A new local instance gets a reaper (`actors.hosts.ray_reaper`): however this process ends, SIGKILL included, no
    process of the instance outlives it by more than a moment."""
    import ray

    address = address or os.environ.get("RAY_ADDRESS") or "local"
    context = ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    if address == "local":  # a new instance: this process's own
        _REAPERS.append(ray_reaper.start(context.address_info["session_dir"]))


# The reapers of the instances this process started, held for as long as it lives: the pipe each one reads ends
# when this process does, which is what tells it to reap.
_REAPERS: list[subprocess.Popen] = []


def make_backend(name: str, address: str | None = None) -> Backend:
    if name == "local":
        return LocalBackend()
    if name == "ray":
        return RayBackend(address)
    raise ValueError(f"backend: unknown {name!r} (known: local, ray)")


def blocking_call(handle: Any, method: str, *args: Any) -> Any:
    """Call `method` on a plain object or a Ray actor handle and wait for the result.

    Realtime hosts call the channel and the membership registry from their own timer thread; this lets
    the same host code talk to a local object or to an actor.
    """
    bound = getattr(handle, method)
    remote = getattr(bound, "remote", None)
    if remote is None:
        return bound(*args)
    import ray

    try:
        return ray.get(remote(*args), timeout=CALL_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError as error:
        raise RunFailedError(f"{method}: no answer within {CALL_TIMEOUT_S:g} s") from error
    except ray.exceptions.RayActorError as error:
        raise RunFailedError(f"{method}: the actor's process died ({type(error).__name__})") from error


class Synchronized:
    """A local object shared by several timer threads: every method call holds one lock."""

    def __init__(self, target: Any):
        import threading

        self._target = target
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return attribute

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attribute(*args, **kwargs)

        return locked
