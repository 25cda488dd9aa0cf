"""Fake LLM provider servers: real HTTP on 127.0.0.1 (random free port), real wire formats.

- :class:`FakeOpenAIServer`: ``POST .../chat/completions`` (any prefix, so base URLs can be
  checked), SSE ``data: {chat.completion.chunk}`` lines, a usage chunk when
  ``stream_options.include_usage`` is set, then ``data: [DONE]``;
- :class:`FakeAnthropicServer`: ``POST /v1/messages``, named SSE events (``message_start``,
  ``content_block_start``, ``ping``, ``content_block_delta``/``text_delta``,
  ``content_block_stop``, ``message_delta`` with usage, ``message_stop``);
- :class:`FakeOllamaServer`: ``POST /api/chat``, NDJSON with a final ``done`` line carrying
  ``prompt_eval_count``/``eval_count``.

Each records the requests it got (``srv.requests``: method, path, headers, JSON body, arrival
time), replies ``srv.reply`` split into word chunks, reports usage as word counts (input: all
message contents including Anthropic's ``system``; output: the reply), and can be told to
misbehave::

    with fake_openai() as srv:
        srv.fail_next(status=429, retry_after="2")      # next request: HTTP 429 + Retry-After
        srv.error_mid_stream_next("overloaded_error")   # next request: some text, then an error
        srv.drop_mid_stream_next(after_chunks=2)        # next request: 2 chunks, then the
                                                         # connection drops (no stream end)
        srv.delay_s = 1.0                                # wait before answering
        srv.chunk_delay_s = 0.05                         # wait between streamed chunks
        srv.tool_calls = [{"name": "transition_phase", "arguments": {"signal": "understood"}}]
                                                         # after the text: tool calls, in the
                                                         # vendor's streamed wire format

Tool calls (``srv.tool_calls``: ``{"name", "arguments": dict or raw str, "id": optional}``) go
out as the vendors stream them: OpenAI ``delta.tool_calls`` fragments keyed by ``index`` (id and
name first, the arguments text split in pieces, ``finish_reason: "tool_calls"``); Anthropic a
``tool_use`` content block with ``input_json_delta`` fragments (``stop_reason: "tool_use"``);
Ollama one ``message.tool_calls`` line (arguments as an object, no id). ``srv.received_tools``
is the ``tools`` of the last request (None when it sent none).

Pytest fixtures ``openai_server``, ``anthropic_server`` and ``ollama_server`` wrap the context
managers; import them into a conftest to use them in another test folder.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

DEFAULT_REPLY = "Hello from the fake server"


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float = 0.0  # time.monotonic() when it arrived

    @property
    def json(self) -> dict[str, Any]:
        assert isinstance(self.body, dict), self.body
        return self.body


@dataclass
class _Failure:
    status: int
    retry_after: str | None = None
    message: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _StreamError:
    error_type: str
    message: str


@dataclass
class _Drop:
    after_chunks: int
    hold: threading.Event | None = None
    hold_timeout_s: float = 10.0


def argument_text(arguments: Any) -> str:
    """A configured tool call's arguments as the JSON text a vendor streams."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def split_fragments(text: str, pieces: int = 3) -> list[str]:
    """``text`` cut into up to ``pieces`` non-empty fragments (how vendors stream arguments)."""
    if not text:
        return []
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def words(text: str) -> int:
    return len(text.split())


def free_port() -> int:
    """A port that was free a moment ago (nothing listens on it: connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def refused_url(path: str = "") -> str:
    return f"http://127.0.0.1:{free_port()}{path}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # silence the test output
        return None

    def do_POST(self) -> None:
        self.server.fake._handle(self)

    def do_GET(self) -> None:
        self.server.fake._handle(self)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeLLMServer


class FakeLLMServer:
    """Common machinery; subclasses speak one vendor's wire format."""

    vendor: ClassVar[str] = ""

    def __init__(self, reply: str = DEFAULT_REPLY) -> None:
        self._initial_reply = reply
        self.reply = reply
        self.delay_s = 0.0
        self.chunk_delay_s = 0.0
        self.words_per_piece = 1  # words in each streamed piece of the reply
        self.requests: list[RecordedRequest] = []
        self.tool_calls: list[dict[str, Any]] = []
        self._failures: deque[_Failure] = deque()
        self._stream_errors: deque[_StreamError] = deque()
        self._drops: deque[_Drop] = deque()
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ control

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return int(self._server.server_address[1])

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.origin

    @property
    def last_request(self) -> RecordedRequest:
        assert self.requests, "no request received"
        return self.requests[-1]

    def fail_next(
        self,
        status: int,
        *,
        retry_after: str | None = None,
        message: str | None = None,
        headers: dict[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` requests with an HTTP error in the vendor's error shape."""
        with self._lock:
            for _ in range(times):
                self._failures.append(_Failure(status, retry_after, message, dict(headers or {})))

    def error_mid_stream_next(self, error_type: str = "overloaded_error", message: str = "") -> None:
        """Next request: start a 200 stream, send the first chunk, then a vendor error event."""
        with self._lock:
            self._stream_errors.append(_StreamError(error_type, message or error_type))

    def drop_mid_stream_next(
        self, after_chunks: int = 2, *, hold: threading.Event | None = None, hold_timeout_s: float = 10.0
    ) -> None:
        """Next request: start a 200 stream, send ``after_chunks`` text chunks, then drop the
        connection without ending the stream (the client sees an incomplete chunked body).

        ``hold``: wait for this event (at most ``hold_timeout_s``) before dropping, so a test can
        first see the chunks arrive somewhere.
        """
        with self._lock:
            self._drops.append(_Drop(after_chunks, hold, hold_timeout_s))

    @property
    def received_tools(self) -> list[dict[str, Any]] | None:
        """The ``tools`` of the last request (None when it sent none)."""
        body = self.last_request.json
        tools = body.get("tools")
        return list(tools) if tools is not None else None

    def reset(self) -> None:
        """Forget recorded requests and queued misbehaviour (for a server shared by tests)."""
        with self._lock:
            self.requests.clear()
            self._failures.clear()
            self._stream_errors.clear()
            self._drops.clear()
        self.tool_calls = []
        self.reply = self._initial_reply
        self.delay_s = 0.0
        self.chunk_delay_s = 0.0
        self.words_per_piece = 1

    def start(self) -> FakeLLMServer:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.01},
            name=f"fake-{self.vendor}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ request handling

    def _handle(self, handler: _Handler) -> None:
        length = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.lower(): v for k, v in handler.headers.items()}
        request = RecordedRequest(handler.command, handler.path, headers, body, time.monotonic())
        with self._lock:
            self.requests.append(request)
            failure = self._failures.popleft() if self._failures else None
            stream_error = self._stream_errors.popleft() if self._stream_errors else None
            drop = None if failure or stream_error or not self._drops else self._drops.popleft()
        if self.delay_s:
            time.sleep(self.delay_s)
        try:
            if failure is not None:
                self._send_error(handler, failure, request)
            elif not self._route_ok(handler.command, handler.path):
                self._send_error(handler, _Failure(404, message=f"no route {handler.path}"), request)
            elif drop is not None:
                self._respond_and_drop(handler, request, drop)
            else:
                self._respond(handler, request, stream_error)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (timeouts, cancelled streams)

    def _respond_and_drop(self, handler: _Handler, request: RecordedRequest, drop: _Drop) -> None:
        self._start_stream(handler, self._stream_content_type)
        for piece in self._pieces()[: drop.after_chunks]:
            self._write(handler, self._text_chunk(request, piece), delay=True)
        if drop.hold is not None:
            drop.hold.wait(drop.hold_timeout_s)
        # Gone without the terminating chunk: an abrupt end of the connection mid-body.
        with contextlib.suppress(OSError):
            handler.connection.shutdown(socket.SHUT_RDWR)
        handler.close_connection = True

    _stream_content_type: ClassVar[str] = "text/event-stream"

    def _text_chunk(self, request: RecordedRequest, piece: str) -> bytes:
        """One streamed text delta in the vendor's wire format (used by ``drop_mid_stream_next``)."""
        raise NotImplementedError

    def _route_ok(self, method: str, path: str) -> bool:
        raise NotImplementedError

    def _respond(
        self, handler: _Handler, request: RecordedRequest, stream_error: _StreamError | None
    ) -> None:
        raise NotImplementedError

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        raise NotImplementedError

    def _default_error_message(self, failure: _Failure, request: RecordedRequest) -> str:
        if failure.status == 401:
            # Like real vendors, echo (part of) the key back: the client must scrub it.
            key = request.headers.get("x-api-key") or request.headers.get("authorization", "")
            return f"Incorrect API key provided: {key}"
        return f"fake {self.vendor} error {failure.status}"

    def _send_error(self, handler: _Handler, failure: _Failure, request: RecordedRequest) -> None:
        message = failure.message or self._default_error_message(failure, request)
        payload = json.dumps(self._error_body(failure.status, message)).encode()
        handler.send_response(failure.status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.send_header("Connection", "close")
        if failure.retry_after is not None:
            handler.send_header("Retry-After", failure.retry_after)
        for name, value in failure.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(payload)
        handler.wfile.flush()
        handler.close_connection = True

    def _send_json(self, handler: _Handler, payload: Any) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(data)
        handler.wfile.flush()
        handler.close_connection = True

    def _start_stream(self, handler: _Handler, content_type: str) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True

    def _write(self, handler: _Handler, data: bytes, *, delay: bool = False) -> None:
        if delay and self.chunk_delay_s:
            time.sleep(self.chunk_delay_s)
        handler.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        handler.wfile.flush()

    def _end_stream(self, handler: _Handler) -> None:
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()

    def _pieces(self) -> list[str]:
        words = re.findall(r"\S+\s*", self.reply)
        step = self.words_per_piece
        return words if step == 1 else ["".join(words[i : i + step]) for i in range(0, len(words), step)]


class FakeOpenAIServer(FakeLLMServer):
    vendor = "openai"

    def __init__(self, reply: str = DEFAULT_REPLY) -> None:
        super().__init__(reply)
        self.send_usage = True  # False: a compatible server that ignores stream_options
        self.usage: tuple[int, int] | None = None  # (prompt, completion) to report instead of words

    def reset(self) -> None:
        super().reset()
        self.send_usage = True
        self.usage = None

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def _route_ok(self, method: str, path: str) -> bool:
        return method == "POST" and path.endswith("/chat/completions")

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = {429: "rate_limit_exceeded", 401: "invalid_request_error"}.get(status, "api_error")
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}

    def _chunk(self, model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        return f"data: {json.dumps(chunk)}\n\n".encode()

    def _text_chunk(self, request: RecordedRequest, piece: str) -> bytes:
        return self._chunk(str(request.json.get("model", "")), {"content": piece})

    def _tool_call_chunks(self, model: str) -> list[bytes]:
        chunks: list[bytes] = []
        for index, call in enumerate(self.tool_calls):
            head = {
                "index": index,
                "id": call.get("id") or f"call_fake_{index + 1}",
                "type": "function",
                "function": {"name": call["name"], "arguments": ""},
            }
            chunks.append(self._chunk(model, {"role": "assistant", "content": None, "tool_calls": [head]}))
            for fragment in split_fragments(argument_text(call.get("arguments", {}))):
                chunks.append(
                    self._chunk(
                        model, {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}
                    )
                )
        return chunks

    def _respond(
        self, handler: _Handler, request: RecordedRequest, stream_error: _StreamError | None
    ) -> None:
        body = request.json
        model = str(body.get("model", ""))
        prompt = sum(words(str(m.get("content", ""))) for m in body.get("messages", []))
        completion = words(self.reply)
        if self.usage is not None:
            prompt, completion = self.usage
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if not body.get("stream"):
            self._send_json(
                handler,
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": 1700000000,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": self.reply},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": usage,
                },
            )
            return
        self._start_stream(handler, "text/event-stream")
        self._write(handler, self._chunk(model, {"role": "assistant", "content": ""}))
        for index, piece in enumerate(self._pieces()):
            self._write(handler, self._chunk(model, {"content": piece}), delay=True)
            if stream_error is not None and index == 0:
                error = {"error": {"message": stream_error.message, "type": stream_error.error_type}}
                self._write(handler, f"data: {json.dumps(error)}\n\n".encode())
                self._end_stream(handler)
                return
        for chunk in self._tool_call_chunks(model):
            self._write(handler, chunk, delay=True)
        self._write(handler, self._chunk(model, {}, finish="tool_calls" if self.tool_calls else "stop"))
        if self.send_usage and (body.get("stream_options") or {}).get("include_usage"):
            final = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": model,
                "choices": [],
                "usage": usage,
            }
            self._write(handler, f"data: {json.dumps(final)}\n\n".encode())
        self._write(handler, b"data: [DONE]\n\n")
        self._end_stream(handler)


class FakeAnthropicServer(FakeLLMServer):
    vendor = "anthropic"

    def _route_ok(self, method: str, path: str) -> bool:
        return method == "POST" and path.split("?")[0].endswith("/v1/messages")

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            403: "permission_error",
            404: "not_found_error",
            413: "request_too_large",
            429: "rate_limit_error",
            529: "overloaded_error",
        }.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    @staticmethod
    def _event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

    def _text_chunk(self, request: RecordedRequest, piece: str) -> bytes:
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
        return self._event("content_block_delta", delta)

    def _respond_and_drop(self, handler: _Handler, request: RecordedRequest, drop: _Drop) -> None:
        self._start_stream(handler, self._stream_content_type)
        self._write(handler, self._message_start(str(request.json.get("model", "")), 1))
        block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        self._write(handler, self._event("content_block_start", block))
        for piece in self._pieces()[: drop.after_chunks]:
            self._write(handler, self._text_chunk(request, piece), delay=True)
        if drop.hold is not None:
            drop.hold.wait(drop.hold_timeout_s)
        with contextlib.suppress(OSError):
            handler.connection.shutdown(socket.SHUT_RDWR)
        handler.close_connection = True

    def _message_start(self, model: str, prompt: int) -> bytes:
        return self._event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": prompt, "output_tokens": 1},
                },
            },
        )

    def _tool_use_events(self, first_index: int) -> list[bytes]:
        events: list[bytes] = []
        for offset, call in enumerate(self.tool_calls):
            index = first_index + offset
            block = {
                "type": "tool_use",
                "id": call.get("id") or f"toolu_fake_{offset + 1}",
                "name": call["name"],
                "input": {},
            }
            events.append(
                self._event(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": block},
                )
            )
            for fragment in split_fragments(argument_text(call.get("arguments", {}))):
                delta = {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": fragment},
                }
                events.append(self._event("content_block_delta", delta))
            events.append(self._event("content_block_stop", {"type": "content_block_stop", "index": index}))
        return events

    def _respond(
        self, handler: _Handler, request: RecordedRequest, stream_error: _StreamError | None
    ) -> None:
        body = request.json
        model = str(body.get("model", ""))
        system = body.get("system") or ""
        if isinstance(system, list):
            system = " ".join(str(block.get("text", "")) for block in system)
        prompt = words(str(system)) + sum(words(str(m.get("content", ""))) for m in body.get("messages", []))
        output = words(self.reply)
        if not body.get("stream"):
            self._send_json(
                handler,
                {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [{"type": "text", "text": self.reply}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": prompt, "output_tokens": output},
                },
            )
            return
        self._start_stream(handler, "text/event-stream")
        self._write(handler, self._message_start(model, prompt))
        self._write(
            handler,
            self._event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
        )
        self._write(handler, self._event("ping", {"type": "ping"}))
        for index, piece in enumerate(self._pieces()):
            delta = {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": piece},
            }
            self._write(handler, self._event("content_block_delta", delta), delay=True)
            if stream_error is not None and index == 0:
                error = {
                    "type": "error",
                    "error": {"type": stream_error.error_type, "message": stream_error.message},
                }
                self._write(handler, self._event("error", error))
                self._end_stream(handler)
                return
        self._write(
            handler,
            self._event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        )
        for event in self._tool_use_events(first_index=1):
            self._write(handler, event, delay=True)
        self._write(
            handler,
            self._event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": "tool_use" if self.tool_calls else "end_turn",
                        "stop_sequence": None,
                    },
                    "usage": {"output_tokens": output},
                },
            ),
        )
        self._write(handler, self._event("message_stop", {"type": "message_stop"}))
        self._end_stream(handler)


class FakeOllamaServer(FakeLLMServer):
    vendor = "ollama"

    @property
    def host(self) -> str:
        return self.origin

    def _route_ok(self, method: str, path: str) -> bool:
        return method == "POST" and path == "/api/chat"

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": message}

    _stream_content_type: ClassVar[str] = "application/x-ndjson"

    @staticmethod
    def _line(data: dict[str, Any]) -> bytes:
        return (json.dumps(data) + "\n").encode()

    def _text_chunk(self, request: RecordedRequest, piece: str) -> bytes:
        return self._line(
            {
                "model": str(request.json.get("model", "")),
                "created_at": "2024-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": piece},
                "done": False,
            }
        )

    def _tool_calls_line(self, model: str) -> bytes | None:
        if not self.tool_calls:
            return None
        calls = []
        for call in self.tool_calls:
            arguments = call.get("arguments", {})
            if isinstance(arguments, str):
                arguments = json.loads(arguments)
            calls.append({"function": {"name": call["name"], "arguments": arguments}})
        return self._line(
            {
                "model": model,
                "created_at": "2024-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": "", "tool_calls": calls},
                "done": False,
            }
        )

    def _respond(
        self, handler: _Handler, request: RecordedRequest, stream_error: _StreamError | None
    ) -> None:
        body = request.json
        model = str(body.get("model", ""))
        prompt = sum(words(str(m.get("content", ""))) for m in body.get("messages", []))
        created = "2024-01-01T00:00:00Z"
        done = {
            "model": model,
            "created_at": created,
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "total_duration": 1000,
            "load_duration": 10,
            "prompt_eval_count": prompt,
            "prompt_eval_duration": 100,
            "eval_count": words(self.reply),
            "eval_duration": 200,
        }
        if body.get("stream") is False:
            self._send_json(handler, {**done, "message": {"role": "assistant", "content": self.reply}})
            return
        self._start_stream(handler, "application/x-ndjson")
        for index, piece in enumerate(self._pieces()):
            part = {
                "model": model,
                "created_at": created,
                "message": {"role": "assistant", "content": piece},
                "done": False,
            }
            self._write(handler, self._line(part), delay=True)
            if stream_error is not None and index == 0:
                self._write(handler, self._line({"error": stream_error.message}))
                self._end_stream(handler)
                return
        tool_line = self._tool_calls_line(model)
        if tool_line is not None:
            self._write(handler, tool_line, delay=True)
        self._write(handler, self._line(done))
        self._end_stream(handler)


@contextlib.contextmanager
def fake_openai(reply: str = DEFAULT_REPLY) -> Iterator[FakeOpenAIServer]:
    server = FakeOpenAIServer(reply)
    with server:
        yield server


@contextlib.contextmanager
def fake_anthropic(reply: str = DEFAULT_REPLY) -> Iterator[FakeAnthropicServer]:
    server = FakeAnthropicServer(reply)
    with server:
        yield server


@contextlib.contextmanager
def fake_ollama(reply: str = DEFAULT_REPLY) -> Iterator[FakeOllamaServer]:
    server = FakeOllamaServer(reply)
    with server:
        yield server


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    with fake_openai() as server:
        yield server


@pytest.fixture
def anthropic_server() -> Iterator[FakeAnthropicServer]:
    with fake_anthropic() as server:
        yield server


@pytest.fixture
def ollama_server() -> Iterator[FakeOllamaServer]:
    with fake_ollama() as server:
        yield server
