"""Fewer garbage-collector passes while verifying.

Verify allocates millions of short-lived, acyclic containers (parsed payloads, pydantic models)
beside a few bounded caches of long-lived ones. Reference counting frees the short-lived ones;
the cyclic collector, at CPython's default thresholds (700, 10, 10), still runs a young pass
every few hundred allocations and, now and then, a full pass over every cached object. That was
~19% of a 10,000-turn verify (docs/BENCHMARKS.md). Higher thresholds keep the collector, just
rarer; forked range workers inherit them.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

#: (young, middle, old): a young pass per 100,000 net new containers instead of per 700.
VERIFY_GC_THRESHOLDS = (100_000, 50, 100)

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def fewer_gc_passes(thresholds: tuple[int, int, int] = VERIFY_GC_THRESHOLDS) -> Iterator[None]:
    """Raise the collector's thresholds (never lower them) for the block, then restore them."""
    before = gc.get_threshold()
    if before[0] == 0:  # collection disabled by threshold 0: leave it so
        yield
        return
    gc.set_threshold(*(max(old, new) for old, new in zip(before, thresholds, strict=True)))
    try:
        yield
    finally:
        gc.set_threshold(*before)


def with_fewer_gc_passes(function: Callable[P, R]) -> Callable[P, R]:
    """``function`` run inside :func:`fewer_gc_passes`."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with fewer_gc_passes():
            return function(*args, **kwargs)

    return wrapper
