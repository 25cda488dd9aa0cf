"""Published, versioned JSON Schemas of the gateway's self-description (`/capabilities`, `/status`).

Each answer carries its ``schema_version``; a schema's ``$id`` is the same string. Within a
version fields may be added; renaming or removing one, or changing its type, makes a new version
(a new file beside the old one). The same files are in docs/schemas/.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

CAPABILITIES_SCHEMA_VERSION = "turngate.capabilities.1"
STATUS_SCHEMA_VERSION = "turngate.status.2"
#: ``GET /capabilities?format=gateway.v1``: the published DBL gateway's capabilities shape.
GATEWAY_CAPABILITIES_SCHEMA_VERSION = "gateway.capabilities.v1"

_FILES = {
    CAPABILITIES_SCHEMA_VERSION: "capabilities.schema.json",
    "turngate.status.1": "status.schema.json",
    STATUS_SCHEMA_VERSION: "status.2.schema.json",
    GATEWAY_CAPABILITIES_SCHEMA_VERSION: "capabilities.gateway.v1.schema.json",
}


@cache
def schema_text(schema_version: str) -> str:
    """The JSON Schema of ``schema_version`` as published (KeyError for an unknown version)."""
    return resources.files(__name__).joinpath(_FILES[schema_version]).read_text(encoding="utf-8")


def load_schema(schema_version: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(schema_text(schema_version))
    return schema


def published_files() -> dict[str, str]:
    """schema_version -> file name (in this package and in docs/schemas/)."""
    return dict(_FILES)
