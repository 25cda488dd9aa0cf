"""Artifacts the API serves to ``admin`` keys only: a redacted answer's raw text
(docs/SECURITY.md, "Redacted answers")."""

from __future__ import annotations

from turngate.artifacts.store import ArtifactStore, artifact_path, parse_artifact_path
from turngate.core.manifest import ArtifactPointer
from turngate.core.safety import REDACTED_OUTPUT_KIND

#: Kinds whose bytes the API serves to ``admin`` keys only: a redacted answer's raw text.
RESTRICTED_KINDS: frozenset[str] = frozenset({REDACTED_OUTPUT_KIND})


def is_restricted_artifact(store: ArtifactStore, pointer: ArtifactPointer) -> bool:
    """True when ``pointer``'s bytes are (also) stored under a restricted kind. Decided by the
    digest, not only by the pointer's path: the same bytes named by another pointer (one a client
    wrote into its own data, say) are just as restricted."""
    parsed = parse_artifact_path(pointer.path)
    if parsed is not None and parsed.kind in RESTRICTED_KINDS:
        return True
    return any(
        store.exists(
            ArtifactPointer(
                artifact_id=pointer.sha256,
                path=artifact_path("snapshot", kind, pointer.sha256),
                sha256=pointer.sha256,
                size_bytes=pointer.size_bytes,
            )
        )
        for kind in sorted(RESTRICTED_KINDS)
    )
