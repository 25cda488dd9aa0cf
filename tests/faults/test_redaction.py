"""Output safety sees the whole answer, and a redacted answer is not reachable (real stack, a
fake OpenAI server on loopback answering 200 KB, API keys on)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes import fake_openai
from tests.security.conftest import bearer, make_key
from tests.stack import envelope, make_settings, running_stack
from turngate.artifacts import open_artifact_store
from turngate.core.pointers import server_pointers

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trickster"
INPUTS = json.loads((EXAMPLE / "intent-inputs.json").read_text())
#: What identifies the answer's text wherever it might leak.
MARK = "Zebra crossing lesson"
ANSWER = f"{MARK} number one. " * 6_000 + "Now type your CVV here."  # ~200 KB, the term at its very end


@pytest.fixture
def blocklist_pack(tmp_path: Path) -> Path:
    """The Trickster pack with one output rule: the blocklist (no length or regex rule that a
    long answer would trip first)."""
    target = tmp_path / "prompts"
    shutil.copytree(EXAMPLE / "prompts", target)
    profiles = json.loads((target / "profiles.json").read_text())
    profiles["output_safety"] = {
        "rules": [rule for rule in profiles["output_safety"]["rules"] if rule["type"] == "blocklist"]
    }
    (target / "profiles.json").write_text(json.dumps(profiles))
    return target


async def sse_events(http: httpx.AsyncClient, method: str, url: str, **kw: Any) -> list[tuple[str, str]]:
    """Every (event, data) of an SSE response, read until the server ends the stream."""
    found: list[tuple[str, str]] = []
    name, data = "message", ""
    async with http.stream(method, url, timeout=120, **kw) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
            elif not line and data:
                found.append((name, data))
                name, data = "message", ""
    return found


async def test_a_200_kb_answer_with_a_blocklisted_term_at_its_end_is_redacted_and_unreachable(
    tmp_path, temporal_server, blocklist_pack
) -> None:
    assert len(ANSWER.encode()) > 200_000 and ANSWER.index("CVV") > 190_000
    with fake_openai(ANSWER) as server:
        # A sentence a piece (6,001 pieces, not 30,000 words): the size and the term's place at
        # the very end are what is tested, not how finely the answer is cut.
        server.words_per_piece = 5
        settings = make_settings(
            tmp_path,
            temporal_server.address,
            auth_mode="keys",
            prompts_dir=blocklist_pack,
            openai_api_key="sk-test-redaction-0123456789",
            openai_base_url=server.base_url,
            default_provider="openai",
        )
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        writer = bearer(make_key(settings, "acme", "intent.write"))
        reader = bearer(make_key(settings, "acme", "snapshot.read"))
        admin = bearer(make_key(settings, "*", "admin"))
        async with running_stack(settings) as stack:
            http = stack.http
            body = envelope("Tell me a story", correlation_id="c-red", thread_id="t-red", inputs=INPUTS)
            live = await sse_events(
                http, "POST", "/ingress/intent", params={"stream": "true"}, json=body, headers=writer
            )
            late = await sse_events(http, "GET", "/turns/c-red/stream", headers=reader)
            turn = (await http.get("/ui/api/turn", params={"correlation_id": "c-red"}, headers=reader)).json()
            pointers = [p for e in turn["events"] for p in server_pointers(e["kind"], e["payload"])]
            artifacts = {
                p["artifact_id"]: await http.get(
                    "/ui/api/artifact",
                    params={"correlation_id": "c-red", "artifact_id": p["artifact_id"]},
                    headers=reader,
                )
                for p in pointers
            }
            reads = [
                await http.get("/snapshot", params={"limit": 1000}, headers=reader),
                await http.get("/ui/api/turns", params={"thread_id": "t-red"}, headers=reader),
                await http.get("/ui/api/threads", headers=reader),
                await http.get("/verify", params={"thread_id": "t-red"}, headers=reader),
                await http.get("/status", headers=reader),
            ]
            execution = next(e["payload"] for e in turn["events"] if e["kind"] == "EXECUTION")
            snapshot = execution["fault_snapshots"]["redacted_output"]
            as_admin = await http.get(
                "/ui/api/artifact",
                params={"correlation_id": "c-red", "artifact_id": snapshot["artifact_id"]},
                headers=admin,
            )

    # The whole answer was checked: the term 200 KB in is found, the EXECUTION holds no text.
    assert execution["redacted"] is True and execution["output_text"] == ""
    assert execution["redaction"]["reason_code"] == "safety.blocklist"
    assert "'CVV'" in execution["redaction"]["detail"] and "offset 2" in execution["redaction"]["detail"]
    assert "output_artifact" not in execution and "output_truncated" not in execution
    # The streams end with redact: the live one (after its tokens), and a late reader's.
    assert live[-1][0] == "redact" and late[-1][0] == "redact"
    assert json.loads(late[-1][1])["reason"] == "safety.blocklist"
    assert all(name != "token" for name, _ in late)

    # No route gives the text to a snapshot.read key; the redaction snapshot is refused (403).
    for response in reads:
        assert response.status_code == 200, response.text
        assert MARK not in response.text
    assert MARK not in json.dumps(turn) and MARK not in "".join(data for _, data in late)
    assert artifacts[snapshot["artifact_id"]].status_code == 403
    assert artifacts[snapshot["artifact_id"]].json()["reason_code"] == "auth.forbidden"
    for artifact_id, response in artifacts.items():
        if artifact_id != snapshot["artifact_id"]:
            assert response.status_code == 200 and MARK not in response.text
    # The documented access: an admin key reads the snapshot.
    assert as_admin.status_code == 200 and as_admin.json()["content"] == ANSWER

    # In the artifact store the raw answer exists once: the snapshot-retention redaction snapshot.
    store = open_artifact_store(settings.effective_artifacts)
    holding = [r.pointer.path for r in store.iter_artifacts() if MARK.encode() in store.get(r.pointer)]
    assert holding == [snapshot["path"]] and snapshot["path"].startswith("snapshot/redacted_output/")
