"""Artifact garbage collection: ``turngate gc --older-than 7d``.

Only ``snapshot``-retention artifacts (fault prompt snapshots) expire. Manifests and every other
``standard`` artifact are kept forever, and the ledger's events are never touched: gc has no
access to the ledger at all.
"""

from __future__ import annotations

import re
from datetime import timedelta

from turngate.artifacts.store import ArtifactStore, GcReport

_UNITS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION_RE = re.compile(r"^(?:\d+[wdhms])+$")
_PART_RE = re.compile(r"(\d+)([wdhms])")


class DurationError(ValueError):
    """A ``--older-than`` value that is not a positive duration such as ``7d``."""


def parse_duration(text: str) -> timedelta:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"90s"``, ``"2w"`` or a sum such as ``"1d12h"``."""
    value = (text or "").strip().lower()
    if not _DURATION_RE.match(value):
        raise DurationError(
            f"invalid duration {text!r}: use a number and a unit (w, d, h, m, s), e.g. 7d, 12h, 30m, 90s"
        )
    seconds = sum(int(amount) * _UNITS[unit] for amount, unit in _PART_RE.findall(value))
    if seconds <= 0:
        raise DurationError(f"invalid duration {text!r}: must be greater than zero")
    return timedelta(seconds=seconds)


def run_gc(store: ArtifactStore, older_than: timedelta | str, dry_run: bool = False) -> GcReport:
    """Delete (or with ``dry_run`` only list) snapshot artifacts older than ``older_than``."""
    if isinstance(older_than, str):
        older_than = parse_duration(older_than)
    if older_than <= timedelta(0):
        raise DurationError("older_than must be greater than zero")
    return store.gc(older_than, dry_run=dry_run)


def format_report(report: GcReport) -> str:
    """One human-readable summary line (the CLI prints it; ``report.model_dump_json()`` for machines)."""
    verb = "would delete" if report.dry_run else "deleted"
    line = (
        f"{report.store}: {verb} {report.deleted} snapshot artifact(s), {report.deleted_bytes} bytes, "
        f"created before {report.cutoff}; kept {report.kept} younger snapshot(s); "
        "manifests and other standard artifacts are never collected"
    )
    if report.failed_paths:
        line += f"; {len(report.failed_paths)} could not be deleted"
    return line
