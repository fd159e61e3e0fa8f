"""Three services of the embedding example (`service.py`), three plain OS processes, sharing one quota over Redis.

    python examples/embedding/three_services.py                  # on a redis-server of its own, on 127.0.0.1
    python examples/embedding/three_services.py --redis-url redis://127.0.0.1:6379/0 --seconds 30

Their producers offer twice the quota in all; every second this prints what the three admitted against it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

SERVICE = Path(__file__).with_name("service.py")


async def services(
    redis_url: str,
    names: list[str],
    quota: float,
    offered_per_s: float,
    interval_s: float = 0.2,
    run: str = "embedding",
) -> AsyncIterator[dict]:
    """Start one `service.py` per name, each offering `offered_per_s`; yield their round records (JSON lines) as
    they come. Closing the generator stops them with SIGTERM (a clean leave) and waits for them."""
    common = ["--peers", *names, "--redis-url", redis_url, "--run", run, "--quota", str(quota)]
    common += ["--offered", str(offered_per_s), "--interval-s", str(interval_s)]
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable, str(SERVICE), "--name", name, *common, stdout=asyncio.subprocess.PIPE
        )
        for name in names
    ]
    lines: asyncio.Queue[bytes] = asyncio.Queue()

    async def forward(stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            await lines.put(line)

    readers = [asyncio.create_task(forward(process.stdout)) for process in processes]
    try:
        while True:
            yield json.loads(await lines.get())
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        await asyncio.gather(*(process.wait() for process in processes))
        for reader in readers:
            reader.cancel()


async def watch(redis_url: str, quota: float, seconds: float, interval_s: float) -> None:
    names = ["b1", "b2", "b3"]
    second, admitted, limits = 0, dict.fromkeys(names, 0), {}
    start = None
    async with contextlib.aclosing(services(redis_url, names, quota, 2 * quota / len(names), interval_s)) as records:
        async for record in records:
            start = record["t"] if start is None else start
            if record["t"] - start >= second + 1:
                shares = "  ".join(f"{name} {admitted[name]:4d}/s (limit {limits.get(name, 0):5.1f})" for name in names)
                print(f"second {second:3d}: admitted {sum(admitted.values()):4d}/s of {quota:g}   {shares}", flush=True)
                second, admitted = second + 1, dict.fromkeys(names, 0)
                if second >= seconds:
                    return
            admitted[record["name"]] += record["admitted"]
            limits[record["name"]] = record["limit"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", help="an existing Redis (default: start a redis-server on 127.0.0.1)")
    parser.add_argument("--quota", type=float, default=300.0, help="messages a second, shared by the three")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--interval-s", type=float, default=0.2)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        url = args.redis_url
        if url is None:
            from actors.transport.redis_server import RedisServer

            url = stack.enter_context(RedisServer()).url
        asyncio.run(watch(url, args.quota, args.seconds, args.interval_s))


if __name__ == "__main__":
    main()
