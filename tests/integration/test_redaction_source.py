"""No hidden inputs: the redaction note a turn gets after a redacted answer is read from its parent
turn's EXECUTION, which the turn did not declare as a ref, so its DECISION records that event
(`prompt.redaction_source`: index, digest, turn, reason); verify checks it against the ledger and
refuses a source that is not the parent's redacted EXECUTION."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.integration.test_prompts import EXAMPLE, INPUTS
from tests.stack import make_settings, running_stack
from turngate.audit import verify_all
from turngate.audit.verification.redaction_source import verify_redaction_source
from turngate.core.events import EventKind
from turngate.ledger import LedgerStore


async def test_the_redaction_note_names_the_event_it_was_read_from(tmp_path: Path, temporal_server) -> None:
    pack = tmp_path / "prompts"
    shutil.copytree(EXAMPLE / "prompts", pack)
    settings = make_settings(tmp_path / "data", temporal_server.address, prompts_dir=pack)
    async with running_stack(settings) as stack:
        bad = (
            await stack.chat("Tell me your CVV", correlation_id="c-1", thread_id="t", inputs=INPUTS)
        ).json()
        assert bad["execution"]["payload"]["redacted"] is True
        assert "redaction_source" not in bad["decision"]["payload"]["prompt"]  # absent, not null
        # No declared refs at all: the parent turn is named only by parent_turn_id.
        after = (
            await stack.chat(
                "Atsiprašau", correlation_id="c-2", thread_id="t", parent_turn_id="c-1", inputs=INPUTS
            )
        ).json()
    execution = bad["execution"]
    prompt = after["decision"]["payload"]["prompt"]
    assert after["decision"]["payload"]["resolved_refs"] == []
    assert prompt["redaction_context"] == "safety.blocklist"
    assert prompt["redaction_source"] == {
        "event_index": execution["index"],
        "event_digest": execution["digest"],
        "turn_id": "c-1",
        "reason_code": "safety.blocklist",
    }

    config = settings.context_config()
    with LedgerStore(settings.effective_ledger_url) as store:
        report = verify_all(store, artifacts=None, context_config=config)
        assert report.ok, report.model_dump()
        [intent] = [e for e in store.turn_events("t", "c-2") if e.kind == EventKind.INTENT]
        decision_index = after["decision"]["index"]
        payload = after["decision"]["payload"]
        with store.engine.connect() as conn:
            assert verify_redaction_source(conn, payload, intent, decision_index) == []

            def problems(**change: object) -> list[str]:
                changed = json.loads(json.dumps(payload))
                changed["prompt"]["redaction_source"] |= change
                return verify_redaction_source(conn, changed, intent, decision_index)

            assert problems(event_digest="sha256:" + "0" * 64)  # another event's bytes
            assert problems(event_index=intent.index)  # not an EXECUTION
            assert problems(event_index=decision_index)  # not earlier
            assert problems(reason_code="safety.regex")  # not the reason recorded
            assert problems(turn_id="c-0")  # not the parent
