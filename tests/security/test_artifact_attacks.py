"""Attacks on artifacts through the HTTP API of a real stack with two tenants, ``acme`` and
``evil``: pointers planted in client data (to read acme's artifacts, or to poison verification),
a pointer whose path is another object's, a client-set offloaded-message pointer, uploads of the
same bytes by both tenants and an ingest of acme's upload by evil. Every one is refused, and the
refusal says nothing that an absent artifact would not."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.security.conftest import bearer, make_key
from tests.stack import envelope, running_stack
from turngate.artifacts import ArtifactNotFoundError, LocalArtifactStore, artifact_path, is_content_addressed
from turngate.audit.report import verify_command
from turngate.settings import Settings

ABSENT = "sha256:" + "e" * 64


async def _chat(http: httpx.AsyncClient, key: str, cid: str, **payload: Any) -> httpx.Response:
    return await http.post(
        "/ingress/intent",
        params={"wait": "execution"},
        json=envelope(f"turn {cid}", correlation_id=cid, thread_id=f"thread-{cid}", **payload),
        headers=bearer(key),
    )


async def _artifact(http: httpx.AsyncClient, key: str, cid: str, artifact_id: str) -> httpx.Response:
    return await http.get(
        "/ui/api/artifact", params={"correlation_id": cid, "artifact_id": artifact_id}, headers=bearer(key)
    )


def _planted(manifest: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Pointer-shaped objects evil sends as its own data: acme's manifest as acme's turn recorded
    it, one naming acme's other artifact by path under evil-chosen hashes, one that climbs out of
    the store, and one to nothing."""
    digest = manifest["sha256"]
    return {
        "copy": dict(manifest),
        "path_of_another": {**manifest, "path": other["path"]},
        "other_hash_this_path": {**other, "artifact_id": digest, "sha256": digest},
        "climb": {**manifest, "path": "../../../etc/passwd"},
        "missing": {
            "artifact_id": ABSENT,
            "path": artifact_path("standard", "manifest", ABSENT),
            "sha256": ABSENT,
            "size_bytes": 3,
        },
    }


async def test_planted_pointers_read_nothing_and_do_not_poison_verify(secure_settings: Settings) -> None:
    acme = make_key(secure_settings, "acme", "intent.write,snapshot.read")
    evil = make_key(secure_settings, "evil", "intent.write,snapshot.read")
    admin = make_key(secure_settings, "*", "admin")
    async with running_stack(secure_settings) as stack:
        http = stack.http
        theirs = await _chat(http, acme, "acme-1")
        assert theirs.status_code == 202, theirs.text
        manifest = theirs.json()["decision"]["payload"]["manifest"]
        other = theirs.json()["execution"]["payload"]["manifest"]
        assert manifest["sha256"] != other["sha256"]
        own = await _artifact(http, acme, "acme-1", manifest["sha256"])
        assert own.status_code == 200 and own.json()["media"] == "json"  # acme reads its own

        planted = _planted(manifest, other)
        attack = await _chat(http, evil, "evil-1", inputs=planted, payload={"message": "look", "x": planted})
        assert attack.status_code == 202, attack.text  # pointer-shaped client data is plain data
        assert attack.json()["decision"]["payload"]["decision"] == "ALLOW"

        absent = await _artifact(http, evil, "evil-1", ABSENT)
        assert absent.status_code == 404 and absent.json()["reason_code"] == "ui.artifact_not_found"
        for target in (manifest["sha256"], other["sha256"]):
            stolen = await _artifact(http, evil, "evil-1", target)
            assert (stolen.status_code, stolen.json()) == (404, absent.json())
            via_acme = await _artifact(http, evil, "acme-1", target)  # acme's turn is not evil's
            assert via_acme.status_code == 404

        # Whole-ledger verification stays OK: planted pointers are never checked.
        report = (await http.get("/verify", headers=bearer(admin))).json()
        assert report["ok"], report["failures"]
        theirs_only = await http.get("/verify", params={"thread_id": "thread-evil-1"}, headers=bearer(evil))
        assert theirs_only.json()["ok"], theirs_only.json()
    out, err = io.StringIO(), io.StringIO()
    code = verify_command(
        secure_settings, thread_id=None, since=None, until=None, as_json=True, out=out, err=err
    )
    assert code == 0, out.getvalue() + err.getvalue()  # `turngate verify`


async def test_a_client_cannot_set_the_offloaded_message_pointer(secure_settings: Settings) -> None:
    """The gateway reads an offloaded message back from ``payload.payload.message_artifact``: a
    client naming acme's manifest there would have the model repeat it. Refused at the door."""
    acme = make_key(secure_settings, "acme", "intent.write,snapshot.read")
    evil = make_key(secure_settings, "evil", "intent.write,snapshot.read")
    async with running_stack(secure_settings) as stack:
        http = stack.http
        manifest = (await _chat(http, acme, "acme-2")).json()["decision"]["payload"]["manifest"]
        for field, value in (("message_artifact", manifest), ("message_truncated", True)):
            resp = await _chat(http, evil, f"evil-{field}", payload={"message": "hi", field: value})
            assert resp.status_code == 422
            assert resp.json()["reason_code"] == "admission.server_owned_field"
            assert resp.json()["field"] == f"payload.payload.{field}"
        snap = (await http.get("/snapshot", headers=bearer(evil))).json()
        assert snap["length"] == 0  # nothing recorded


async def test_a_missing_artifact_answers_without_a_server_path(secure_settings: Settings) -> None:
    acme = make_key(secure_settings, "acme", "intent.write,snapshot.read")
    async with running_stack(secure_settings) as stack:
        turn = (await _chat(stack.http, acme, "acme-3")).json()
        manifest = turn["decision"]["payload"]["manifest"]
        (secure_settings.data_dir / "artifacts" / manifest["path"]).unlink()
        gone = await _artifact(stack.http, acme, "acme-3", manifest["sha256"])
        absent = await _artifact(stack.http, acme, "acme-3", ABSENT)
    assert (gone.status_code, gone.json()) == (404, absent.json())
    assert str(secure_settings.data_dir) not in gone.text and "local:" not in gone.text


async def test_uploads_are_per_tenant(secure_settings: Settings) -> None:
    acme = make_key(secure_settings, "acme", "intent.write,snapshot.read")
    evil = make_key(secure_settings, "evil", "intent.write,snapshot.read")
    data = b"acme's board minutes: the merger closes on Friday"
    async with running_stack(secure_settings) as stack:
        http = stack.http
        first = await http.post("/artifacts", params={"name": "m.txt"}, content=data, headers=bearer(acme))
        assert first.status_code == 201, first.text
        mine = first.json()["artifact"]
        second = await http.post("/artifacts", params={"name": "m.txt"}, content=data, headers=bearer(evil))
        assert second.status_code == 201
        theirs = second.json()["artifact"]
        # Same bytes, same sha256, but evil's own object: acme's upload time is not revealed.
        assert theirs["sha256"] == mine["sha256"] and theirs["path"] != mine["path"]
        again = await http.post("/artifacts", content=data, headers=bearer(acme))
        assert again.json()["artifact"] == mine  # idempotent within a tenant

        async def ingest(key: str, cid: str, artifact: dict[str, Any]) -> httpx.Response:
            body = {
                "interface_version": 3,
                "correlation_id": cid,
                "payload": {
                    "intent_type": "case.ingest",
                    "payload": {
                        "case_id": "loot",
                        "documents": [{"name": "m.txt", "artifact": artifact}],
                    },
                },
            }
            return await http.post("/ingress/intent", json=body, headers=bearer(key))

        nowhere = {
            **mine,
            "artifact_id": ABSENT,
            "sha256": ABSENT,
            "path": artifact_path("standard", "upload", ABSENT),
        }
        refused = [
            await ingest(evil, "evil-ingest-acme", mine),  # acme's upload
            await ingest(evil, "evil-ingest-other-path", {**theirs, "path": mine["path"]}),
            await ingest(evil, "evil-ingest-nothing", nowhere),
        ]
        for resp in refused:
            assert resp.status_code == 422, resp.text
            assert resp.json() == refused[-1].json()
            assert resp.json()["reason_code"] == "job.input_not_found"
        accepted = await ingest(evil, "evil-ingest-own", theirs)
        assert accepted.status_code == 202, accepted.text


def test_a_pointer_is_read_only_at_the_path_of_its_sha256(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    mine = store.put(b"mine", kind="manifest")
    secret = store.put(b"someone else's", kind="workbench-handle")
    forged = mine.model_copy(update={"path": secret.path})  # my hash, their path
    assert store.get(mine) == b"mine" and is_content_addressed(mine)
    assert not is_content_addressed(forged)
    with pytest.raises(ArtifactNotFoundError) as caught:
        store.get(forged)
    assert str(tmp_path) not in str(caught.value)
    renamed = mine.model_copy(update={"artifact_id": secret.artifact_id})
    assert not is_content_addressed(renamed)
