"""A tenant that sends the heaviest ``/v1/chat/completions`` calls it can, from its own process.

``python -m tests.openai_compat.heavy_load URL KEY THREAD CONCURRENCY BODY...``: CONCURRENCY
threads post the body files in turn, each as soon as its last answer came, until stdin closes;
then one JSON line: how many answers of each ``status code`` came. A separate, niced process, so
its own work (sending a megabyte at a time) never delays the measuring client's event loop.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import Counter
from itertools import cycle
from pathlib import Path

import httpx

STARTED = "started"
LOAD_NICENESS = 10


def _post_until(
    stop: threading.Event, url: str, headers: dict[str, str], bodies: list[bytes], seen: Counter[str]
) -> None:
    with httpx.Client(timeout=300) as http:
        for body in cycle(bodies):
            if stop.is_set():
                return
            try:
                resp = http.post(url, content=body, headers=headers)
                code = resp.json().get("error", {}).get("code")
                seen[f"{resp.status_code} {code}"] += 1
            except (httpx.HTTPError, ValueError) as exc:
                seen[type(exc).__name__] += 1


def _rotated(bodies: list[bytes], start: int) -> list[bytes]:
    start %= len(bodies)
    return bodies[start:] + bodies[:start]


def main(argv: list[str]) -> None:
    base, key, thread, concurrency, *files = argv
    # This process stands for another machine: its own CPU (sending a megabyte per call) must
    # not take the measuring client's or the gateway's.
    os.nice(LOAD_NICENESS)
    bodies = [Path(name).read_bytes() for name in files]
    headers = {
        "Authorization": f"Bearer {key}",
        "Content-Type": "application/json",
        "X-Turngate-Thread": thread,
    }
    stop, seen = threading.Event(), Counter[str]()
    workers = [
        # each thread starts at another body, so every kind of call is in flight at once
        threading.Thread(
            target=_post_until,
            args=(stop, f"{base}/v1/chat/completions", headers, _rotated(bodies, i), seen),
        )
        for i in range(int(concurrency))
    ]
    for worker in workers:
        worker.start()
    print(STARTED, flush=True)
    sys.stdin.read()  # until the test closes it
    stop.set()
    for worker in workers:
        worker.join()
    print(json.dumps(dict(seen)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
