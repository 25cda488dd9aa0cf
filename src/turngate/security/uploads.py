"""Uploads belong to the tenant that made them.

An upload (``POST /artifacts``, or an inline document of a ``case.ingest``) is stored under an
artifact kind of its tenant's own, ``upload.<16 hex of sha256(tenant id)>`` (``upload`` without a
tenant: dev mode, operator keys). Identical bytes uploaded by two tenants are two objects, so
the second upload learns nothing of the first (neither its existence nor its ``created_at``),
and a ``case.ingest`` may reference only an upload of the caller's tenant: a pointer to any
other object, another tenant's upload or a path that is not its sha256's is refused exactly like
an absent one.
"""

from __future__ import annotations

import hashlib

from turngate.artifacts import ArtifactStore, is_content_addressed, parse_artifact_path
from turngate.core.manifest import ArtifactPointer

UPLOAD_KIND = "upload"


def upload_kind(tenant_id: str | None) -> str:
    """The artifact kind of ``tenant_id``'s uploads."""
    if tenant_id is None:
        return UPLOAD_KIND
    return f"{UPLOAD_KIND}.{hashlib.sha256(tenant_id.encode('utf-8')).hexdigest()[:16]}"


def is_own_upload(store: ArtifactStore, pointer: ArtifactPointer, tenant_id: str | None) -> bool:
    """Whether ``pointer`` names an intact upload of ``tenant_id`` (blocks: call in a thread)."""
    if not is_content_addressed(pointer):
        return False
    parsed = parse_artifact_path(pointer.path)
    if parsed is None or parsed.kind != upload_kind(tenant_id) or parsed.retention != "standard":
        return False
    return store.check(pointer).ok
