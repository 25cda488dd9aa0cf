"""Garbage collection settled for a long-running service (the API, a worker, the dev server).

Once started, such a process holds about 180,000 objects from its imports and set-up, all
long-lived; every full collection walks them again, about 60 ms with the GIL held: a pause that
every request in flight waits out, and the slowest of a closed loop's answers. Once the service
is set up they are moved out of the collector's reach (``gc.freeze``), and the youngest
generation is collected after 20,000 allocations instead of 700 (a turn allocates tens of
thousands of short-lived objects, most of which die young anyway). Side by side, 8 clients in a
closed loop: p99 5-10 % lower, about 1 ms less CPU per turn, a few MB more peak RSS.
"""

from __future__ import annotations

import gc

#: Allocations between two collections of the youngest generation (Python's default: 700).
YOUNG_THRESHOLD = 20_000


def settle_after_start() -> None:
    """Freeze what start-up built (collected first: no garbage is kept) and raise the young
    generation's threshold. Safe to call more than once."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
