"""`turngate verify` throughput and memory on a synthetic ledger (not a test: a measurement).

Builds a ledger of N realistic turns written straight through ``LedgerStore.append_many``:
INTENTs from real envelopes (continuations declare refs to the previous turn's INTENT and
EXECUTION), DECISIONs made by ``turngate.core.decision.decide`` (so every context_digest
recomputes), EXECUTIONs shaped like the turn workflow's, and a context manifest artifact per
DECISION/EXECUTION (its pointer in the payload, its bytes in a local artifact store). Then it
times ``turngate.audit.verify_all`` over it and reports events/s and peak RSS (of the verifying
process, and of the processes it forks to verify index ranges in parallel). Each size runs in a
fresh child process, so the peak RSS of one size is not inherited by the next.

    .venv/bin/python bench/verify.py                      # 10,000 and 50,000 turns
    .venv/bin/python bench/verify.py --turns 10000        # one size
    .venv/bin/python bench/verify.py --turns 2000 --keep /tmp/ledger   # keep the files
    .venv/bin/python bench/verify.py --turns 3000 --workers 1          # one process
    .venv/bin/python bench/verify.py --turns 50000 --cache-events 16384  # more memory, fewer reads
    .venv/bin/python bench/verify.py --turns 50000 --threads 1000      # 1,000 threads at a time
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from turngate.artifacts import artifact_path, open_artifact_store
from turngate.core.assembly import assemble
from turngate.core.canonical import canonical_bytes, digest_bytes
from turngate.core.context import ContextConfig, load_context_config
from turngate.core.decision import decide
from turngate.core.events import Event, EventDraft, EventKind, IntentEnvelope, parse_intent
from turngate.core.manifest import build_denied_manifest, build_manifest
from turngate.core.policy import LoadedPolicy, load_policy
from turngate.ledger import LedgerStore

TARGET_EVENTS_PER_S = 20_000
CREATED_AT = "2025-01-01T00:00:00.000000Z"


@dataclass
class _Thread:
    last: tuple[Event, Event, Event] | None = None  # the last ALLOWed turn: INTENT, DECISION, EXECUTION
    pending: Event | None = None  # the INTENT of this thread's turn in the current group, if ALLOWed
    turns: int = 0


@dataclass
class BuiltLedger:
    turns: int
    events: int
    denied: int
    artifacts: int
    head_index: int
    head_digest: str
    seconds: float
    decisions_with_refs: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _write_artifact(root: Path | None, data: bytes, kind: str = "manifest") -> dict[str, Any] | None:
    """A content-addressed artifact in the local store's layout (no fsync: the bench measures
    verify, not put). The returned pointer is what the turn workflow puts in a payload."""
    if root is None:
        return None
    sha = digest_bytes(data)
    path = artifact_path("standard", kind, sha)
    target = root.joinpath(*path.split("/"))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return {
        "artifact_id": sha,
        "path": path,
        "sha256": sha,
        "size_bytes": len(data),
        "created_at": CREATED_AT,
    }


def _follow(intent: Event, kind: EventKind, payload: dict[str, Any]) -> EventDraft:
    return EventDraft.following(intent, kind, payload)


def build_ledger(
    store: LedgerStore,
    turns: int,
    *,
    artifacts_root: Path | None = None,
    threads: int | None = None,
    deny_every: int = 25,
    chunk_turns: int = 500,
    cfg: ContextConfig | None = None,
    policy: LoadedPolicy | None = None,
    progress: Callable[[int], None] | None = None,
) -> BuiltLedger:
    """Append ``turns`` turns to ``store`` (see the module doc for their shape).

    Turn ``i`` belongs to thread ``i % threads`` (default: 10 turns per thread). Turns run in
    concurrent groups of ``min(chunk_turns, threads)``: one ``append_many`` records the group's
    INTENTs, a second its DECISIONs and EXECUTIONs (interleaved, as concurrent turns are), so no
    two turns of a thread share a group and every ref points to an earlier group. Every
    ``deny_every``-th turn also declares a ref that does not exist and so ends in a recorded
    ``REF_NOT_FOUND`` DENY (INTENT + DECISION, no EXECUTION).
    """
    started = time.perf_counter()
    cfg = cfg or load_context_config(None, {})
    policy = policy or load_policy("turngate.policies.allow_all")
    threads = threads or max(1, turns // 10)
    group = max(1, min(chunk_turns, threads))
    state = [_Thread() for _ in range(threads)]
    events = denied = artifacts = with_refs = 0
    last: Event | None = None
    for first in range(0, turns, group):
        numbers = range(first, min(first + group, turns))
        envelopes = [_envelope(i, state[i % threads], threads, deny_every) for i in numbers]
        intents = store.append_many([envelope.draft() for envelope in envelopes])
        followers: list[EventDraft] = []
        for i, envelope, intent in zip(numbers, envelopes, intents, strict=True):
            thread = state[i % threads]
            with_refs += bool(envelope.payload.declared_refs)
            outcome = decide(
                intent,
                list(thread.last or ()),  # what fetch_ref_candidates returns for the previous turn's id
                cfg,
                policy,
                execution={"provider": "echo", "requested_model_id": None, "resolved_model_id": "echo-1"},
            )
            run_id = f"run-{i:07d}"
            decision_payload = dict(outcome.payload)
            if outcome.allowed and outcome.resolution is not None:
                assembly = assemble(None, outcome.resolution, envelope.message, current=intent)
                manifest = build_manifest(outcome, assembly, intent=intent, run_id=run_id, step_id="decision")
            else:
                assembly = None
                manifest = build_denied_manifest(outcome, intent=intent, run_id=run_id, step_id="decision")
            pointer = _write_artifact(artifacts_root, canonical_bytes(manifest.model_dump(mode="json")))
            if pointer is not None:
                decision_payload["manifest"] = pointer
                artifacts += 1
            followers.append(_follow(intent, EventKind.DECISION, decision_payload))
            thread.turns += 1
            if assembly is None:
                denied += 1
                thread.pending = None
                continue
            execution_payload: dict[str, Any] = {
                "provider": "echo",
                "model_id": "echo-1",
                "requested_model_id": None,
                "resolved_model_id": "echo-1",
                "context_digest": outcome.context_digest,
                "output_text": f"echo: {envelope.message}",
                "usage": {
                    "input_tokens": assembly.estimated_tokens,
                    "output_tokens": len(envelope.message) // 3,
                },
                "_obs": {"duration_ms": 3},
            }
            manifest = build_manifest(outcome, assembly, intent=intent, run_id=run_id, step_id="execution")
            pointer = _write_artifact(artifacts_root, canonical_bytes(manifest.model_dump(mode="json")))
            if pointer is not None:
                execution_payload["manifest"] = pointer
                artifacts += 1
            followers.append(_follow(intent, EventKind.EXECUTION, execution_payload))
            thread.pending = intent
        recorded = store.append_many(followers)
        by_key = {(e.correlation_id, str(e.kind)): e for e in recorded}
        for i in numbers:
            thread = state[i % threads]
            if thread.pending is not None:
                cid = thread.pending.correlation_id
                thread.last = (thread.pending, by_key[(cid, "DECISION")], by_key[(cid, "EXECUTION")])
                thread.pending = None
        events += len(intents) + len(recorded)
        last = recorded[-1]
        if progress is not None:
            progress(numbers[-1] + 1)
    return BuiltLedger(
        turns=turns,
        events=events,
        denied=denied,
        artifacts=artifacts,
        head_index=last.index if last else -1,
        head_digest=last.digest if last else "",
        seconds=time.perf_counter() - started,
        decisions_with_refs=with_refs,
    )


def _envelope(i: int, thread: _Thread, threads: int, deny_every: int) -> IntentEnvelope:
    thread_id = f"thread-{i % threads:05d}"
    refs: list[dict[str, str]] = []
    parent = None
    if thread.last is not None:
        previous = thread.last[0]
        parent = previous.turn_id
        refs = [
            {"ref_type": "event", "ref_id": previous.correlation_id},
            {"ref_type": "execution", "ref_id": previous.correlation_id},
        ]
    if deny_every > 0 and i % deny_every == deny_every - 1:
        refs.append({"ref_type": "event", "ref_id": f"missing-{i}"})
    message = f"turn {thread.turns} of {thread_id}: " + "please summarise the previous answer. " * 3
    return parse_intent(
        {
            "interface_version": 3,
            "correlation_id": f"c-{i:07d}",
            "payload": {
                "intent_type": "chat.message",
                "thread_id": thread_id,
                "turn_id": f"c-{i:07d}",
                "parent_turn_id": parent,
                "declared_refs": refs,
                "inputs": {"locale": "en"},
                "payload": {"message": message},
            },
        }
    )


def peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    """Peak resident set size of this process, or (``RUSAGE_CHILDREN``) of the largest of its
    finished children (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(who).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _ledger_url(workdir: Path) -> str:
    return f"sqlite:///{(workdir / 'ledger.sqlite3').as_posix()}"


def build_step(turns: int, workdir: Path, *, artifacts: bool, threads: int | None = None) -> dict[str, Any]:
    """Child process 1: build the ledger (and its artifacts) in ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    store = LedgerStore(_ledger_url(workdir))
    try:
        built = build_ledger(
            store, turns, artifacts_root=workdir / "artifacts" if artifacts else None, threads=threads
        )
    finally:
        store.close()
    return {
        "turns": turns,
        "events": built.events,
        "artifacts": built.artifacts,
        "denied": built.denied,
        "build_s": round(built.seconds, 1),
        "ledger_mb": round((workdir / "ledger.sqlite3").stat().st_size / 1e6, 1),
    }


def verify_step(
    workdir: Path, *, batch_size: int, workers: int | None = None, cache_events: int | None = None
) -> dict[str, Any]:
    """Child process 2: verify the ledger in ``workdir`` as `turngate verify` does (a fresh
    process, so its peak RSS is verify's alone)."""
    from turngate.audit import verify_all

    artifacts_root = workdir / "artifacts"
    rss_before = peak_rss_mb()
    store = LedgerStore(_ledger_url(workdir))
    try:
        report = verify_all(
            store,
            artifacts=open_artifact_store(str(artifacts_root)) if artifacts_root.exists() else None,
            context_config=load_context_config(None, {}),
            batch_size=batch_size,
            workers=workers,
            cache_events=cache_events,
        )
    finally:
        store.close()
    return {
        "ok": report.ok,
        "failures": len(report.failures),
        "checked_events": report.checked_events,
        "checked_decisions": report.checked_decisions,
        "checked_artifacts": report.checked_artifacts,
        "verify_s": round(report.duration_ms / 1000, 1),
        "events_per_s": round(report.events_per_s),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "peak_rss_workers_mb": round(peak_rss_mb(resource.RUSAGE_CHILDREN), 1),
        "rss_before_verify_mb": round(rss_before, 1),
    }


def _child(args: argparse.Namespace) -> int:
    workdir = Path(args.dir)
    if args.step == "build":
        result = build_step(args.turns[0], workdir, artifacts=not args.no_artifacts, threads=args.threads)
    else:
        result = verify_step(
            workdir, batch_size=args.batch_size, workers=args.workers, cache_events=args.cache_events
        )
    print(json.dumps(result))
    return 0


def _run_child(*extra: str) -> dict[str, Any]:
    command = [sys.executable, __file__, *extra]
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=os.environ.copy())
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(
            "Build synthetic ledgers of N realistic turns and time `turngate verify` (verify_all) on "
            "them: events/s and the peak RSS of the verifying process."
        )
    )
    parser.add_argument(
        "--turns",
        type=int,
        action="append",
        help="ledger size in turns (repeatable; default: 10000 and 50000)",
    )
    parser.add_argument("--batch-size", type=int, default=1000, help="rows per read batch (default 1000)")
    parser.add_argument(
        "--workers",
        type=int,
        help="verify in this many processes (default: verify_all decides, one per core)",
    )
    parser.add_argument(
        "--cache-events",
        type=int,
        help="recent events each verifying process keeps parsed (default: verify_all's, 4,096)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help=(
            "threads the turns are spread over, round robin (default: turns / 10, so a turn's refs "
            "reach back about 3 x threads events: more concurrent threads in a larger ledger)"
        ),
    )
    parser.add_argument("--no-artifacts", action="store_true", help="no manifest artifacts in the payloads")
    parser.add_argument("--keep", help="build under this directory (one subdirectory per size) and keep it")
    parser.add_argument("--json", action="store_true", help="print one JSON line per size")
    parser.add_argument("--step", choices=("build", "verify"), help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.turns = args.turns or [10_000, 50_000]
    if args.step:
        return _child(args)
    results = []
    for turns in args.turns:
        root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="turngate-bench-verify-"))
        workdir = root / f"{turns}-turns" if args.keep else root
        try:
            build = ["--step", "build", "--dir", str(workdir), "--turns", str(turns)]
            build += ["--threads", str(args.threads)] if args.threads else []
            result = _run_child(*build, *(["--no-artifacts"] if args.no_artifacts else []))
            verify = ["--step", "verify", "--dir", str(workdir), "--batch-size", str(args.batch_size)]
            verify += ["--workers", str(args.workers)] if args.workers else []
            verify += ["--cache-events", str(args.cache_events)] if args.cache_events else []
            result |= _run_child(*verify)
        finally:
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        results.append(result)
        if args.json:
            print(json.dumps(result), flush=True)
            continue
        print(
            f"{result['turns']:>7} turns {result['events']:>7} events ({result['ledger_mb']} MB, "
            f"{result['checked_artifacts']} artifacts): verify {result['verify_s']} s, "
            f"{result['events_per_s']} events/s, peak RSS {result['peak_rss_mb']} MB "
            f"(workers {result['peak_rss_workers_mb']} MB), ok={result['ok']} "
            f"(built in {result['build_s']} s)",
            flush=True,
        )
    slow = [r["turns"] for r in results if r["events_per_s"] < TARGET_EVENTS_PER_S]
    if slow and not args.json:
        print(f"below the target of {TARGET_EVENTS_PER_S} events/s at {slow} turns (see docs/AUDIT.md)")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
