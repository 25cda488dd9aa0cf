"""Case job intents at ingress: typed bodies, clear admission codes, deterministic job ids, the
embedder a client may choose (never a URL), and the configured default."""

from __future__ import annotations

import base64

import pytest

from turngate.core.events import AdmissionError
from turngate.jobs.domain.intents import (
    EmbedBody,
    IngestBody,
    embedder_spec,
    is_job_intent,
    job_id_for,
    parse_job_intent,
)
from turngate.settings import load_settings


def intent(job_type: str, body: dict) -> dict:
    return {
        "interface_version": 3,
        "correlation_id": "c-1",
        "payload": {"intent_type": job_type, "payload": body},
    }


def test_job_intents_are_told_apart_from_chat_messages() -> None:
    assert is_job_intent(intent("case.ingest", {}))
    assert not is_job_intent(intent("chat.message", {"message": "hi"}))
    assert not is_job_intent(["case.ingest"]) and not is_job_intent({"payload": "x"})


def test_an_ingest_body_takes_text_base64_or_an_artifact() -> None:
    pdf = base64.b64encode(b"%PDF-1.4").decode()
    docs = [
        {"name": "a.txt", "text": "alpha"},
        {"name": "b.pdf", "content_base64": pdf, "media_type": "application/pdf"},
    ]
    envelope, body = parse_job_intent(intent("case.ingest", {"case_id": " c ", "documents": docs}))
    assert isinstance(body, IngestBody) and body.case_id == "c" and envelope.job_type == "case.ingest"
    assert [d.inline_bytes() for d in body.documents] == [b"alpha", b"%PDF-1.4"]


@pytest.mark.parametrize(
    ("job_type", "body", "code", "where"),
    [
        ("case.ingest", {"case_id": "c", "documents": []}, "admission.invalid_value", "documents"),
        ("case.ingest", {"documents": [{"name": "a", "text": "x"}]}, "admission.missing_field", "case_id"),
        (
            "case.ingest",
            {"case_id": "c", "documents": [{"name": "a"}]},
            "admission.invalid_value",
            "documents",
        ),
        (
            "case.ingest",
            {"case_id": "c", "documents": [{"name": "a", "content_base64": "!!"}]},
            "admission.invalid_value",
            "documents",
        ),
        ("case.embed", {"case_id": "c", "chunks": "not-a-digest"}, "admission.invalid_value", "chunks"),
        (
            "case.embed",
            {"case_id": "c", "embedder": {"kind": "openai", "base_url": "http://x"}},
            "admission.invalid_value",
            "base_url",
        ),
        ("case.index", {"case_id": "c", "surprise": 1}, "admission.invalid_value", "surprise"),
    ],
)
def test_bad_bodies_get_a_code_and_a_location(job_type: str, body: dict, code: str, where: str) -> None:
    with pytest.raises(AdmissionError) as caught:
        parse_job_intent(intent(job_type, body))
    assert caught.value.reason_code == code
    assert where in str(caught.value.as_dict())


def test_a_client_supplied_principal_is_ignored() -> None:
    data = intent("case.index", {"case_id": "c"}) | {"principal": {"tenant_id": "someone-else"}}
    envelope, _ = parse_job_intent(data)
    assert "principal" not in envelope.model_dump()


def test_job_ids_are_stable_per_deployment_tenant_and_correlation() -> None:
    one = job_id_for("case.embed", "jobs", "t1", "c-1")
    assert one == job_id_for("case.embed", "jobs", "t1", "c-1") and one.startswith("job-embed-")
    assert (
        len(
            {
                one,
                job_id_for("case.embed", "jobs", "t2", "c-1"),
                job_id_for("case.embed", "other", "t1", "c-1"),
                job_id_for("case.embed", "jobs", None, "c-1"),
                job_id_for("case.embed", "jobs", "t1", "c-2"),
            }
        )
        == 5
    )


def test_the_embedder_is_the_clients_choice_or_the_configured_default() -> None:
    offline = load_settings()
    assert embedder_spec(None, offline).embedder_id == "offline:hash-ngrams/1/dim=256"
    remote = load_settings(embedder="openai", embedder_model="text-embedding-3-large", embedder_dim=512)
    assert embedder_spec(None, remote).embedder_id == "openai:text-embedding-3-large/dim=512"
    _, body = parse_job_intent(intent("case.embed", {"case_id": "c", "embedder": {"kind": "ollama"}}))
    assert isinstance(body, EmbedBody)
    chosen = embedder_spec(body.embedder, remote)
    assert chosen.embedder_id == "ollama:nomic-embed-text" and chosen.base_url is None
