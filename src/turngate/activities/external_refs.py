"""Resolving a turn's external refs (``case_query``, ``artifact.handle``): one retryable activity.

Runs on the turn worker's queue, only for a turn that declared such refs and was ALLOWed. Each
``case_query`` is pinned to an index version from the case registry of the INTENT's tenant
(another tenant's case is indistinguishable from an absent one), then retrieved from the index
file (cached locally, checked against its sha256). Each ``artifact.handle`` goes through the
guarded Workbench fetcher; fetched text is stored as an artifact and named by its digest, and a
refusal is recorded with its reason code, never dropped in silence. Transient fetch failures are
retried by Temporal; the last attempt records them as refusals.

Bounded from the inside too (turngate.workflows.external_refs_options): an attempt's work ends
a margin before its start-to-close timeout (``external_refs.attempt_timeout``, retried), each
fetch is cut to what is left of it, the query embedder's requests time out within
``QUERY_EMBED_TIMEOUT``, and a heartbeat goes out several times per heartbeat timeout while the
attempt runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from turngate.artifacts import ArtifactError, ArtifactStore, aput
from turngate.core.events import REF_TYPE_CASE_QUERY, CaseQueryRef, ExternalRef, HandleRef
from turngate.core.external import ExternalContext, ExternalError, ExternalItem
from turngate.core.manifest import ExclusionEntry
from turngate.jobs.cases.case_query import CaseQueryError, IndexCache, manifest_record, resolve_case_query
from turngate.jobs.cases.embedders import Embedder, build_embedder
from turngate.jobs.cases.registry import CaseRegistry
from turngate.jobs.domain.embedder_spec import EmbedderSpec
from turngate.security.workbench import FetchOutcome, WorkbenchConfig, fetch_handle
from turngate.workflows import external_refs_options
from turngate.workflows.shared import ExternalRefsInput
from turngate.workflows.turn_activities import RESOLVE_EXTERNAL_REFS

log = logging.getLogger(__name__)

#: Refusals worth another attempt (the resolver may be back); others are final at once.
TRANSIENT_FETCH_CODES = frozenset({"workbench.timeout", "workbench.connection"})
#: Attempts the workflow's retry policy allows for this activity.
MAX_ATTEMPTS = external_refs_options.MAX_ATTEMPTS
#: An attempt's own work ends this share of its start-to-close timeout early (at most 1 s), so
#: it fails with a reason of its own before Temporal times it out.
ATTEMPT_MARGIN_SHARE = 0.1
MAX_ATTEMPT_MARGIN_S = 1.0
#: A fetch cut to the attempt ends this much before the attempt's work must, so that its own
#: ``workbench.timeout`` is what the attempt sees.
FETCH_MARGIN_S = 0.2
#: Heartbeats per heartbeat timeout.
HEARTBEATS_PER_TIMEOUT = 4
#: Total external text per turn: the workflow payload stays far below Temporal's 2 MB limit.
MAX_EXTERNAL_BYTES = 512 * 1024
_RETRIEVAL_EXCLUSION = {"below_threshold": "score_below_threshold", "over_top_k": "over_top_k"}


class ExternalRefActivities:
    def __init__(
        self,
        registry: CaseRegistry,
        artifacts: ArtifactStore,
        *,
        cache_dir: Path,
        workbench: WorkbenchConfig,
        embedder_factory: Callable[[EmbedderSpec], Embedder] = build_embedder,
        resolve: Any = None,  # DNS resolver for the fetcher (tests)
    ) -> None:
        self._registry = registry
        self._artifacts = artifacts
        self._indexes = IndexCache(artifacts, cache_dir)
        self._workbench = workbench
        self._embedder_factory = embedder_factory
        self._embedders: dict[str, Embedder] = {}
        self._dns = resolve

    def close(self) -> None:
        self._indexes.close()

    @activity.defn(name=RESOLVE_EXTERNAL_REFS)
    async def resolve_external_refs(self, inp: ExternalRefsInput) -> ExternalContext:
        info = activity.info()
        budget_s = _attempt_budget_s(info.start_to_close_timeout)
        deadline = asyncio.get_running_loop().time() + budget_s
        bound = asyncio.timeout_at(deadline)
        async with _heartbeating(info.heartbeat_timeout):
            try:
                async with bound:
                    return await self._resolve(inp, deadline, last_attempt=info.attempt >= MAX_ATTEMPTS)
            except TimeoutError:
                if not bound.expired():
                    raise
                raise ApplicationError(
                    f"the external refs were not resolved within the attempt's {budget_s:.1f} s",
                    type="external_refs.attempt_timeout",
                ) from None

    async def _resolve(
        self, inp: ExternalRefsInput, deadline: float, *, last_attempt: bool
    ) -> ExternalContext:
        collected = _Collected()
        for position, raw in enumerate(inp.refs):
            ref: ExternalRef = (
                CaseQueryRef.model_validate(raw)
                if raw.get("ref_type") == REF_TYPE_CASE_QUERY
                else HandleRef.model_validate(raw)
            )
            if isinstance(ref, CaseQueryRef):
                error = await self._case_query(position, ref, inp.tenant_id, collected)
                if error is not None:
                    return ExternalContext(records=tuple(collected.records), error=error)
            else:
                await self._handle(position, ref, collected, deadline=deadline, last_attempt=last_attempt)
        return collected.result()

    async def _case_query(
        self, position: int, ref: CaseQueryRef, tenant_id: str | None, out: _Collected
    ) -> ExternalError | None:
        record = await asyncio.to_thread(
            self._registry.find_case_index,
            tenant_id=tenant_id,
            case_id=ref.case_id,
            index_version=ref.index_version,
        )
        if record is None:
            which = f"version {ref.index_version}" if ref.index_version else "any index"
            return ExternalError(
                code="case_query.index_not_found",
                detail=f"case {ref.case_id!r} has no {which} (run case.ingest, case.embed, case.index)",
                ref_index=position,
            )
        pinned = ref.model_copy(update={"index_version": record.index_version})
        try:
            index = await asyncio.to_thread(self._indexes.get, record.index)
            result = await resolve_case_query(pinned, index, self._embedder(record.embedder))
            texts = await asyncio.to_thread(
                lambda: {cid: index.text(cid) for cid in result.selected_chunk_ids}
            )
        except CaseQueryError as exc:
            return ExternalError(code=exc.code, detail=str(exc), ref_index=position)
        except ArtifactError as exc:
            raise ApplicationError(f"case index unavailable: {exc}", type="artifact.unavailable") from exc
        source = f"case_query[{position}]:{ref.case_id}@{record.index_version}"
        scores = {c.chunk_id: c.score for c in result.candidates}
        out.records.append(
            manifest_record(pinned, result)
            | {
                "ref_index": position,
                "declared_index_version": ref.index_version,
                # the index file itself: verify re-hashes it, so the pinned version's bytes are proven
                "index": record.index.model_dump(mode="json"),
            }
        )
        for chunk_id in result.selected_chunk_ids:
            item = ExternalItem(
                item_id=chunk_id,
                source_ref=source,
                label=f"case {ref.case_id}, chunk {chunk_id} (score {scores[chunk_id]})",
                text=texts[chunk_id],
                included_reason="declared_case_query",
            )
            out.add(item)
        for exclusion in result.exclusions:
            out.excluded.append(
                ExclusionEntry(
                    item_id=exclusion.chunk_id,
                    item_type="evidence",
                    source_ref=source,
                    excluded_reason=_RETRIEVAL_EXCLUSION.get(exclusion.reason, "policy_filter"),
                )
            )
        return None

    async def _handle(
        self, position: int, ref: HandleRef, out: _Collected, *, deadline: float, last_attempt: bool
    ) -> None:
        outcome: FetchOutcome = await fetch_handle(
            self._fetch_config(deadline), ref.ref_id, ref.kind, resolve=self._dns
        )
        source = f"artifact.handle[{position}]:{ref.ref_id}"
        record: dict[str, Any] = {
            "ref_type": "artifact.handle",
            "ref_index": position,
            "handle_id": ref.ref_id,
            "kind": ref.kind,
            "reason_code": outcome.reason_code,
            "detail": outcome.detail,
        }
        if not outcome.ok or outcome.content is None:
            if outcome.reason_code in TRANSIENT_FETCH_CODES and not last_attempt:
                raise ApplicationError(f"{outcome.reason_code}: {outcome.detail}", type=outcome.reason_code)
            out.records.append(record)
            out.excluded.append(
                ExclusionEntry(
                    item_id=f"handle:{ref.ref_id}",
                    item_type="evidence",
                    source_ref=source,
                    excluded_reason="fetch_refused",
                )
            )
            log.info("handle %s refused: %s", ref.ref_id, outcome.reason_code)
            return
        try:
            pointer = await aput(
                self._artifacts, outcome.content, kind="workbench-handle", media_type=outcome.media_type
            )
        except ArtifactError as exc:
            raise ApplicationError(
                f"could not store fetched content: {exc}", type="artifact.unavailable"
            ) from exc
        digest = f"sha256:{outcome.sha256}"
        record |= {
            "content_sha256": digest,
            "size_bytes": outcome.size_bytes,
            "artifact": pointer.recorded(),
        }
        out.records.append(record)
        out.add(
            ExternalItem(
                item_id=digest,
                source_ref=source,
                label=f"handle {ref.ref_id} ({ref.kind})",
                text=outcome.content.decode("utf-8", errors="replace"),
                included_reason="declared_handle",
            )
        )

    def _fetch_config(self, deadline: float) -> WorkbenchConfig:
        """The Workbench config with its timeout cut to end before the attempt does (a fetch that
        runs out records ``workbench.timeout`` on the last attempt instead of failing it)."""
        left_ms = int((deadline - asyncio.get_running_loop().time() - FETCH_MARGIN_S) * 1000)
        if left_ms >= self._workbench.timeout_ms:
            return self._workbench
        return self._workbench.model_copy(update={"timeout_ms": max(1, left_ms)})

    def _embedder(self, spec: EmbedderSpec) -> Embedder:
        # The index's embedder spec carries the job's timeout (60 s by default): a query embedding
        # inside a turn gets a shorter one, below the attempt's.
        limit = external_refs_options.QUERY_EMBED_TIMEOUT.total_seconds()
        if spec.timeout_s > limit:
            spec = spec.model_copy(update={"timeout_s": limit})
        key = spec.model_dump_json()
        if key not in self._embedders:
            self._embedders[key] = self._embedder_factory(spec)
        return self._embedders[key]


def _margin_s(timeout_s: float) -> float:
    return min(MAX_ATTEMPT_MARGIN_S, timeout_s * ATTEMPT_MARGIN_SHARE)


def _attempt_budget_s(start_to_close: timedelta | None) -> float:
    """Seconds this attempt's work may take: its start-to-close timeout less a margin."""
    timeout_s = (start_to_close or external_refs_options.ATTEMPT_TIMEOUT).total_seconds()
    return timeout_s - _margin_s(timeout_s)


@contextlib.asynccontextmanager
async def _heartbeating(timeout: timedelta | None) -> AsyncIterator[None]:
    """Heartbeat several times per ``timeout`` while the body runs (nothing when none is set)."""
    if not timeout:
        yield
        return

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(timeout.total_seconds() / HEARTBEATS_PER_TIMEOUT)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class _Collected:
    """Items, exclusions and records as they are resolved; texts capped at MAX_EXTERNAL_BYTES."""

    def __init__(self) -> None:
        self.items: list[ExternalItem] = []
        self.excluded: list[ExclusionEntry] = []
        self.records: list[dict[str, Any]] = []
        self._bytes = 0

    def add(self, item: ExternalItem) -> None:
        size = len(item.text.encode("utf-8"))
        if self._bytes + size > MAX_EXTERNAL_BYTES:
            self.excluded.append(
                ExclusionEntry(
                    item_id=item.item_id,
                    item_type="evidence",
                    source_ref=item.source_ref,
                    excluded_reason="budget_limit",
                )
            )
            return
        self._bytes += size
        self.items.append(item)

    def result(self) -> ExternalContext:
        return ExternalContext(
            items=tuple(self.items), excluded=tuple(self.excluded), records=tuple(self.records)
        )
