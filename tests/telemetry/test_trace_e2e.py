"""One turn through API -> Temporal -> worker is one trace (real Temporal dev server)."""

from __future__ import annotations

import asyncio

from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

from tests.stack import envelope
from tests.telemetry.wiring import traced_stack

SECRET = "zebra-violet-4711"
LAST_SPANS = ("RunActivity:turngate.call_and_record", "chat echo-1", "CompleteWorkflow:TurnWorkflow")


async def finished(spans, names=LAST_SPANS, timeout: float = 10.0):
    """The finished spans once ``names`` are among them (the last activity spans end just
    after the API has answered)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = spans.get_finished_spans()
        if {n for n in names} <= {s.name for s in found} or loop.time() > deadline:
            return found
        await asyncio.sleep(0.05)


def one(found, name: str, **attributes):
    matches = [
        s for s in found if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())
    ]
    assert len(matches) == 1, (name, attributes, [s.name for s in found])
    return matches[0]


def ancestors(found, span) -> list[str]:
    by_id = {s.context.span_id: s for s in found}
    names = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names


def all_text(span) -> str:
    parts = [span.name, *(str(v) for v in span.attributes.values())]
    for event in span.events:
        parts += [event.name, *(str(v) for v in (event.attributes or {}).values())]
    return " ".join(parts)


async def test_one_turn_is_one_trace_with_genai_and_decision_spans(settings, spans) -> None:
    async with traced_stack(settings) as stack:
        resp = await stack.http.post(
            "/ingress/intent", params={"wait": "execution"}, json=envelope(SECRET, correlation_id="c-tr")
        )
        assert resp.status_code == 202, resp.text
        assert resp.json()["execution"]["payload"]["output_text"] == f"echo: {SECRET}"
        found = await finished(spans)

    assert len({s.context.trace_id for s in found}) == 1, [s.name for s in found]
    server = one(found, "POST /ingress/intent")
    assert server.kind == SpanKind.SERVER and server.parent is None
    assert server.attributes["http.route"] == "/ingress/intent"
    assert server.attributes["http.response.status_code"] == 202
    assert "POST /ingress/intent" in ancestors(found, one(found, "StartWorkflow:TurnWorkflow"))
    assert "StartWorkflow:TurnWorkflow" in ancestors(found, one(found, "RunWorkflow:TurnWorkflow"))

    # An allowed turn's DECISION, provider call and EXECUTION are one activity (docs/WORKFLOW.md).
    call = one(found, "RunActivity:turngate.call_and_record")
    # TracingInterceptor: the workflow's StartActivity spans hang off the StartWorkflow span.
    assert ancestors(found, call)[:2] == [
        "StartActivity:turngate.call_and_record",
        "StartWorkflow:TurnWorkflow",
    ]
    genai = one(found, "chat echo-1")
    assert genai.kind == SpanKind.CLIENT and genai.parent.span_id == call.context.span_id
    assert genai.status.status_code != StatusCode.ERROR
    assert {k: genai.attributes[k] for k in genai.attributes if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "echo",
        "gen_ai.system": "echo",
        "gen_ai.request.model": "echo-1",
        "gen_ai.response.model": "echo-1",
        "gen_ai.usage.input_tokens": 1,
        "gen_ai.usage.output_tokens": 2,
        "gen_ai.conversation.id": "c-tr",  # the thread
    }
    assert genai.attributes["turngate.correlation_id"] == "c-tr"
    assert not genai.events  # no content without TURNGATE_TRACE_CONTENT

    decision = one(found, "turngate.append_event DECISION", **{"turngate.event.kind": "DECISION"})
    attrs = decision.attributes
    assert attrs["turngate.decision"] == "ALLOW"
    assert attrs["turngate.reason_codes"] == ("policy.allow_all",)
    assert attrs["turngate.context_digest"].startswith("sha256:")
    assert attrs["turngate.policy_id"] == "turngate.allow_all"
    assert (attrs["turngate.thread_id"], attrs["turngate.turn_id"], attrs["turngate.correlation_id"]) == (
        "c-tr",
        "c-tr",
        "c-tr",
    )
    assert ancestors(found, decision)[:1] == ["RunActivity:turngate.call_and_record"]
    execution = one(found, "turngate.append_event EXECUTION", **{"turngate.event.kind": "EXECUTION"})
    assert "turngate.decision" not in execution.attributes
    intent = one(found, "RunActivity:turngate.begin_turn")
    assert (
        intent.attributes["turngate.event.kind"] == "INTENT" and "turngate.decision" not in intent.attributes
    )

    leaks = [s.name for s in found if SECRET in all_text(s)]
    assert leaks == []  # message text never reaches a span by default


async def test_turn_metrics_move_and_metrics_endpoint_serves_prometheus_text(settings) -> None:
    async with traced_stack(settings) as stack:
        for n in range(2):
            resp = await stack.http.post(
                "/ingress/intent",
                params={"wait": "execution"},
                json=envelope("hi you", correlation_id=f"c-{n}"),
            )
            assert resp.status_code == 202
        scrape = await stack.http.get("/metrics")
        worker = stack.worker_metrics.registry

    value = worker.get_sample_value
    assert value("turngate_turns_total", {"decision": "ALLOW"}) == 2
    assert (
        value(
            "turngate_provider_latency_seconds_count",
            {"provider": "echo", "model": "echo-1", "outcome": "ok"},
        )
        == 2
    )
    assert value("turngate_provider_tokens_total", {"provider": "echo", "direction": "output"}) == 6
    assert value("turngate_ledger_events") == 6

    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain; version=")
    families = {f.name: f for f in text_string_to_metric_families(scrape.text)}
    assert {"turngate_turns", "turngate_provider_latency_seconds", "turngate_queue_size"} <= set(families)
    queues = {s.labels["queue"]: s.value for s in families["turngate_queue_size"].samples}
    assert set(queues) == {"turns", "llm"} and all(v >= 0 for v in queues.values())
