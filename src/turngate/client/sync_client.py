"""``Turngate``: the native API from plain (blocking) code.

The same methods as :class:`~turngate.client.async_client.AsyncTurngate`, which does the work:
each call runs on the client's own event loop, in a background thread, and blocks until it is
done (so the logic exists once, and a blocking program needs no asyncio of its own).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from turngate.client.async_client import AsyncTurngate
from turngate.client.settings import ClientSettings

P = ParamSpec("P")
T = TypeVar("T")


def _blocking(
    method: Callable[Concatenate[AsyncTurngate, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Turngate, P], T]:
    def call(self: Turngate, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self._api, *args, **kwargs))

    functools.update_wrapper(call, method)
    return call


def _iterating(
    method: Callable[Concatenate[AsyncTurngate, P], AsyncIterator[T]],
) -> Callable[Concatenate[Turngate, P], Iterator[T]]:
    def call(self: Turngate, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        items = method(self._api, *args, **kwargs)
        try:
            while True:
                try:
                    yield self._run(_next(items))
                except StopAsyncIteration:
                    return
        finally:
            close = getattr(items, "aclose", None)
            if close is not None:
                self._run(close())

    functools.update_wrapper(call, method)
    return call


async def _next(items: AsyncIterator[T]) -> T:
    return await anext(items)


class Turngate:
    """``with Turngate("http://127.0.0.1:8010", api_key=...) as tg: tg.chat("hello")``

    Every refusal raises :class:`~turngate.client.TurngateError` (with ``reason_code``); no
    answer at all raises :class:`~turngate.client.Unreachable`.
    """

    def __init__(
        self, url: str | None = None, api_key: str | None = None, *, timeout_s: float | None = None
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="turngate-client", daemon=True)
        self._thread.start()
        self._api = self._run(_open(url, api_key, timeout_s))

    @property
    def settings(self) -> ClientSettings:
        return self._api.settings

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(work, self._loop)
        return future.result()

    def __enter__(self) -> Turngate:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._api.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    call = _blocking(AsyncTurngate.call)
    send_intent = _blocking(AsyncTurngate.send_intent)
    chat = _blocking(AsyncTurngate.chat)
    stream_intent = _iterating(AsyncTurngate.stream_intent)
    stream_turn = _iterating(AsyncTurngate.stream_turn)
    snapshot = _blocking(AsyncTurngate.snapshot)
    iter_events = _iterating(AsyncTurngate.iter_events)
    tail = _iterating(AsyncTurngate.tail)
    verify = _blocking(AsyncTurngate.verify)
    capabilities = _blocking(AsyncTurngate.capabilities)
    upload = _blocking(AsyncTurngate.upload)
    submit_job = _blocking(AsyncTurngate.submit_job)
    job = _blocking(AsyncTurngate.job)
    jobs = _blocking(AsyncTurngate.jobs)
    cancel_job = _blocking(AsyncTurngate.cancel_job)
    watch_job = _iterating(AsyncTurngate.watch_job)
    case = _blocking(AsyncTurngate.case)
    reviews = _blocking(AsyncTurngate.reviews)
    review = _blocking(AsyncTurngate.review)
    approve = _blocking(AsyncTurngate.approve)
    deny = _blocking(AsyncTurngate.deny)


async def _open(url: str | None, api_key: str | None, timeout_s: float | None) -> AsyncTurngate:
    """The async client, created on the client's own loop (its connections live there)."""
    return AsyncTurngate(url, api_key, timeout_s=timeout_s)
