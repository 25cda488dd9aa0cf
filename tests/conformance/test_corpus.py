"""The conformance corpus of the published DBL gateway (``corpus.json``, recorded against
``dbl-gateway==1.0.1`` by ``record.py``), run against turngate: every case's request is sent, in
order, to an in-process stack (API, worker, Temporal dev server) configured as the recording
was (allow-all policy, the same fake Ollama provider and model, context ``max_refs`` 50 and
``ALLOW_EMPTY``), once in dev auth and once with keys and the keyless read-only mode, and the
answer must meet the recorded expectations, or, where a case carries a ``differs`` note, the
documented behaviour it names. See docs/CONFORMANCE.md."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from bench.dbl_provider import MODEL
from bench.dbl_provider import app as fake_ollama

from tests.conformance.runner import Run, observe
from tests.stack import make_settings, running_stack
from turngate.cli import _uvicorn_server
from turngate.devserver import DevServer, free_port
from turngate.ledger import LedgerStore
from turngate.security.keys import KeyStore

REPO = Path(__file__).resolve().parents[2]
CORPUS = json.loads(Path(__file__).with_name("corpus.json").read_text())
CASES = CORPUS["cases"]


def expected(case: dict[str, Any]) -> dict[str, Any]:
    """The recorded expectation, with a ``differs`` note's documented behaviour applied."""
    expect: dict[str, Any] = copy.deepcopy(case["expect"])
    differs = case.get("differs")
    if not differs:
        return expect
    drop = set(differs.get("drop_event_kinds", ()))
    if expect.get("events") and drop:
        expect["events"] = [e for e in expect["events"] if e["kind"] not in drop]
    for kind, values in differs.get("event_values", {}).items():
        for event in expect.get("events") or []:
            if event["kind"] == kind:
                event.update(values)
    changed = differs.get("expect", {})
    if changed.get("status", expect["status"]) != expect["status"]:
        expect["body"] = {}  # another answer: the recorded body does not apply
    for key, value in changed.items():
        if key in ("values", "types") and isinstance(value, dict):
            expect.setdefault("body", {}).setdefault(key, {}).update(value)
        elif key == "fields":
            expect.setdefault("body", {})["fields"] = value
        elif key == "events" and value is None:
            expect.pop("events", None)
        else:
            expect[key] = value
    return expect


def as_sent(case: dict[str, Any]) -> dict[str, Any]:
    """The case, also asking the answer for the paths its ``differs`` expectations name."""
    changed = case.get("differs", {}).get("expect", {})
    extra = {group: [*case.get(group, []), *changed.get(group, {})] for group in ("values", "types")}
    return {**case, **extra}


def mismatches(expect: dict[str, Any], observed: dict[str, Any]) -> list[str]:
    """What ``observed`` misses of ``expect``: a compatible gateway may add fields, never drop
    or retype one, and must give every contractual value."""
    found = []
    if observed["status"] != expect["status"]:
        found.append(f"status {observed['status']} != {expect['status']}")
    body, seen = expect.get("body", {}), observed.get("body", {})
    if isinstance(body, dict) and isinstance(seen, dict):
        for name, kind in body.get("fields", {}).items():
            if seen.get("fields", {}).get(name) != kind:
                found.append(f"field {name}: {seen.get('fields', {}).get(name)} != {kind}")
        for group in ("types", "values"):
            for path, want in body.get(group, {}).items():
                got = seen.get(group, {}).get(path)
                if got != want:
                    found.append(f"{group[:-1]} {path}: {got!r} != {want!r}")
    if "events" in expect:
        got_events = observed.get("events")
        if got_events != expect["events"]:
            found.append(f"events {got_events} != {expect['events']}")
    elif observed.get("events"):
        found.append(f"unexpected events {observed['events']}")
    if "sse" in expect:
        for key, want in expect["sse"].items():
            got = observed.get("sse", {}).get(key)
            if key == "data_fields":
                missing = sorted(set(want) - set(got or []) - SSE_FIELDS_NOT_KEPT)
                if missing:
                    found.append(f"sse data fields missing: {missing}")
            elif got != want:
                found.append(f"sse {key}: {got} != {want}")
    return found


# The published gateway's event fields that are its storage details, not in the wire contract
# (docs/CONFORMANCE.md): a compatible event carries the others.
SSE_FIELDS_NOT_KEPT = {"canon_len", "is_authoritative"}


@pytest.fixture(scope="module")
async def provider_url() -> AsyncIterator[str]:
    """The recording's fake Ollama provider (bench/dbl_provider.py), served in-process."""
    server = _uvicorn_server(fake_ollama(0.003), "127.0.0.1", free_port())
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        await task


#: Routes a client of the published gateway reads without a key under turngate's keyless
#: read-only mode (docs/SECURITY.md); every other route gets a key there.
KEYLESS = ("/snapshot", "/tail", "/status", "/capabilities", "/healthz")


@pytest.fixture(scope="module", params=["dev", "keyless_read"])
async def observations(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    temporal_server: DevServer,
    provider_url: str,
) -> dict[str, dict[str, Any]]:
    """Every case's answer from one stack: ``dev`` (``turngate dev``'s loopback auth, no key at
    all), or ``keyless_read`` (keys on, ``TURNGATE_KEYLESS_READ``: the read routes without a
    key, the rest with one, as an observer client of the published gateway beside a writer)."""
    auth = {"auth_mode": "keys", "keyless_read": True} if request.param == "keyless_read" else {}
    settings = make_settings(
        tmp_path_factory.mktemp("conformance"),
        temporal_server.address,
        ollama_host=provider_url,
        ollama_model_ids=MODEL,
        default_provider="ollama",
        context_max_refs="50",
        context_empty_refs_policy="ALLOW_EMPTY",
        **auth,
    )
    key: dict[str, str] = {}
    if auth:
        with LedgerStore(settings.effective_ledger_url) as ledger:
            secret = KeyStore(ledger.engine).create("*", "intent.write,snapshot.read", "conformance").secret
        key = {"Authorization": f"Bearer {secret}"}
    run = Run(token=uuid.uuid4().hex[:10])
    seen: dict[str, dict[str, Any]] = {}
    async with running_stack(settings) as stack:
        for case in CASES:
            keyless = case["request"]["path"] in KEYLESS and case["request"]["method"] == "GET"
            seen[case["name"]] = await observe(stack.http, as_sent(case), run, {} if keyless else key)
    return seen


def _anchors(doc: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    anchors = set()
    for line in doc.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    return anchors


def test_every_difference_names_a_docs_section_that_exists() -> None:
    assert CORPUS["recorded_against"] == "dbl-gateway==1.0.1"
    assert len(CASES) >= 30
    for case in (c for c in CASES if "differs" in c):
        assert case["differs"]["note"], case["name"]
        for where in case["differs"]["doc"].split("; "):
            path, _, anchor = where.partition("#")
            assert path.startswith("docs/") and anchor in _anchors(REPO / path), (case["name"], where)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case: dict[str, Any], observations: dict[str, dict[str, Any]]) -> None:
    observed = observations[case["name"]]
    found = mismatches(expected(case), observed)
    assert not found, "\n".join([case["doc"], *found])
