"""How soon the external-refs bounds end a call against a server that accepts and never answers.

tests/jobs/test_external_refs_bounds.py and tests/integration/test_handle_refs.py check which
bound ends each call (and that it waited that bound); how soon after its bound a call ends is
measured here, on a silent TCP server on loopback:

- ``fetch cut``: a Workbench fetch configured for ten minutes, in an attempt of 2 s: cut to what
  is left of the attempt, it must end before the attempt does (under 2 s);
- ``embedder cut``: a case query whose index's embedder waits ten minutes: the attempt's own
  bound (2 s less its margin) must end it before the attempt does (under 2 s);
- ``embedder timeout``: the query embedder's own timeout of 0.5 s: it must end before 1.5 s;
- ``turn``: a whole turn with a silent resolver and ``WORKBENCH_FETCH_TIMEOUT_MS=300`` (three
  attempts of 0.3 s and the retry waits between them) on a Temporal dev server of its own: its
  answer within 3 x 0.3 + 5 s.

    python -m bench.external_refs_bounds [--runs 5] [--no-turn] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from temporalio.testing import ActivityEnvironment
from tests.jobs.helpers import stored_index
from tests.security.fake_resolver import LOOPBACK_ALLOWED, LOOPBACK_ALLOWED_ENV
from tests.stack import make_settings, running_stack

from bench.stack import temporal_dev_server
from turngate.activities.external_refs import ExternalRefActivities
from turngate.artifacts import LocalArtifactStore
from turngate.jobs.cases.embedders import EmbedderSpec
from turngate.security.workbench import WorkbenchConfig
from turngate.workflows import external_refs_options as options
from turngate.workflows.shared import ExternalRefsInput

ATTEMPT = timedelta(seconds=2)
EMBED_TIMEOUT = timedelta(milliseconds=500)
TURN_FETCH_MS = 300
TARGETS_S = {
    "fetch cut": ATTEMPT.total_seconds(),
    "embedder cut": ATTEMPT.total_seconds(),
    "embedder timeout": 1.5,
    "turn": 3 * TURN_FETCH_MS / 1000 + 5,
}
NEVER_MS = 600_000
HANDLE = {"ref_type": "artifact.handle", "ref_id": "h", "kind": "note"}
QUERY = {"ref_type": "case_query", "case_id": "c1", "query": "lighthouse keeper", "top_k": 1}


@contextlib.contextmanager
def silent_port() -> Iterator[int]:
    """A TCP server on loopback that accepts connections (its backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield int(sock.getsockname()[1])


def _environment() -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        attempt=1,
        start_to_close_timeout=ATTEMPT,
        schedule_to_close_timeout=ATTEMPT * 3,
        heartbeat_timeout=timedelta(milliseconds=400),
    )
    return env


async def _attempt(acts: ExternalRefActivities, ref: dict[str, Any]) -> tuple[float, str]:
    """Seconds one attempt took, and what it ended with."""
    started = time.monotonic()
    try:
        await _environment().run(
            acts.resolve_external_refs, ExternalRefsInput(tenant_id="t1", correlation_id="c", refs=[ref])
        )
        ended = "answered"
    except Exception as exc:  # what the attempt ended with is the figure's label
        ended = str(getattr(exc, "type", None) or type(exc).__name__)
    return time.monotonic() - started, ended


class _Registry:
    """The case registry's one lookup: an index whose manifest names ``spec``'s embedder."""

    def __init__(self, store: LocalArtifactStore, spec: EmbedderSpec) -> None:
        pointer, version = stored_index(store, spec.embedder_id)
        self.record = SimpleNamespace(index_version=version, index=pointer, embedder=spec)

    def find_case_index(self, **_: Any) -> Any:
        return self.record


def _fetching(root: Path, port: int) -> ExternalRefActivities:
    config = WorkbenchConfig(
        enabled=True,
        resolver_url=f"http://127.0.0.1:{port}/h",
        admit_kinds=("note",),
        timeout_ms=NEVER_MS,
        deny_networks=LOOPBACK_ALLOWED,
    )
    store = LocalArtifactStore(root / "a")
    return ExternalRefActivities(SimpleNamespace(), store, cache_dir=root / "c", workbench=config)  # type: ignore[arg-type]


def _embedding(root: Path, port: int) -> ExternalRefActivities:
    spec = EmbedderSpec(
        kind="openai", model="m", dim=256, base_url=f"http://127.0.0.1:{port}/v1", timeout_s=NEVER_MS / 1000
    )
    store = LocalArtifactStore(root / "a")
    registry = _Registry(store, spec)
    return ExternalRefActivities(registry, store, cache_dir=root / "c", workbench=WorkbenchConfig())  # type: ignore[arg-type]


async def _repeat(runs: int, once: Callable[[], Awaitable[tuple[float, str]]]) -> list[tuple[float, str]]:
    return [await once() for _ in range(runs)]


async def activity_figures(runs: int) -> dict[str, list[tuple[float, str]]]:
    figures: dict[str, list[tuple[float, str]]] = {}
    with silent_port() as port, tempfile.TemporaryDirectory(prefix="turngate-bench-refs-") as tmp:
        root = Path(tmp)
        acts = _fetching(root / "fetch", port)
        figures["fetch cut"] = await _repeat(runs, lambda: _attempt(acts, HANDLE))
        acts.close()
        acts = _embedding(root / "embed", port)
        figures["embedder cut"] = await _repeat(runs, lambda: _attempt(acts, QUERY))
        acts.close()
        query_bound = options.QUERY_EMBED_TIMEOUT
        options.QUERY_EMBED_TIMEOUT = EMBED_TIMEOUT  # the query embedder's own bound, shortened
        try:
            acts = _embedding(root / "own", port)
            figures["embedder timeout"] = await _repeat(runs, lambda: _attempt(acts, QUERY))
            acts.close()
        finally:
            options.QUERY_EMBED_TIMEOUT = query_bound
    return figures


async def turn_figures(runs: int) -> list[tuple[float, str]]:
    """One turn per run, each declaring a handle the silent resolver never answers."""
    found: list[tuple[float, str]] = []
    with silent_port() as port, tempfile.TemporaryDirectory(prefix="turngate-bench-refs-") as tmp:
        root = Path(tmp)
        os.environ.update(
            {
                "ALLOW_HANDLE_CONTENT_FETCH": "true",
                "WORKBENCH_ADMIT_KINDS": "note",
                "WORKBENCH_DENY_NETWORKS": LOOPBACK_ALLOWED_ENV,
                "WORKBENCH_FETCH_TIMEOUT_MS": str(TURN_FETCH_MS),
                "WORKBENCH_RESOLVER_URL": f"http://127.0.0.1:{port}/h",
            }
        )
        async with (
            temporal_dev_server(root) as temporal,
            running_stack(make_settings(root, temporal.address)) as stack,
        ):
            for n in range(runs):
                started = time.monotonic()
                resp = await stack.chat("summarise", correlation_id=f"c-silent-{n}", declared_refs=[HANDLE])
                took = time.monotonic() - started
                context = resp.json().get("decision", {}).get("payload", {}).get("external_context", [])
                found.append((took, ",".join(r["reason_code"] for r in context) or str(resp.status_code)))
    return found


def summarise(figures: dict[str, list[tuple[float, str]]]) -> dict[str, Any]:
    out = {}
    for name, runs in figures.items():
        seconds = [s for s, _ in runs]
        worst = max(seconds)
        out[name] = {
            "median_s": round(statistics.median(seconds), 3),
            "max_s": round(worst, 3),
            "n": len(runs),
            "ended_with": sorted({e for _, e in runs}),
            "target_s": TARGETS_S[name],
            "status": "PASS" if worst < TARGETS_S[name] else "FAIL",
        }
    return out


def render(summary: dict[str, Any]) -> str:
    lines = [f"{'bound':<17} {'median':>8} {'max':>8}  {'target':<9} {'status':<6} ended with"]
    for name, row in summary.items():
        target = f"< {row['target_s']:g} s"
        lines.append(
            f"{name:<17} {row['median_s']:>7.3f}s {row['max_s']:>7.3f}s  {target:<9} "
            f"{row['status']:<6} {', '.join(row['ended_with'])}"
        )
    return "\n".join(lines)


async def run(runs: int, turn: bool) -> dict[str, Any]:
    figures = await activity_figures(runs)
    if turn:
        figures["turn"] = await turn_figures(runs)
    return summarise(figures)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.external_refs_bounds",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=int, default=5, help="calls per bound (default 5)")
    parser.add_argument("--no-turn", action="store_true", help="skip the whole turn (no Temporal)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    # The worker logs each failed attempt with its traceback: here they are the expected figures.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    summary = asyncio.run(run(args.runs, not args.no_turn))
    print(json.dumps(summary, indent=2) if args.json else render(summary))
    return 0 if all(row["status"] == "PASS" for row in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
