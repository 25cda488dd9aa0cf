"""Where the client connects, and with which key: arguments, else ``TURNGATE_URL`` /
``TURNGATE_API_KEY``, else the local ``turngate dev`` address without a key."""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx

DEFAULT_URL = "http://127.0.0.1:8010"
DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ClientSettings:
    url: str
    api_key: str | None
    timeout_s: float

    @classmethod
    def resolve(cls, url: str | None, api_key: str | None, timeout_s: float | None) -> ClientSettings:
        return cls(
            url=(url or os.environ.get("TURNGATE_URL") or DEFAULT_URL).rstrip("/"),
            api_key=api_key or os.environ.get("TURNGATE_API_KEY") or None,
            timeout_s=DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s,
        )

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def stream_timeout(settings: ClientSettings) -> httpx.Timeout:
    """Streams wait as long as the server keeps them open (it pings); connecting is bounded."""
    return httpx.Timeout(settings.timeout_s, read=None)
