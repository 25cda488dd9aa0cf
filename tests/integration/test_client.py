"""``turngate.client`` against a real stack: turns (wait and stream), snapshot paging, ``/tail``
resumed after a cut connection, verify, case jobs, uploads, and refusals as exceptions.

The cut connection is real: a loopback TCP proxy between client and API that the test closes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from tests.fakes.llm_servers import refused_url
from tests.stack import Stack, running_stack
from turngate.client import AsyncTurngate, Event, Turngate, TurngateError, Unreachable, intent_envelope


def url_of(stack: Stack) -> str:
    return str(stack.http.base_url).rstrip("/")


async def test_turns_sync_and_async(settings) -> None:
    async with running_stack(settings) as stack, AsyncTurngate(url_of(stack)) as tg:
        first = await tg.chat("hello client", correlation_id="c-client-1", thread_id="th-client")
        assert first.allowed is True and first.output_text == "echo: hello client"
        assert first.execution is not None and first.execution.kind == "EXECUTION"
        second = await tg.chat(
            "and again",
            thread_id="th-client",
            parent_turn_id="c-client-1",
            refs=["c-client-1", "execution:c-client-1"],
        )
        assert second.decision is not None
        assert [r["event_index"] for r in second.decision.payload["resolved_refs"]] == [
            first.index,
            first.execution.index,
        ]

        def sync_use() -> tuple[str | None, str, list[int]]:
            with Turngate(url_of(stack)) as sync:
                answer = sync.chat("sync hello").output_text
                streamed = "".join(
                    e.data["text"]
                    for e in sync.stream_intent(intent_envelope("sync stream"))
                    if e.event == "token"
                )
                indexes = [e.index for e in sync.iter_events(page_size=2, thread_id="th-client")]
                return answer, streamed, indexes

        answer, streamed, indexes = await asyncio.to_thread(sync_use)
        assert answer == "echo: sync hello" and streamed == "echo: sync stream"
        assert indexes == [
            first.index,
            first.decision.index,
            first.execution.index,
            *range(second.index, second.index + 3),
        ]
        report = await tg.verify(thread_id="th-client")
        assert report.ok is True


async def test_streaming_a_turn(settings) -> None:
    streaming = settings.model_copy(update={"echo_delay_ms": 5})
    async with running_stack(streaming) as stack, AsyncTurngate(url_of(stack)) as tg:
        envelope = intent_envelope("stream me please", correlation_id="c-client-stream")
        events = [event async for event in tg.stream_intent(envelope)]
        text = "".join(e.data["text"] for e in events if e.event == "token")
        assert text == "echo: stream me please"
        assert events[-1].event == "done" and events[-1].data["correlation_id"] == "c-client-stream"
        # the same turn, later
        again = [event async for event in tg.stream_turn("c-client-stream")]
        assert "".join(e.data["text"] for e in again if e.event == "token") == text


async def test_snapshot_pages_cover_the_whole_ledger(settings) -> None:
    async with running_stack(settings) as stack, AsyncTurngate(url_of(stack)) as tg:
        for n in range(4):
            await tg.chat(f"message {n}", thread_id="th-pages")
        events = [event async for event in tg.iter_events(page_size=5, thread_id="th-pages")]
        assert [e.index for e in events] == list(range(12))  # 4 turns x 3 events, pages of 5
        page = await tg.snapshot(limit=5, offset=10, thread_id="th-pages")
        assert page.length == 12 and [e.index for e in page.events] == [10, 11]


class CuttableProxy:
    """A loopback TCP proxy whose open connections the test can cut."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()

    async def aclose(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()


@contextlib.asynccontextmanager
async def proxy_to(stack: Stack) -> AsyncIterator[tuple[CuttableProxy, str]]:
    proxy = CuttableProxy(stack.settings.port)
    port = await proxy.start()
    try:
        yield proxy, f"http://127.0.0.1:{port}"
    finally:
        await proxy.aclose()


async def test_tail_resumes_after_a_cut_connection_without_gaps_or_repeats(settings) -> None:
    async with (
        running_stack(settings) as stack,
        proxy_to(stack) as (proxy, url),
        AsyncTurngate(url) as tg,
        AsyncTurngate(url_of(stack)) as direct,
    ):
        seen: list[Event] = []

        async def follow() -> None:
            async for event in tg.tail(since=-1, reconnect_delay_s=0.2, max_reconnects=20):
                seen.append(event)
                if len(seen) == 9:
                    return

        follower = asyncio.create_task(follow())
        await direct.chat("before the cut")
        while len(seen) < 3:
            await asyncio.sleep(0.05)
        proxy.cut()
        await direct.chat("during the cut")
        await direct.chat("after the cut")
        await asyncio.wait_for(follower, timeout=60)
        assert [e.index for e in seen] == list(range(9))


async def test_refusals_and_unreachable_are_exceptions(settings) -> None:
    async with running_stack(settings) as stack, AsyncTurngate(url_of(stack)) as tg:
        with pytest.raises(TurngateError) as caught:
            await tg.send_intent({"interface_version": 3, "correlation_id": "c-x", "payload": {}})
        assert caught.value.reason_code == "admission.missing_field" and caught.value.status == 422
        with pytest.raises(TurngateError) as caught:
            await tg.job("no-such-job")
        assert caught.value.reason_code == "job.not_found" and caught.value.status == 404
    async with AsyncTurngate(refused_url()) as gone:
        with pytest.raises(Unreachable) as unreachable:
            await gone.capabilities()
        assert unreachable.value.reason_code == "client.unreachable"


async def test_case_job_upload_submit_and_watch(settings, tmp_path) -> None:
    document = tmp_path / "harbour.md"
    document.write_text("# Harbour\n\nThe keeper logs every passing ship at dusk.\n")
    async with running_stack(settings) as stack, AsyncTurngate(url_of(stack)) as tg:
        pointer = await tg.upload(document, media_type="text/markdown")
        assert pointer.size_bytes == document.stat().st_size
        receipt = await tg.submit_job(
            "case.ingest",
            {
                "case_id": "harbour",
                "documents": [{"name": "harbour.md", "artifact": pointer.model_dump(mode="json")}],
            },
        )
        states = [job.state async for job in tg.watch_job(receipt.job_id, poll_s=0.2)]
        assert states[-1] == "completed", states
        assert [job.id for job in await tg.jobs()] == [receipt.job_id]
