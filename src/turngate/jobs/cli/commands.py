"""`turngate jobs list | show | watch | cancel`, `turngate cases show | build | rebuild`: case jobs.

Exit codes: 0 success; 1 the API refused (the reason_code is printed), or a watched job ended
failed, cancelled or timed_out; 2 usage errors and an unreachable API. With --json the answer is
JSON on stdout and the progress display, if any, goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import shlex
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

from turngate.jobs.cli.jobs_client import (
    FINAL_STATES,
    JOB_TYPES,
    ApiError,
    JobsClient,
    Unreachable,
    guess_media_type,
    new_correlation_id,
)
from turngate.jobs.cli.output import (
    ProgressDisplay,
    case_lines,
    final_outcome,
    job_lines,
    jobs_table,
    print_json,
    report_error,
)

QUEUE_FULL_RETRIES = 2  # a 503 queue.full is retried this many times, after its Retry-After
_DEFAULT_RETRY_AFTER_S = 5.0
_MAX_RETRY_AFTER_S = 60.0
_BUILD_STEPS = ("ingest", "embed", "index")

ApiCommand = Callable[[JobsClient, argparse.Namespace], Awaitable[int]]


# --------------------------------------------------------------------------- API steps


async def watch_job(
    api: JobsClient, job_id: str, interval: float, display: ProgressDisplay
) -> dict[str, Any]:
    """Poll ``GET /jobs/{id}`` until the job is in a final state; returns its last status."""
    try:
        while True:
            job = await api.job(job_id)
            display.update(job)
            if job.get("state") in FINAL_STATES:
                return job
            await asyncio.sleep(interval)
    finally:
        display.close()


async def submit_job(api: JobsClient, intent_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Submit a job; a 503 queue.full is retried after its Retry-After, QUEUE_FULL_RETRIES times."""
    correlation_id = new_correlation_id()  # the same id on every attempt: one intent, not three
    attempt = 0
    while True:
        try:
            return await api.submit(intent_type, payload, correlation_id)
        except ApiError as exc:
            attempt += 1
            if exc.reason_code != "queue.full" or attempt > QUEUE_FULL_RETRIES:
                raise
            wait = min(
                _DEFAULT_RETRY_AFTER_S if exc.retry_after is None else exc.retry_after, _MAX_RETRY_AFTER_S
            )
            print(
                f"{intent_type}: queue full, retrying in {wait:g} s ({attempt}/{QUEUE_FULL_RETRIES})",
                file=sys.stderr,
            )
            await asyncio.sleep(wait)


# --------------------------------------------------------------------------- commands


def _api_command(body: ApiCommand) -> Callable[[argparse.Namespace], Awaitable[int]]:
    """Opens the client for ``body`` and turns API refusals and connection errors into exit codes."""

    @functools.wraps(body)
    async def command(args: argparse.Namespace) -> int:
        try:
            async with JobsClient(args.url, args.api_key) as api:
                return await body(api, args)
        except (ApiError, Unreachable) as exc:
            return report_error(exc, args.json)

    return command


@_api_command
async def cmd_jobs_list(api: JobsClient, args: argparse.Namespace) -> int:
    jobs = await api.list_jobs(args.type, args.open, args.limit)
    if args.json:
        print_json({"jobs": jobs})
        return 0
    print(jobs_table(jobs))
    return 0


@_api_command
async def cmd_jobs_show(api: JobsClient, args: argparse.Namespace) -> int:
    job = await api.job(args.job_id)
    print_json(job) if args.json else print("\n".join(job_lines(job)))
    return 0


@_api_command
async def cmd_jobs_watch(api: JobsClient, args: argparse.Namespace) -> int:
    job = await watch_job(
        api, args.job_id, args.interval, ProgressDisplay(sys.stderr if args.json else sys.stdout)
    )
    if args.json:
        print_json(job)
    elif job.get("state") == "completed" and job.get("result") is not None:
        print(f"result {json.dumps(job['result'], sort_keys=True)}")
    return final_outcome(job)


@_api_command
async def cmd_jobs_cancel(api: JobsClient, args: argparse.Namespace) -> int:
    answer = await api.cancel(args.job_id)
    job = answer.get("job") or {}
    if args.json:
        print_json(answer)
    else:
        print(f"cancel requested: job {job.get('id', args.job_id)} ({job.get('type')}, {job.get('state')})")
    return 0


@_api_command
async def cmd_cases_show(api: JobsClient, args: argparse.Namespace) -> int:
    case = await api.case(args.case_id)
    if args.json:
        print_json(case)
        return 0
    print("\n".join(case_lines(case)))
    return 0


def _given(**options: Any) -> dict[str, Any]:
    """The options the user set (the API's defaults apply to the others)."""
    return {name: value for name, value in options.items() if value is not None}


async def _build_payload(api: JobsClient, args: argparse.Namespace, step: str, out: TextIO) -> dict[str, Any]:
    payload: dict[str, Any] = {"case_id": args.case_id}
    if step == "ingest":
        documents = []
        for path in map(Path, args.files):
            media_type = guess_media_type(path)
            artifact = await api.upload(path, media_type)
            print(
                f"uploaded {path.name}: {artifact.get('size_bytes')} bytes, {artifact.get('sha256')}",
                file=out,
            )
            document = {"name": path.name, "artifact": artifact}
            if media_type:  # else the API guesses from the name and the leading bytes
                document["media_type"] = media_type
            documents.append(document)
        payload["documents"] = documents
        chunking = _given(size=args.chunk_size, overlap=args.chunk_overlap)
        if chunking:
            payload["chunking"] = chunking
    elif step == "embed":
        embedder = _given(kind=args.embedder, model=args.embedder_model, dim=args.embedder_dim)
        if embedder:
            payload["embedder"] = embedder
    return payload


async def _index_version(api: JobsClient, index_job: dict[str, Any]) -> str | None:
    """The index_version a completed index job built (from its result, else the case's latest)."""
    version = (index_job.get("result") or {}).get("index_version")
    if version:
        return str(version)
    latest = (await api.case(str(index_job.get("case_id")))).get("latest") or {}
    return (latest.get("index") or {}).get("version")


@_api_command
async def cmd_cases_build(api: JobsClient, args: argparse.Namespace) -> int:
    missing = [name for name in args.files if not Path(name).is_file()]
    if missing:
        print(f"error: not a file: {', '.join(missing)}", file=sys.stderr)
        return 2
    out = sys.stderr if args.json else sys.stdout
    steps = _BUILD_STEPS[_BUILD_STEPS.index(args.start) :]
    summary: dict[str, Any] = {"case_id": args.case_id, "jobs": [], "index_version": None}
    code = 0
    for i, step in enumerate(steps):
        accepted = await submit_job(api, f"case.{step}", await _build_payload(api, args, step, out))
        dedup = " (deduplicated: the same job was already submitted)" if accepted.get("deduplicated") else ""
        print(f"case.{step}: job {accepted['job_id']} {accepted.get('state')}{dedup}", file=out)
        if args.no_wait:
            summary["jobs"].append(accepted)
            if i + 1 < len(steps):
                print(
                    f"next: turngate jobs watch {shlex.quote(accepted['job_id'])} && "
                    f"turngate cases rebuild {shlex.quote(args.case_id)} --from {steps[i + 1]}",
                    file=out,
                )
            break
        job = await watch_job(api, accepted["job_id"], args.interval, ProgressDisplay(out))
        summary["jobs"].append(job)
        code = final_outcome(job)
        if code:
            break
        if step == "index":
            summary["index_version"] = await _index_version(api, job)
    if args.json:
        print_json(summary)
    elif summary["index_version"]:
        print(f"index_version {summary['index_version']}  (pin it to query this exact index)")
    return code


# --------------------------------------------------------------------------- parser


def _positive(kind: type[int] | type[float]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its error message
    return parse


def _add_api_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        help="turngate API (default: TURNGATE_URL or http://127.0.0.1:8010)",
    )
    parser.add_argument(
        "--api-key",
        help="API key sent as a bearer token (default: TURNGATE_API_KEY)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output (JSON on stdout)")


def _add_interval(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--interval", type=_positive(float), default=1.0, metavar="S", help="seconds between polls (1)"
    )


def _action(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    details: str = "",
) -> argparse.ArgumentParser:
    """A subcommand whose --help shows its summary (and details) too."""
    return sub.add_parser(name, help=summary, description=f"{summary}. {details}".strip())


def add_jobs_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers `turngate jobs ...` and `turngate cases ...` on the top-level subparsers."""
    jobs = _action(sub, "jobs", "list, show, watch and cancel case jobs (ingest, embed, index)")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")

    listing = _action(jobs_sub, "list", "recent jobs, newest first, as a table")
    listing.add_argument("--type", choices=JOB_TYPES, help="only jobs of this type")
    listing.add_argument("--open", action="store_true", help="only queued or running jobs")
    listing.add_argument("--limit", type=_positive(int), default=20, metavar="N", help="at most N jobs (20)")
    listing.set_defaults(run=cmd_jobs_list)

    show = _action(jobs_sub, "show", "one job's state, progress, error and result")
    show.set_defaults(run=cmd_jobs_show)

    watch = _action(
        jobs_sub,
        "watch",
        "follow a job until it ends",
        "On a terminal a progress bar is redrawn in place, otherwise a line is printed per change. "
        "Exit 0 when completed, 1 when failed, cancelled or timed_out (the error is printed), "
        "2 when the API cannot be reached.",
    )
    _add_interval(watch)
    watch.set_defaults(run=cmd_jobs_watch)

    cancel = _action(jobs_sub, "cancel", "ask a queued or running job to stop")
    cancel.set_defaults(run=cmd_jobs_cancel)

    for parser in (show, watch, cancel):
        parser.add_argument("job_id", metavar="ID", help="the job id (from `jobs list` or a submission)")

    cases = _action(sub, "cases", "show a case's chunks, embeddings and index; build one from files")
    cases_sub = cases.add_subparsers(dest="cases_command", required=True, metavar="ACTION")

    case_show = _action(cases_sub, "show", "a case's latest chunks, embeddings and index, and its records")
    case_show.add_argument("case_id", metavar="CASE")
    case_show.set_defaults(run=cmd_cases_show)

    watched = "Each job is watched with the same progress display as `jobs watch`; a full queue (503) is "
    watched += f"retried {QUEUE_FULL_RETRIES} times after its Retry-After. Exit codes as for `jobs watch`."
    build = _action(
        cases_sub,
        "build",
        "upload FILEs, ingest, embed and index them, print the index_version to pin",
        watched,
    )
    build.add_argument("case_id", metavar="CASE")
    build.add_argument("files", nargs="+", metavar="FILE", help="documents (media type from the suffix)")
    build.add_argument("--chunk-size", type=_positive(int), metavar="N", help="characters per chunk")
    build.add_argument("--chunk-overlap", type=int, metavar="N", help="characters shared by neighbours")
    build.set_defaults(start="ingest")

    rebuild = _action(
        cases_sub,
        "rebuild",
        "embed and index a case's latest chunks again (no upload), print the index_version to pin",
        watched,
    )
    rebuild.add_argument("case_id", metavar="CASE")
    rebuild.add_argument(
        "--from", dest="start", choices=_BUILD_STEPS[1:], default="embed", help="first step (embed)"
    )
    rebuild.set_defaults(files=[], chunk_size=None, chunk_overlap=None)

    for parser in (build, rebuild):
        parser.add_argument(
            "--embedder", choices=("offline", "openai", "ollama"), help="default: the server's"
        )
        parser.add_argument("--embedder-model", metavar="NAME", help="the embedder's model")
        parser.add_argument("--embedder-dim", type=_positive(int), metavar="N", help="vector dimensions")
        parser.add_argument(
            "--no-wait", action="store_true", help="submit the first step only and print how to continue"
        )
        _add_interval(parser)
        parser.set_defaults(run=cmd_cases_build)

    for parser in (listing, show, watch, cancel, case_show, build, rebuild):
        _add_api_args(parser)
