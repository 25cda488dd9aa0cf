"""The admin key `turngate dev` prints: one per data directory, reused on every start.

The secret is kept beside the ledger in ``<data dir>/dev-api-key`` (mode 0600; the ledger only
holds its sha256). A start reuses it while it is active; otherwise (first start, file deleted,
key revoked) every other active ``turngate dev`` key is revoked and a new one is made, so
restarts never pile up live admin keys.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from sqlalchemy import Engine

from turngate.security.keys import KeyStore

DEV_TENANT = "dev"
DEV_KEY_NAME = "turngate dev"
DEV_KEY_FILE = "dev-api-key"


def dev_key(engine: Engine, data_dir: Path) -> str:
    """The secret of this data directory's dev key (tenant ``dev``, role ``admin``)."""
    keys = KeyStore(engine)
    path = data_dir / DEV_KEY_FILE
    with contextlib.suppress(FileNotFoundError):
        secret = path.read_text(encoding="utf-8").strip()
        found = keys.lookup(secret)
        if found is not None and found.name == DEV_KEY_NAME and found.tenant_id == DEV_TENANT:
            return secret
    for key in keys.list():
        if key.name == DEV_KEY_NAME and key.tenant_id == DEV_TENANT and key.revoked_at is None:
            keys.revoke(key.key_id)
    secret = keys.create(DEV_TENANT, "admin", name=DEV_KEY_NAME).secret
    _write_private(path, secret)
    return secret


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by the owner only, replacing the file atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    os.replace(tmp, path)
