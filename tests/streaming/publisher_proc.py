"""A publisher in another process: `python -m tests.streaming.publisher_proc URL CID N DELAY_MS [ATTEMPTS]`.

Publishes N tokens ("t0 ", "t1 ", ...) per attempt, DELAY_MS apart; every attempt but the last ends
with an error (as a retried provider call does).
"""

from __future__ import annotations

import asyncio
import sys

from turngate.streaming import open_token_bus


async def main(url: str, correlation_id: str, n: int, delay_ms: float, attempts: int) -> None:
    bus = open_token_bus(url)
    try:
        for attempt in range(1, attempts + 1):
            await bus.start(correlation_id, attempt)
            for seq in range(n):
                await bus.publish(correlation_id, attempt, seq, f"t{seq} ")
                await asyncio.sleep(delay_ms / 1000)
            last = attempt == attempts
            await bus.finish(correlation_id, attempt, error=None if last else "provider.server_error")
    finally:
        await bus.aclose()


if __name__ == "__main__":
    url, cid, n, delay = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    asyncio.run(main(url, cid, n, delay, int(sys.argv[5]) if len(sys.argv) > 5 else 1))
