"""`turngate chat`: send one message, print the answer and the DECISION, exit by the decision."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _parse_ref(text: str) -> dict[str, Any]:
    """``ID``, ``execution:ID``, or a JSON object for an external ref (``case_query``, ...)."""
    if text.lstrip().startswith("{"):
        try:
            ref = json.loads(text)
        except ValueError as exc:
            raise SystemExit(f"--ref {text!r} is not valid JSON: {exc}") from exc
        if not isinstance(ref, dict):
            raise SystemExit(f"--ref {text!r} must be a JSON object")
        return ref
    kind, sep, ref_id = text.partition(":")
    if sep and kind in ("event", "execution"):
        return {"ref_type": kind, "ref_id": ref_id}
    return {"ref_type": "event", "ref_id": text}


def _chat_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """`inputs` of the intent: a JSON file, then --inputs JSON merged over it."""
    inputs: dict[str, Any] = {}
    for text in (Path(args.input_file).read_text() if args.input_file else None, args.inputs):
        if text:
            value = json.loads(text)
            if not isinstance(value, dict):
                raise ValueError("inputs must be a JSON object")
            inputs.update(value)
    return inputs


async def cmd_chat(args: argparse.Namespace) -> int:
    from turngate.client import AsyncTurngate, TurngateError, Unreachable, calls

    try:
        inputs = _chat_inputs(args)
    except (OSError, ValueError) as exc:
        print(f"error: bad --inputs/--input-file: {exc}", file=sys.stderr)
        return CHAT_EXIT_USAGE
    envelope = calls.intent_envelope(
        args.message,
        correlation_id=args.correlation_id,
        thread_id=args.thread,
        turn_id=args.turn,
        parent_turn_id=args.parent,
        refs=[_parse_ref(r) for r in args.ref],
        model=args.model,
        inputs=inputs,
        actor=args.actor,
    )
    try:
        async with AsyncTurngate(args.url, args.api_key, timeout_s=args.timeout + 5) as api:
            body = await api.call(calls.send_intent(envelope, "execution"))
    except Unreachable as exc:
        print(f"error: {exc} (is `make dev` running?)", file=sys.stderr)
        return CHAT_EXIT_USAGE
    except TurngateError as exc:
        if args.json:
            print(json.dumps(exc.as_dict(), indent=2))
        else:
            print(f"error {exc.status}: {exc.reason_code}: {exc.detail}", file=sys.stderr)
        return CHAT_EXIT_REFUSED
    decision = (body.get("decision") or {}).get("payload", {})
    if args.json:
        print(json.dumps(body, indent=2))
        return chat_exit_code(decision)
    execution = (body.get("execution") or {}).get("payload", {})
    if execution.get("redacted"):
        redaction = execution.get("redaction") or {}
        print(f"[redacted by {redaction.get('rule_id')}: {redaction.get('reason_code')}]")
    elif execution.get("error"):
        err = execution["error"]
        print(f"[execution error] {err.get('code')}: {err.get('message')}")
    elif execution:
        print(execution.get("output_text", ""))
    print(
        f"\n-- {decision.get('decision', 'PENDING')} {', '.join(decision.get('reason_codes', []))}"
        f" | policy {decision.get('policy_id')} | provider {decision.get('provider')}"
        f" model {decision.get('resolved_model_id')}"
        f"\n-- thread {body['thread_id']} turn {body['turn_id']} correlation {body['correlation_id']}"
        f" | INTENT index {body.get('index')} | context_digest {decision.get('context_digest')}"
    )
    for line in external_context_lines(decision.get("external_context") or []):
        print(line)
    if body.get("wait_timed_out"):
        print("-- still running: see /snapshot or /tail for the rest")
    print(
        f'-- continue: turngate chat "..." --thread {body["thread_id"]} --parent {body["turn_id"]}'
        f" --ref {body['correlation_id']} --ref execution:{body['correlation_id']}"
    )
    return chat_exit_code(decision)


#: `turngate chat` exit statuses, the same with and without --json (see `turngate chat --help`).
CHAT_EXIT_ALLOW = 0
CHAT_EXIT_REFUSED = 1  # the API refused the request (an error body with a reason code)
CHAT_EXIT_USAGE = 2  # bad --inputs / --input-file, or no API at --url
CHAT_EXIT_DENY = 3
CHAT_EXIT_PENDING = 4  # no DECISION yet when the API stopped waiting: the turn goes on

CHAT_EXIT_HELP = (
    "exit status: 0 ALLOW; 1 the API refused the request; 2 bad --inputs/--input-file or no API "
    "at --url; 3 DENY; 4 no DECISION yet when the API stopped waiting (TURNGATE_WAIT_TIMEOUT_S; "
    "the turn goes on). The same with --json."
)


def chat_exit_code(decision: dict[str, Any]) -> int:
    """The exit status of a turn's answer: by its DECISION, or pending when there is none yet."""
    verdict = decision.get("decision")
    if verdict == "ALLOW":
        return CHAT_EXIT_ALLOW
    return CHAT_EXIT_DENY if verdict == "DENY" else CHAT_EXIT_PENDING


def external_context_lines(records: list[dict[str, Any]]) -> list[str]:
    """One summary line per declared external ref of a DECISION (what reached the model)."""
    lines: list[str] = []
    for record in records:
        if record.get("ref_type") == "case_query":
            chunks = len(record.get("selected_chunk_ids") or [])
            lines.append(
                f"-- case_query {record.get('case_id')} {record.get('retrieval_query')!r}: {chunks} chunk(s)"
                f" from index {record.get('index_version')}"
            )
        else:
            outcome = record.get("reason_code") or f"fetched {record.get('content_sha256')}"
            lines.append(f"-- {record.get('ref_type')} {record.get('handle_id')}: {outcome}")
    return lines


def add_chat_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    chat = sub.add_parser(
        "chat",
        help="send one message and print the answer and the DECISION",
        description="Send one message and print the answer and the DECISION.",
        epilog=CHAT_EXIT_HELP,
    )
    chat.add_argument("message")
    chat.add_argument("--thread", help="thread id (default: a new thread)")
    chat.add_argument("--turn", help="turn id (default: the correlation id)")
    chat.add_argument("--parent", help="parent turn id (a continuation must declare refs)")
    chat.add_argument(
        "--ref",
        action="append",
        default=[],
        help="declared ref: a correlation/turn id (the turn: question and answer) or event digest; "
        "execution:ID for an answer alone; "
        'or a JSON object, e.g. \'{"ref_type": "case_query", "case_id": "handbook", "query": "leave"}\'',
    )
    chat.add_argument("--model", help="requested model id")
    chat.add_argument("--inputs", help='intent inputs as JSON, e.g. \'{"task_id": "phishing-01"}\'')
    chat.add_argument("--input-file", help="intent inputs from a JSON file (--inputs is merged over it)")
    chat.add_argument("--actor", default="user")
    chat.add_argument("--correlation-id", help="default: a fresh random id")
    chat.add_argument("--url", help="the API (default: TURNGATE_URL, else http://127.0.0.1:8010)")
    chat.add_argument(
        "--timeout", type=float, default=60.0, help="seconds the HTTP request may take (default 60)"
    )
    chat.add_argument("--api-key", help="API key sent as a bearer token (default: TURNGATE_API_KEY)")
    chat.add_argument(
        "--json", action="store_true", help="print the raw response (the exit status is unchanged)"
    )
    chat.set_defaults(run=cmd_chat)
