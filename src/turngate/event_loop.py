"""The event loop turngate's commands run on: uvloop where it is installed.

The API, the worker and the dev server spend a tenth of their CPU in the event loop itself
(scheduling callbacks, polling sockets); uvloop does that work in C, about 2 ms of CPU less per
turn, and Temporal's SDK and uvicorn both run on it. ``TURNGATE_EVENT_LOOP`` chooses: ``auto``
(the default: uvloop if installed, else asyncio's own loop), ``uvloop`` (refuse to start without
it), or ``asyncio``. Workflow code never runs on this loop: Temporal runs each workflow on a
deterministic loop of its own.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

CHOICES = ("auto", "uvloop", "asyncio")


class EventLoopConfigError(ValueError):
    """``TURNGATE_EVENT_LOOP`` names no loop turngate can run on."""


def loop_factory(choice: str | None = None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory for :class:`asyncio.Runner` (None: asyncio's default loop)."""
    choice = (choice if choice is not None else os.environ.get("TURNGATE_EVENT_LOOP", "auto")).strip().lower()
    if choice not in CHOICES:
        raise EventLoopConfigError(f"TURNGATE_EVENT_LOOP={choice!r}: expected one of {', '.join(CHOICES)}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise EventLoopConfigError("TURNGATE_EVENT_LOOP=uvloop, but uvloop is not installed") from None
        return None
    return uvloop.new_event_loop
