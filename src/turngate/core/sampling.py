"""1-in-N sampling of successful turns for debug snapshots.

Silent regressions (a model answering worse, a prompt that drifted) show in no fault. With
``TURNGATE_SNAPSHOT_SAMPLE_N=N`` one successful turn in N also stores the snapshots a fault
would (the exact request and the provider's output), trigger ``sampled``. Which turns: those
whose correlation id hashes to 0 modulo N, so the choice is a pure function of recorded data,
the same in replay and verify, and spread evenly over clients. Pure: no I/O.
"""

from __future__ import annotations

import hashlib

#: The most a setting may ask for (one turn in a million).
MAX_SAMPLE_N = 1_000_000


def sampled(correlation_id: str, one_in: int) -> bool:
    """Whether the turn ``correlation_id`` is in the 1-in-``one_in`` sample (0: none is)."""
    if one_in <= 0:
        return False
    head = hashlib.sha256(correlation_id.encode("utf-8")).digest()[:8]
    return int.from_bytes(head, "big") % one_in == 0
