"""The fake provider of the side-by-side scenario: an Ollama ``/api/chat`` on loopback that both
gateways call (turngate streams NDJSON through the ``ollama`` SDK, the DBL gateway asks for one
JSON answer). It answers after ``--latency-ms`` with a fixed reply, in its own process so its
CPU is neither gateway's.

    python -m bench.dbl_provider --port 11500 --latency-ms 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "bench-model"
REPLY = "Hello from the fake provider"


def app(latency_s: float) -> Starlette:
    async def chat(request: Request) -> Response:
        body = await request.json()
        await asyncio.sleep(latency_s)
        words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        final = {
            "model": body.get("model", MODEL),
            "created_at": "2026-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": REPLY},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": words,
            "eval_count": len(REPLY.split()),
        }
        if body.get("stream") is False:
            return JSONResponse(final)

        async def lines() -> AsyncIterator[bytes]:
            yield json.dumps(final | {"done": False, "done_reason": None}).encode() + b"\n"
            yield json.dumps(final | {"message": {"role": "assistant", "content": ""}}).encode() + b"\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    async def tags(_: Request) -> Response:
        return JSONResponse({"models": [{"name": MODEL, "model": MODEL}]})

    async def healthz(_: Request) -> Response:
        return JSONResponse({"ok": True})

    routes = [
        Route("/api/chat", chat, methods=["POST"]),
        Route("/api/tags", tags),
        Route("/healthz", healthz),
    ]
    return Starlette(routes=routes)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.dbl_provider", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=3.0)
    args = parser.parse_args()
    uvicorn.run(app(args.latency_ms / 1000), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
