"""`turngate` command line: dev | serve | worker | chat | config | verify | replay | gc | keys |
setup | jobs | cases | policy (chat and the last five are built beside their features).

Every entry point ends with os._exit(code) after a clean shutdown: Temporal's Python SDK can
crash at interpreter exit otherwise (sdk-python#300).

Each command imports what it uses and nothing else: only the command named on the command line
has its parser built (and its module imported); the others are listed by name and one-line help
(``COMMANDS``). `turngate --help` and `turngate chat` load no Temporal, SQL, web server or
telemetry module (tests/cli/test_light_imports.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Collection, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turngate import __version__
from turngate.arg_types import non_negative_int, positive_int
from turngate.event_loop import EventLoopConfigError, loop_factory
from turngate.service_gc import settle_after_start
from turngate.stop_signals import StopSignals

if TYPE_CHECKING:
    from temporalio.client import Client

    from turngate.settings import Settings

log = logging.getLogger("turngate")
ALLOW_ALL = "turngate.policies.allow_all"


def _setup_logging() -> None:
    from turngate.log_setup import configure_logging, log_level_from_env

    configure_logging(log_level_from_env())
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("temporalio").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)


def load_settings(**overrides: Any) -> Settings:
    """The process settings (turngate.settings), imported by the commands that read them only:
    pydantic-settings alone costs a client command like `chat` half its start-up."""
    from turngate.settings import load_settings as load

    return load(**overrides)


def _stop_on_signals(stop: asyncio.Event) -> None:
    """The first Ctrl-C stops gracefully; a second one at once (turngate.stop_signals)."""
    StopSignals(stop).install()


#: `turngate dev`: a graceful stop takes about two seconds; past this it is forced.
DEV_STOP_GRACE_S = 8.0
#: Seconds the Temporal dev server gets for its own clean stop before it is killed.
DEV_SERVER_STOP_S = 3.0
#: Seconds an open HTTP connection (an SSE stream such as /tail) may delay the API's stop.
API_STOP_GRACE_S = 2


def _uvicorn_server(app: Any, host: str, port: int) -> Any:
    import uvicorn

    class _Server(uvicorn.Server):
        # turngate owns the signals: one Ctrl-C stops API, worker and dev server in order.
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        # an open /tail or turn stream would otherwise hold the stop for as long as it stays open
        timeout_graceful_shutdown=API_STOP_GRACE_S,
    )
    return _Server(config)


async def _serve_api(settings: Settings, stop: asyncio.Event, client: Client | None = None) -> None:
    from sse_starlette.sse import AppStatus

    from turngate.api.app import create_app

    server = _uvicorn_server(create_app(settings, client=client), settings.host, settings.port)
    settle_after_start()  # the app and (in `dev`) the worker are built
    task = asyncio.create_task(server.serve())
    await asyncio.wait([task, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
    # SSE streams (/tail, turn streams) end themselves instead of waiting for the grace timeout
    # (one server per process here, so the library's process-wide flag is ours to set).
    AppStatus.should_exit = True
    server.should_exit = True
    await task
    if not server.started:
        raise SystemExit(f"the API could not start on {settings.host}:{settings.port} (port in use?)")


# --------------------------------------------------------------------------- commands


OBSERVER_LINE = "none: observer mode, every intent DENIED (gateway.observer_mode)"


async def cmd_dev(args: argparse.Namespace) -> int:
    from turngate.devserver import DevServer, DevServerError
    from turngate.temporal_client import connect
    from turngate.worker.dev_workers import dev_worker_processes, dev_workers, workers_line

    data_dir = Path(args.data_dir).resolve() if args.data_dir else None
    overrides: dict[str, Any] = {"port": args.port}
    if data_dir:
        overrides["data_dir"] = data_dir
    settings = load_settings(**overrides)
    if "auth_mode" not in settings.model_fields_set:
        # Local use: a request without credentials from this machine is let in (docs/SECURITY.md).
        settings = settings.model_copy(update={"auth_mode": "dev"})
    worker_processes = args.worker_processes
    if worker_processes is None:
        worker_processes = dev_worker_processes(settings.worker_processes)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    dev_key = _dev_key(settings)
    if not settings.policy_module and args.observer:
        log.warning("OBSERVER MODE: no policy configured, every intent is DENIED (gateway.observer_mode).")
    elif not settings.policy_module:
        # Passed to the in-process worker and to worker processes through settings, never os.environ.
        settings = settings.model_copy(update={"policy_module": ALLOW_ALL})
        log.warning("=" * 72)
        log.warning("DEV MODE: no policy configured, using %s: EVERY intent is ALLOWED.", ALLOW_ALL)
        log.warning("Set TURNGATE_POLICY_MODULE for a real policy. `turngate serve` never does this.")
        log.warning("=" * 72)
    server = DevServer(
        db_file=settings.data_dir / "temporal.sqlite3",
        port=args.temporal_port,
        ui_port=args.ui_port,
        log_file=settings.data_dir / "temporal.log",
    )
    # The web UI links each turn to this dev server's Temporal UI (its --ui-port), unless
    # TURNGATE_TEMPORAL_UI_URL names another.
    ui_url = settings.temporal_ui_url or server.ui_url
    settings = settings.model_copy(update={"temporal_address": server.address, "temporal_ui_url": ui_url})
    if args.encrypt:
        settings = _dev_encryption(settings, server)
    stop = asyncio.Event()
    StopSignals(stop, grace_s=DEV_STOP_GRACE_S, on_force=server.kill).install()
    try:
        await server.check_port_free()
    except DevServerError as exc:
        raise SystemExit(str(exc)) from None
    print(f"turngate {__version__}: starting Temporal dev server on {server.address} ...", flush=True)
    server.start()
    try:
        await server.wait_ready()
        # One client for API and an in-process worker: a turn's first workflow task then starts
        # eagerly, in process.
        client = await connect(settings)
        async with dev_workers(settings, client, worker_processes, stop, os.environ) as supervised:
            api = f"http://{settings.host}:{settings.port}"
            print(
                "\n".join(
                    [
                        "",
                        f"  API            {api}",
                        f"  OpenAPI docs   {api}/docs",
                        f"  web UI         {api}/ui/",
                        f"  Temporal UI    {server.ui_url}",
                        f"  data dir       {settings.data_dir}",
                        f"  providers      {', '.join(_provider_names(settings))}",
                        f"  policy         {settings.policy_module or OBSERVER_LINE}",
                        f"  keyless reads  {'ON, TURNGATE_KEYLESS_READ' if settings.keyless_read else 'off'}",
                        f"  auth           {settings.auth_mode} (TURNGATE_AUTH)",
                        f"  encryption     {_encryption_line(settings)}",
                        f"  workers        {workers_line(worker_processes)}",
                        f"  dev API key    {dev_key}",
                        "                 (tenant dev, all roles; export TURNGATE_API_KEY=... for chat)",
                        "",
                        '  try:  turngate chat "hello"        (Ctrl-C stops everything)',
                        "",
                    ]
                ),
                flush=True,
            )
            await _serve_api(settings, stop, client)
    finally:
        print("turngate: stopping ...", flush=True)
        server.stop(timeout_s=DEV_SERVER_STOP_S)
    return supervised.result() if supervised is not None else 0


def _dev_key(settings: Settings) -> str:
    """The data directory's admin key of tenant ``dev``, reused across starts."""
    from turngate.ledger import LedgerStore
    from turngate.security.dev_key import dev_key

    with LedgerStore(settings.effective_ledger_url) as store:
        return dev_key(store.engine, settings.data_dir)


def _encryption_line(settings: Settings) -> str:
    if settings.encryption_keys_file:
        return f"on, keys in {settings.encryption_keys_file}"
    return "on (TURNGATE_ENCRYPTION_KEYS)" if settings.encryption_keys else "off (turngate dev --encrypt)"


def _dev_encryption(settings: Settings, server: Any) -> Settings:
    """Encrypted histories in dev: a key file in the data dir (unless keys are configured), and
    the dev server's UI decoding through this API's codec endpoint."""
    from turngate.encryption import ensure_key_file

    update: dict[str, Any] = {}
    if not settings.encryption_keys and not settings.encryption_keys_file:
        update["encryption_keys_file"] = ensure_key_file(settings.data_dir / "encryption-keys", "dev-1")
    if server.ui_url:
        server.extra_args.extend(["--ui-codec-endpoint", f"http://{settings.host}:{settings.port}/codec"])
    return settings.model_copy(update=update)


def _provider_names(settings: Settings) -> list[str]:
    from turngate.providers.registry import provider_catalog

    entries = provider_catalog(settings).providers
    return [f"{p.name} (offline, labelled)" if p.offline else p.name for p in entries if p.configured]


async def cmd_serve(args: argparse.Namespace) -> int:
    given = {"host": args.host, "port": args.port}
    settings = load_settings(**{name: value for name, value in given.items() if value is not None})
    if not settings.policy_module:
        log.warning("no policy configured: observer mode, every intent is DENIED (gateway.observer_mode)")
    stop = asyncio.Event()
    _stop_on_signals(stop)
    await _serve_api(settings, stop)
    return 0


async def cmd_worker(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    _stop_on_signals(stop)
    if args.processes > 1:
        from turngate.worker.processes import WorkerSupervisor

        load_settings()  # a bad configuration fails here, once, not in every child
        return await WorkerSupervisor(args.processes).run(stop)
    from turngate.worker.processes import stop_when_orphaned
    from turngate.worker.run import run_worker

    settings = load_settings()
    orphan_watch = asyncio.create_task(stop_when_orphaned(stop))
    try:
        await run_worker(settings, stop)
    finally:
        orphan_watch.cancel()
    return 0


async def cmd_config(args: argparse.Namespace) -> int:
    from turngate.worker.boundary import load_boundary

    settings = load_settings()
    view = settings.public_view()
    boundary = load_boundary(settings)
    view["context_config_digest"] = boundary.context_config_digest
    view["policy"] = settings.policy_module or "observer mode (no policy: every intent DENIED)"
    print(json.dumps(view, indent=2, default=str))
    return 0


async def cmd_verify(args: argparse.Namespace) -> int:
    from turngate.audit.report import verify_command

    return verify_command(
        load_settings(),
        thread_id=args.thread,
        since=args.since,
        until=args.until,
        as_json=args.json,
        out=sys.stdout,
        err=sys.stderr,
        snapshot_grace=args.snapshot_grace,
        ledger_url=args.ledger_url,
        workers=args.workers,
        cache_events=args.cache_events,
        replay_policy=args.replay_policy,
        events_file=Path(args.events) if args.events else None,
        artifacts_dir=args.artifacts,
        allow_unchecked=args.allow_unchecked,
    )


async def cmd_replay_turn(args: argparse.Namespace) -> int:
    from turngate.audit.report import replay_turn_command

    return replay_turn_command(
        load_settings(),
        correlation_id=args.correlation_id,
        as_json=args.json,
        out=sys.stdout,
        err=sys.stderr,
        policy_module=args.policy,
        ledger_url=args.ledger_url,
    )


async def cmd_replay_workflows(args: argparse.Namespace) -> int:
    from turngate.audit.report import replay_workflows_command

    return await replay_workflows_command(
        load_settings(),
        query=args.query,
        limit=args.limit,
        workflow_ids=args.workflow_ids,
        as_json=args.json,
        out=sys.stdout,
        err=sys.stderr,
    )


async def cmd_gc(args: argparse.Namespace) -> int:
    from turngate.artifacts import open_artifact_store
    from turngate.artifacts.gc import format_report, run_gc

    store = open_artifact_store(load_settings().effective_artifacts)
    report = run_gc(store, args.older_than, dry_run=args.dry_run)
    print(json.dumps(report.model_dump(mode="json"), indent=2) if args.json else format_report(report))
    return 0 if not report.failed_paths else 1


# --------------------------------------------------------------------------- parser


if TYPE_CHECKING:  # the subparsers of `turngate` that each command's parser is added to
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]

#: Every command in `turngate --help` order: its one-line help, and the function that adds its
#: parser (module:function, imported only when that command runs). One function may add several.
COMMANDS: dict[str, tuple[str, str]] = {
    "dev": ("Temporal dev server + worker + API in one process (local use)", "turngate.cli:add_dev_parser"),
    "serve": ("run the API (needs a Temporal server and a worker)", "turngate.cli:add_serve_parser"),
    "worker": ("run the Temporal worker (turns + provider calls)", "turngate.cli:add_worker_parser"),
    "chat": (
        "send one message and print the answer and the DECISION",
        "turngate.chat_command:add_chat_parser",
    ),
    "config": ("print the effective configuration (no secrets)", "turngate.cli:add_config_parser"),
    "verify": (
        "recompute every digest, chain link, DECISION and artifact pointer of the ledger",
        "turngate.cli:add_verify_parser",
    ),
    "replay": (
        "replay a turn from the ledger, or workflow histories on this code",
        "turngate.cli:add_replay_parser",
    ),
    "gc": ("delete expired snapshot artifacts (never manifests or events)", "turngate.cli:add_gc_parser"),
    "keys": (
        "create, list and revoke API keys (stored hashed in the ledger db)",
        "turngate.security.key_commands:add_keys_parser",
    ),
    "setup": (
        "one-shot deploy step: migrate the ledger, grant the app role, bootstrap keys",
        "turngate.setup_cli:add_setup_parser",
    ),
    "jobs": (
        "list, show, watch and cancel case jobs (ingest, embed, index)",
        "turngate.jobs.cli.commands:add_jobs_parsers",
    ),
    "cases": (
        "show a case's chunks, embeddings and index; build one from files",
        "turngate.jobs.cli.commands:add_jobs_parsers",
    ),
    "policy": (
        "what-if a candidate policy over the ledger; policy history",
        "turngate.policy_lifecycle.commands:add_policy_parser",
    ),
    "reviews": (
        "list, show, approve and deny turns waiting for review",
        "turngate.reviews.commands:add_reviews_parser",
    ),
    "budgets": (
        "set and show token and cost budgets per tenant and API key",
        "turngate.spend.budget_commands:add_budgets_parser",
    ),
}


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The `turngate` parser with ``commands`` built in full (default: every command); the
    others are listed with their help only, their modules not imported."""
    parser = argparse.ArgumentParser(
        prog="turngate",
        description="A deterministic, durable, auditable boundary in front of LLM calls (on Temporal).",
    )
    parser.add_argument("--version", action="version", version=f"turngate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    full = set(COMMANDS) if commands is None else set(commands) & set(COMMANDS)
    for name, (help_text, adder) in COMMANDS.items():
        if name in sub.choices:
            continue  # added with another command by the same function
        if any(COMMANDS[other][1] == adder for other in full):
            module, function = adder.split(":")
            getattr(importlib.import_module(module), function)(sub)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def command_named(argv: list[str]) -> str | None:
    """The command a command line names: its first word that is not an option (the top-level
    options take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def add_dev_parser(sub: Subcommands) -> None:
    dev = sub.add_parser("dev", help="Temporal dev server + worker + API in one process (local use)")
    dev.add_argument("--port", type=int, default=8010, help="API port (default 8010)")
    dev.add_argument("--temporal-port", type=int, default=7233, help="Temporal frontend port (7233)")
    dev.add_argument("--ui-port", type=int, default=8233, help="Temporal Web UI port (8233)")
    dev.add_argument("--data-dir", help="ledger, artifacts and Temporal state (TURNGATE_DATA_DIR)")
    dev.add_argument(
        "--encrypt",
        action="store_true",
        help="encrypt Temporal histories (a key file in the data dir unless keys are configured)",
    )
    dev.add_argument(
        "--observer",
        action="store_true",
        help="with no policy configured, observer mode (every intent DENIED, gateway.observer_mode) "
        "instead of allowing every intent (the all-in-one image's default)",
    )
    dev.add_argument(
        "--worker-processes",
        type=non_negative_int,
        default=None,
        help="worker processes beside the API (default: TURNGATE_WORKER_PROCESSES, else one per "
        "two cores on more than two cores, else 0: the worker runs in the dev process)",
    )
    dev.set_defaults(run=cmd_dev)


def add_serve_parser(sub: Subcommands) -> None:
    serve = sub.add_parser("serve", help="run the API (needs a Temporal server and a worker)")
    serve.add_argument("--host", help="address to listen on (default: TURNGATE_HOST, else 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: TURNGATE_PORT, else 8010)")
    serve.set_defaults(run=cmd_serve)


def add_worker_parser(sub: Subcommands) -> None:
    worker = sub.add_parser("worker", help="run the Temporal worker (turns + provider calls)")
    worker.add_argument(
        "--processes",
        type=positive_int,
        default=1,
        help="worker processes under one supervisor (default 1; one per core uses every core)",
    )
    worker.set_defaults(run=cmd_worker)


def add_config_parser(sub: Subcommands) -> None:
    config = sub.add_parser("config", help="print the effective configuration (no secrets)")
    config.set_defaults(run=cmd_config)


def add_verify_parser(sub: Subcommands) -> None:
    from turngate.artifacts.gc import parse_duration

    verify = sub.add_parser(
        "verify",
        help="recompute every digest, chain link, DECISION and artifact pointer of the ledger",
        description=(
            "Recompute every digest, chain link, DECISION and artifact pointer of the ledger. "
            "A DECISION made under an earlier config is recomputed with the config stored under "
            "its digest. Exit codes: 0 everything verified, 1 something failed, 2 the check "
            "could not run, 3 some DECISIONs could not be recomputed (--allow-unchecked: 0)."
        ),
    )
    verify.add_argument("--thread", help="only this thread's events")
    verify.add_argument("--since", type=int, metavar="N", help="first ledger index to check")
    verify.add_argument("--until", type=int, metavar="N", help="last ledger index to check")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.add_argument(
        "--snapshot-grace",
        type=parse_duration,
        metavar="DURATION",
        help="missing snapshot artifacts older than this (the gc window, e.g. 7d) are expected",
    )
    verify.add_argument("--ledger-url", help="default: the configured ledger")
    verify.add_argument(
        "--events",
        metavar="FILE",
        help=(
            "verify an exported stream offline instead of the ledger: JSON Lines of /snapshot "
            "events or pages (a contiguous range of one ledger); no database needed"
        ),
    )
    verify.add_argument(
        "--artifacts",
        metavar="DIR",
        help="with --events: the exported artifact directory (or s3:// URL); without it none are checked",
    )
    verify.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="processes to verify in (default: one per core for ledgers of 4,000 events or more)",
    )
    verify.add_argument(
        "--cache-events",
        type=positive_int,
        metavar="N",
        help=(
            "at most this many recent events each process keeps parsed (default 16,384; 8-13 KB "
            "each). The cache starts at 4,096 and grows only when turns name events it has let "
            "go (many threads at once): lower it to cap memory. See docs/AUDIT.md"
        ),
    )
    verify.add_argument(
        "--replay-policy",
        action="store_true",
        help=(
            "also decide every DECISION of the configured policy (TURNGATE_POLICY_MODULE) again: "
            "a different answer (a policy reading the clock or randomness) is a failure"
        ),
    )
    verify.add_argument(
        "--allow-unchecked",
        action="store_true",
        help=(
            "exit 0 even when DECISIONs could not be recomputed (their config is neither the "
            "current one nor stored); they are still counted and listed. Without it such a run "
            "exits 3 (see docs/AUDIT.md)"
        ),
    )
    verify.set_defaults(run=cmd_verify)


def add_replay_parser(sub: Subcommands) -> None:
    replay = sub.add_parser(
        "replay", help="replay a turn from the ledger, or workflow histories on this code"
    )
    replay_sub = replay.add_subparsers(dest="replay_command", required=True, metavar="WHAT")
    turn = replay_sub.add_parser("turn", help="recompute one turn's DECISION from the ledger and compare")
    turn.add_argument("correlation_id")
    turn.add_argument("--policy", help="policy module (default: TURNGATE_POLICY_MODULE)")
    turn.add_argument("--ledger-url", help="default: the configured ledger")
    turn.add_argument("--json", action="store_true")
    turn.set_defaults(run=cmd_replay_turn)
    workflows = replay_sub.add_parser("workflows", help="replay TurnWorkflow histories from Temporal")
    workflows.add_argument("--query", help="visibility query (default: WorkflowType='TurnWorkflow')")
    workflows.add_argument("--limit", type=int, default=1000)
    workflows.add_argument("--workflow-id", action="append", default=[], dest="workflow_ids")
    workflows.add_argument("--json", action="store_true")
    workflows.set_defaults(run=cmd_replay_workflows)


def add_gc_parser(sub: Subcommands) -> None:
    from turngate.artifacts.gc import parse_duration

    gc = sub.add_parser("gc", help="delete expired snapshot artifacts (never manifests or events)")
    gc.add_argument(
        "--older-than", type=parse_duration, required=True, metavar="DURATION", help="e.g. 7d, 12h"
    )
    gc.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    gc.add_argument("--json", action="store_true")
    gc.set_defaults(run=cmd_gc)


def main(argv: list[str] | None = None) -> None:
    _setup_logging()
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser([command_named(argv) or ""]).parse_args(argv)
    run: Callable[[argparse.Namespace], Coroutine[Any, Any, int]] = args.run
    code = 1
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            code = runner.run(run(args))
    except EventLoopConfigError as exc:
        print(f"turngate: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:
        print(f"turngate: {exc}", file=sys.stderr) if not isinstance(exc.code, int) else None
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:
        log.error("%s: %s", type(exc).__name__, exc, exc_info=log.isEnabledFor(logging.DEBUG))
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
