"""The versioned JSON Schemas of /capabilities and /status: published in the package and in
docs/schemas/ (the same bytes), and every live answer validates against them."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest

from tests.stack import running_stack
from turngate.schemas import (
    CAPABILITIES_SCHEMA_VERSION,
    GATEWAY_CAPABILITIES_SCHEMA_VERSION,
    STATUS_SCHEMA_VERSION,
    load_schema,
    published_files,
    schema_text,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def _validator(version: str) -> jsonschema.Draft202012Validator:
    schema = load_schema(version)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == version
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize(("version", "name"), sorted(published_files().items()))
def test_the_docs_publish_the_same_schema_as_the_package(version: str, name: str) -> None:
    assert (DOCS / name).read_text(encoding="utf-8") == schema_text(version)


async def test_live_capabilities_and_status_match_their_schemas(settings) -> None:
    capabilities = _validator(CAPABILITIES_SCHEMA_VERSION)
    status = _validator(STATUS_SCHEMA_VERSION)
    async with running_stack(settings) as stack:
        await stack.chat("hi", correlation_id="c-1")
        caps = (await stack.http.get("/capabilities")).json()
        now = (await stack.http.get("/status")).json()
    capabilities.validate(caps)
    status.validate(now)
    assert caps["schema_version"] == CAPABILITIES_SCHEMA_VERSION
    assert now["schema_version"] == STATUS_SCHEMA_VERSION

    # The schemas bite: a missing section, a wrong version or type is refused.
    for broken, path in ((copy.deepcopy(caps), ("limits",)), (copy.deepcopy(now), ("job_runtime", "llm"))):
        target = broken
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
        validator = capabilities if broken.get("schema_version") == CAPABILITIES_SCHEMA_VERSION else status
        assert not validator.is_valid(broken), path
    assert not capabilities.is_valid(caps | {"schema_version": "turngate.capabilities.2"})
    assert not status.is_valid(now | {"ledger": {"length": "3", "head_digest": None}})


async def test_the_published_gateway_shape_matches_its_schema(settings) -> None:
    """`?format=gateway.v1`: the published DBL gateway's capabilities document, with the live
    answer's model list; an unknown format is a 422."""
    gateway = _validator(GATEWAY_CAPABILITIES_SCHEMA_VERSION)
    async with running_stack(settings, worker=False) as stack:
        caps = (await stack.http.get("/capabilities", params={"format": "gateway.v1"})).json()
        own = (await stack.http.get("/capabilities", params={"format": "turngate"})).json()
        unknown = await stack.http.get("/capabilities", params={"format": "gateway.v2"})
    gateway.validate(caps)
    assert caps["schema"] == caps["schema_version"] == "gateway.capabilities.v1"
    assert caps["interface_version"] == own["interface_version"]
    echo = next(p for p in caps["providers"] if p["id"] == "echo")
    assert [m["id"] for m in echo["models"]] == next(
        p["models"] for p in own["providers"]["providers"] if p["name"] == "echo"
    )
    assert "gateway.observer_mode" in caps["failure_codes"] and "REF_NOT_FOUND" in caps["failure_codes"]
    assert caps["limits"]["max_refs"] == own["limits"]["max_refs"]
    paths = {e["path"] for e in caps["api"]["endpoints"]}
    assert paths >= {"/ingress/intent", "/snapshot", "/tail", "/status"}
    assert unknown.status_code == 422 and unknown.json()["reason_code"] == "request.invalid_parameter"

    # The schema bites: the turngate answer is not this shape, nor one without its providers.
    assert not gateway.is_valid(own)
    assert not gateway.is_valid({k: v for k, v in caps.items() if k != "providers"})
    assert not gateway.is_valid(caps | {"intents": {"supported": ["chat.message"]}})
