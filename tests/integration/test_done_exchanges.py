"""The turn stream's `done` event counts the exchanges a turn referenced (plus its own) whether
or not a prompt pack is loaded; a real stack without prompt packs."""

from __future__ import annotations

from tests.integration.test_streaming_e2e import read_sse
from tests.stack import running_stack


async def test_done_counts_referenced_exchanges_without_a_prompt_pack(settings) -> None:
    assert settings.prompts_dir is None
    async with running_stack(settings) as stack:
        first = (await stack.chat("What is 2+2?", correlation_id="c-1", thread_id="t")).json()
        second = (
            await stack.chat(
                "Explain more",
                correlation_id="c-2",
                thread_id="t",
                parent_turn_id="c-1",
                declared_refs=[{"ref_type": "event", "ref_id": "c-1"}],
            )
        ).json()
        third = (
            await stack.chat(
                "And 3+3?",
                correlation_id="c-3",
                thread_id="t",
                parent_turn_id="c-2",
                declared_refs=[
                    {"ref_type": "event", "ref_id": "c-1"},
                    {"ref_type": "event", "ref_id": "c-2"},
                ],
            )
        ).json()
        dones = []
        for correlation_id in ("c-1", "c-2", "c-3"):
            async with stack.http.stream("GET", f"/turns/{correlation_id}/stream") as resp:
                dones.append((await read_sse(resp))[-1])
    assert [kind for kind, _ in dones] == ["done", "done", "done"]
    assert [done["exchanges_count"] for _, done in dones] == [1, 2, 3]
    recorded = [body["execution"]["payload"]["exchanges_count"] for body in (first, second, third)]
    assert recorded == [1, 2, 3]
