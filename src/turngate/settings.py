"""Configuration from the environment, the same for every process (API, worker, CLI).

Each setting has a turngate name and, where the published DBL gateway had one, its DBL alias.
``turngate config`` prints the effective values with secrets masked.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from turngate.artifacts.deadline import DEFAULT_ARTIFACT_DEADLINE_S, MAX_ARTIFACT_DEADLINE_S
from turngate.core.sampling import MAX_SAMPLE_N

if TYPE_CHECKING:  # imported when used: the CLI and the worker supervisor load settings quickly
    from turngate.core.context import ContextConfig


def _alias(*names: str) -> AliasChoices:
    return AliasChoices(*names)


def _default_data_dir() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "turngate"


def _csv(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


class LogSettings(BaseSettings):
    """What every process reads before anything else (the CLI, before its command's settings)."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    log_level: str = Field("INFO", validation_alias=_alias("TURNGATE_LOG_LEVEL"))
    # text lines, or json: one object per line with the current span's trace_id/span_id
    log_format: str = Field("text", validation_alias=_alias("TURNGATE_LOG_FORMAT"))


class Settings(LogSettings):
    # Temporal (its own variable names)
    temporal_address: str = Field("127.0.0.1:7233", validation_alias=_alias("TEMPORAL_ADDRESS"))
    temporal_namespace: str = Field("default", validation_alias=_alias("TEMPORAL_NAMESPACE"))
    # The longest the API waits for Temporal to start a turn (or answer /status) before it
    # answers 503 temporal.unavailable with Retry-After (a partition must not hang a request).
    temporal_rpc_timeout_s: float = Field(
        10.0, ge=0.2, le=120, validation_alias=_alias("TURNGATE_TEMPORAL_RPC_TIMEOUT_S")
    )
    # TLS, API keys and profiles come from Temporal's own client configuration (TEMPORAL_TLS_*,
    # TEMPORAL_API_KEY, TEMPORAL_PROFILE, the TOML file): see turngate.temporal_client.
    # Encrypted histories (docs/SECURITY.md): id=base64key entries; the first one encrypts.
    encryption_keys: SecretStr | None = Field(None, validation_alias=_alias("TURNGATE_ENCRYPTION_KEYS"))
    encryption_keys_file: Path | None = Field(None, validation_alias=_alias("TURNGATE_ENCRYPTION_KEYS_FILE"))

    # Storage
    data_dir: Path = Field(default_factory=_default_data_dir, validation_alias=_alias("TURNGATE_DATA_DIR"))
    ledger_url: str | None = Field(None, validation_alias=_alias("TURNGATE_LEDGER_URL"))
    # PostgreSQL: the longest one ledger round trip (connect, statement, commit) may wait on a
    # silent network; past it the call fails as "ledger unavailable" (docs/RELIABILITY.md).
    ledger_timeout_s: float = Field(
        30.0, ge=0.5, le=600, validation_alias=_alias("TURNGATE_LEDGER_TIMEOUT_S")
    )
    # How long a turn's provider step waits, its answer in hand, for a ledger it cannot write
    # (a partition, a full disk) before the turn ends with SYSTEM_ERROR (docs/RELIABILITY.md).
    ledger_wait_s: float = Field(120.0, ge=0, le=3600, validation_alias=_alias("TURNGATE_LEDGER_WAIT_S"))
    # SQLite: below this many free bytes on the ledger's filesystem the API refuses new intents
    # with 503 ledger.disk_full before anything is recorded (0: never).
    ledger_min_free_bytes: int = Field(
        16 * 1024 * 1024, ge=0, validation_alias=_alias("TURNGATE_LEDGER_MIN_FREE_BYTES")
    )
    # Artifact store: a local directory (default <data_dir>/artifacts) or s3://bucket/prefix.
    artifacts: str | None = Field(None, validation_alias=_alias("TURNGATE_ARTIFACTS"))
    # Overall deadline of one turn step's artifact writes (manifest, fault/prompt snapshots, a
    # large message at ingress); past it the turn records SYSTEM_ERROR (docs/ARTIFACTS.md).
    artifact_deadline_s: float = Field(
        DEFAULT_ARTIFACT_DEADLINE_S,
        gt=0,
        le=MAX_ARTIFACT_DEADLINE_S,
        validation_alias=_alias("TURNGATE_ARTIFACT_DEADLINE_S"),
    )
    # One successful turn in N also stores debug snapshots (core/sampling.py); 0: none.
    snapshot_sample_n: int = Field(
        0, ge=0, le=MAX_SAMPLE_N, validation_alias=_alias("TURNGATE_SNAPSHOT_SAMPLE_N")
    )
    # Token side channel for live streaming: sqlite (default, <data_dir>/stream.sqlite3) or redis://...
    token_bus_url: str | None = Field(None, validation_alias=_alias("TURNGATE_TOKEN_BUS_URL"))

    # Policy (None -> observer mode: every intent is DENIED with gateway.observer_mode)
    policy_module: str | None = Field(
        None, validation_alias=_alias("TURNGATE_POLICY_MODULE", "DBL_GATEWAY_POLICY_MODULE")
    )
    policy_object: str = Field(
        "POLICY", validation_alias=_alias("TURNGATE_POLICY_OBJECT", "DBL_GATEWAY_POLICY_OBJECT")
    )
    # A worker whose policy id+version the ledger recorded with another config digest: "refuse"
    # to start (default: a changed policy must change its version) or "warn" and start.
    policy_version_check: Literal["refuse", "warn"] = Field(
        "refuse", validation_alias=_alias("TURNGATE_POLICY_VERSION_CHECK")
    )
    # Shadow policies (docs/POLICIES.md): comma-separated modules (or module:object), evaluated
    # beside the active policy and recorded in the DECISION's `shadow` field; never decide.
    shadow_policy_module: str | None = Field(None, validation_alias=_alias("TURNGATE_SHADOW_POLICY_MODULE"))
    shadow_policy_object: str = Field("POLICY", validation_alias=_alias("TURNGATE_SHADOW_POLICY_OBJECT"))
    # Policies `POST /policy/whatif` may run, besides the built-in ones and the configured active
    # and shadow policies: comma-separated modules (or module:object) installed on the server.
    whatif_policies: str | None = Field(None, validation_alias=_alias("TURNGATE_WHATIF_POLICIES"))
    context_config_path: Path | None = Field(
        None, validation_alias=_alias("TURNGATE_CONTEXT_CONFIG", "DBL_GATEWAY_CONTEXT_CONFIG")
    )
    # Overrides of the context config's fields (docs/CONTEXT.md); checked by load_context_config.
    context_max_refs: str | None = Field(None, validation_alias=_alias("TURNGATE_CONTEXT_MAX_REFS"))
    context_empty_refs_policy: str | None = Field(
        None, validation_alias=_alias("TURNGATE_CONTEXT_EMPTY_REFS_POLICY")
    )
    context_empty_refs_first_turn: str | None = Field(
        None, validation_alias=_alias("TURNGATE_CONTEXT_EMPTY_REFS_FIRST_TURN")
    )
    context_allow_execution_refs: str | None = Field(
        None, validation_alias=_alias("TURNGATE_CONTEXT_ALLOW_EXECUTION_REFS")
    )
    context_enforce_scope_bound: str | None = Field(
        None, validation_alias=_alias("TURNGATE_CONTEXT_ENFORCE_SCOPE_BOUND")
    )
    context_prompt_shape: str | None = Field(None, validation_alias=_alias("TURNGATE_CONTEXT_PROMPT_SHAPE"))

    # Prompt packs: a directory with default/, tasks/ and profiles.json; none -> no system prompt
    prompts_dir: Path | None = Field(None, validation_alias=_alias("TURNGATE_PROMPTS_DIR"))

    # Execution limits
    llm_wall_clock_s: int = Field(
        60, ge=1, validation_alias=_alias("TURNGATE_LLM_WALL_CLOCK_S", "DBL_LLM_WALL_CLOCK_S")
    )
    # Provider calls at once per worker process: enough for several chats to stream together
    # (each call mostly waits on the vendor); /status reports the sum over the worker processes.
    llm_concurrency: int = Field(
        16, ge=1, validation_alias=_alias("TURNGATE_LLM_CONCURRENCY", "DBL_JOB_CONCURRENCY_LLM")
    )
    max_message_bytes: int = Field(256 * 1024, ge=1, validation_alias=_alias("TURNGATE_MAX_MESSAGE_BYTES"))
    max_body_bytes: int = Field(1024 * 1024, ge=1, validation_alias=_alias("TURNGATE_MAX_BODY_BYTES"))
    token_budget: int = Field(100_000, ge=1, validation_alias=_alias("TURNGATE_TOKEN_BUDGET"))
    # Model aliases with fallback candidates and prices (docs/BUDGETS.md); loaded at worker start.
    models_file: Path | None = Field(None, validation_alias=_alias("TURNGATE_MODELS_FILE"))
    # chars/3 (prompt assembly's rule), or tiktoken:<encoding> when tiktoken and its encoding is local
    token_estimator: str = Field("chars/3", validation_alias=_alias("TURNGATE_TOKEN_ESTIMATOR"))
    wait_timeout_s: float = Field(30.0, gt=0, validation_alias=_alias("TURNGATE_WAIT_TIMEOUT_S"))
    # Turns admitted and not finished, per API process; beyond it ingress answers 503 queue.full.
    turn_queue_max: int = Field(256, ge=1, validation_alias=_alias("TURNGATE_TURN_QUEUE_MAX"))
    # The OpenAI-compatible endpoint (docs/OPENAI.md): history in `messages` that matches no
    # recorded event of the thread is refused (default) or recorded in the INTENT as client
    # context; a client system message is placed after the prompt pack's system prompt or refused.
    openai_unmatched_history: Literal["refuse", "record"] = Field(
        "refuse", validation_alias=_alias("TURNGATE_OPENAI_UNMATCHED_HISTORY")
    )
    openai_client_system: Literal["allow", "refuse"] = Field(
        "allow", validation_alias=_alias("TURNGATE_OPENAI_CLIENT_SYSTEM")
    )
    # Messages one call may send (the history is matched against the thread per message): more
    # is refused 413 openai.too_many_messages before anything is parsed further.
    openai_max_messages: int = Field(1024, ge=1, validation_alias=_alias("TURNGATE_OPENAI_MAX_MESSAGES"))

    # Case jobs (docs/JOBS.md): activity slots per job type and worker, open jobs per type before
    # ingress answers 503 queue.full, and each type's wall-clock limit.
    job_concurrency_ingest: int = Field(
        2, ge=1, validation_alias=_alias("TURNGATE_JOB_CONCURRENCY_INGEST", "DBL_JOB_CONCURRENCY_INGEST")
    )
    job_concurrency_embed: int = Field(
        1, ge=1, validation_alias=_alias("TURNGATE_JOB_CONCURRENCY_EMBED", "DBL_JOB_CONCURRENCY_EMBED")
    )
    job_concurrency_index: int = Field(
        1, ge=1, validation_alias=_alias("TURNGATE_JOB_CONCURRENCY_INDEX", "DBL_JOB_CONCURRENCY_INDEX")
    )
    job_queue_max: int = Field(
        100, ge=1, validation_alias=_alias("TURNGATE_JOB_QUEUE_MAX", "DBL_JOB_QUEUE_MAX")
    )
    job_wall_clock_ingest_s: float = Field(
        600.0, gt=0, validation_alias=_alias("TURNGATE_JOB_WALL_CLOCK_INGEST_S")
    )
    job_wall_clock_embed_s: float = Field(
        1800.0, gt=0, validation_alias=_alias("TURNGATE_JOB_WALL_CLOCK_EMBED_S")
    )
    job_wall_clock_index_s: float = Field(
        600.0, gt=0, validation_alias=_alias("TURNGATE_JOB_WALL_CLOCK_INDEX_S")
    )
    # Items (documents, chunks) per job checkpoint, at least 16 whatever a client's batch size;
    # the embedding batch when a case.embed intent names none; how long one job step runs.
    job_checkpoint_items: int = Field(
        256, ge=16, le=100_000, validation_alias=_alias("TURNGATE_JOB_CHECKPOINT_ITEMS")
    )
    job_embed_batch_size: int = Field(
        64, ge=1, le=2048, validation_alias=_alias("TURNGATE_JOB_EMBED_BATCH_SIZE")
    )
    job_step_s: float = Field(60.0, gt=0, validation_alias=_alias("TURNGATE_JOB_STEP_S"))
    # Job task queues are <prefix>-ingest, <prefix>-embed, <prefix>-index.
    job_queue_prefix: str = Field(
        "turngate-jobs",
        pattern=r"^[A-Za-z0-9._-]{1,60}$",
        validation_alias=_alias("TURNGATE_JOB_QUEUE_PREFIX"),
    )
    # Embedder for case.embed when the intent names none: offline (deterministic, not semantic),
    # openai or ollama (docs/JOBS.md#embedders); model and dimension for the remote ones.
    embedder: Literal["offline", "openai", "ollama"] = Field(
        "offline", validation_alias=_alias("TURNGATE_EMBEDDER")
    )
    embedder_model: str | None = Field(None, validation_alias=_alias("TURNGATE_EMBEDDER_MODEL"))
    embedder_dim: int | None = Field(None, ge=1, le=8192, validation_alias=_alias("TURNGATE_EMBEDDER_DIM"))
    # Raw uploads (POST /artifacts, documents for case.ingest).
    max_upload_bytes: int = Field(
        50 * 1024 * 1024, ge=1, validation_alias=_alias("TURNGATE_MAX_UPLOAD_BYTES")
    )
    # Shared limits across API replicas: redis://... holds the per-key rate buckets and stream
    # counts (unset: each API process keeps its own).
    limits_url: str | None = Field(None, validation_alias=_alias("TURNGATE_LIMITS_URL"))

    # Providers
    default_provider: str | None = Field(None, validation_alias=_alias("TURNGATE_DEFAULT_PROVIDER"))
    echo_delay_ms: int = Field(0, ge=0, validation_alias=_alias("TURNGATE_ECHO_DELAY_MS"))
    # the echo provider's time to answer (before its first chunk): a fake provider for benchmarks
    echo_latency_ms: int = Field(0, ge=0, validation_alias=_alias("TURNGATE_ECHO_LATENCY_MS"))
    openai_api_key: SecretStr | None = Field(None, validation_alias=_alias("OPENAI_API_KEY"))
    openai_base_url: str | None = Field(None, validation_alias=_alias("OPENAI_BASE_URL"))
    openai_model_ids: str = Field(
        "gpt-4o-mini", validation_alias=_alias("OPENAI_CHAT_MODEL_IDS", "OPENAI_MODEL_IDS")
    )
    anthropic_api_key: SecretStr | None = Field(None, validation_alias=_alias("ANTHROPIC_API_KEY"))
    anthropic_base_url: str | None = Field(None, validation_alias=_alias("ANTHROPIC_BASE_URL"))
    anthropic_model_ids: str = Field("claude-haiku-4-5", validation_alias=_alias("ANTHROPIC_MODEL_IDS"))
    ollama_host: str | None = Field(None, validation_alias=_alias("OLLAMA_HOST"))
    ollama_model_ids: str = Field("llama3.2:latest", validation_alias=_alias("OLLAMA_MODEL_IDS"))

    # Task queues (one per resource class)
    turns_task_queue: str = Field("turngate-turns", validation_alias=_alias("TURNGATE_TURNS_TASK_QUEUE"))
    llm_task_queue: str = Field("turngate-llm", validation_alias=_alias("TURNGATE_LLM_TASK_QUEUE"))
    # Performance trade-offs (docs/BENCHMARKS.md). regular: the provider call is an activity on
    # the llm queue (heartbeats, its own workers and slots); local: a local activity on the turn
    # worker (one workflow task and ~10 history events per turn; for fast providers).
    provider_activity: Literal["regular", "local"] = Field(
        "regular", validation_alias=_alias("TURNGATE_PROVIDER_ACTIVITY")
    )
    # on: the Temporal workflow sandbox; off: plain runner (faster; determinism then rests on the
    # replay tests). Never off unless asked.
    workflow_sandbox: bool = Field(True, validation_alias=_alias("TURNGATE_WORKFLOW_SANDBOX"))
    # Distinguishes deployments that share one Temporal namespace (turn ids are per deployment).
    workflow_id_prefix: str = Field(
        "turn", pattern=r"^[A-Za-z0-9._-]{1,40}$", validation_alias=_alias("TURNGATE_WORKFLOW_ID_PREFIX")
    )

    # Trust boundary (docs/SECURITY.md). keys: every route but /healthz needs an API key;
    # dev: a request without credentials from a loopback address is an unscoped admin (used by
    # `turngate dev` unless TURNGATE_AUTH is set; never the default).
    auth_mode: Literal["keys", "dev"] = Field("keys", validation_alias=_alias("TURNGATE_AUTH"))
    # Keyless read-only mode (docs/SECURITY.md), off unless asked: GET /snapshot, /tail, /status
    # and /capabilities answer requests without credentials (observer clients of the published
    # DBL gateway send none), as TURNGATE_KEYLESS_READ_TENANT's data (unset: every tenant's).
    # Logged as a warning at start-up and shown in /status.
    keyless_read: bool = Field(False, validation_alias=_alias("TURNGATE_KEYLESS_READ"))
    keyless_read_tenant: str | None = Field(
        None, min_length=1, validation_alias=_alias("TURNGATE_KEYLESS_READ_TENANT")
    )
    # An API key found active is trusted for this many seconds without a lookup: a revoked key
    # is refused within this bound (0: looked up on every request, revocation immediate).
    auth_key_cache_s: float = Field(5.0, ge=0, le=300, validation_alias=_alias("TURNGATE_AUTH_KEY_CACHE_S"))
    # Per-key token bucket: sustained requests per second and burst size.
    rate_limit_per_s: float = Field(20.0, gt=0, validation_alias=_alias("TURNGATE_RATE_LIMIT_PER_S"))
    rate_limit_burst: int = Field(40, ge=1, validation_alias=_alias("TURNGATE_RATE_LIMIT_BURST"))
    # Open SSE streams (/tail, /turns/{id}/stream, ?stream=true) per key.
    max_streams_per_key: int = Field(8, ge=1, validation_alias=_alias("TURNGATE_MAX_STREAMS_PER_KEY"))
    max_declared_refs: int = Field(256, ge=0, validation_alias=_alias("TURNGATE_MAX_DECLARED_REFS"))
    max_declared_tools: int = Field(20, ge=0, validation_alias=_alias("TURNGATE_MAX_DECLARED_TOOLS"))
    # Content fetch of workbench handles (docs/SECURITY.md); parsed by WorkbenchConfig.
    workbench_fetch: str | None = Field(None, validation_alias=_alias("ALLOW_HANDLE_CONTENT_FETCH"))
    workbench_resolver_url: str | None = Field(None, validation_alias=_alias("WORKBENCH_RESOLVER_URL"))
    workbench_bearer_token: SecretStr | None = Field(
        None, validation_alias=_alias("WORKBENCH_AUTH_BEARER_TOKEN")
    )
    workbench_fetch_timeout_ms: str | None = Field(
        None, validation_alias=_alias("WORKBENCH_FETCH_TIMEOUT_MS")
    )
    workbench_max_bytes: str | None = Field(None, validation_alias=_alias("WORKBENCH_MAX_BYTES"))
    workbench_admit_kinds: str | None = Field(None, validation_alias=_alias("WORKBENCH_ADMIT_KINDS"))
    workbench_deny_networks: str | None = Field(None, validation_alias=_alias("WORKBENCH_DENY_NETWORKS"))

    # Human review (docs/REVIEWS.md): POSTed to when a turn starts waiting for a reviewer; with a
    # secret, the body is signed (X-Turngate-Signature: sha256=<hex HMAC>).
    review_webhook_url: str | None = Field(None, validation_alias=_alias("TURNGATE_REVIEW_WEBHOOK_URL"))
    review_webhook_secret: SecretStr | None = Field(
        None, validation_alias=_alias("TURNGATE_REVIEW_WEBHOOK_SECRET")
    )

    # API
    host: str = Field("127.0.0.1", validation_alias=_alias("TURNGATE_HOST"))
    port: int = Field(8010, validation_alias=_alias("TURNGATE_PORT"))
    temporal_ui_url: str | None = Field(None, validation_alias=_alias("TURNGATE_TEMPORAL_UI_URL"))

    # Worker
    # /metrics and /healthz of `turngate worker` (host:port; unset: not served).
    worker_metrics_bind: str = Field("", validation_alias=_alias("TURNGATE_WORKER_METRICS_BIND"))
    # Worker processes beside `turngate dev`'s API (unset: chosen from the core count).
    worker_processes: int | None = Field(None, ge=0, validation_alias=_alias("TURNGATE_WORKER_PROCESSES"))

    @cached_property
    def effective_ledger_url(self) -> str:
        if self.ledger_url:
            return self.ledger_url
        return f"sqlite:///{(self.data_dir / 'ledger.sqlite3').as_posix()}"

    @property
    def effective_artifacts(self) -> str:
        return self.artifacts or (self.data_dir / "artifacts").as_posix()

    @property
    def effective_token_bus_url(self) -> str:
        return self.token_bus_url or f"sqlite:///{(self.data_dir / 'stream.sqlite3').as_posix()}"

    @property
    def shadow_policies(self) -> tuple[str, ...]:
        """Each shadow policy as ``module:object`` (the object defaults to TURNGATE_SHADOW_POLICY_OBJECT)."""
        return tuple(
            name if ":" in name else f"{name}:{self.shadow_policy_object}"
            for name in _csv(self.shadow_policy_module)
        )

    @property
    def whatif_policy_names(self) -> tuple[str, ...]:
        return _csv(self.whatif_policies)

    @property
    def openai_models(self) -> tuple[str, ...]:
        return _csv(self.openai_model_ids)

    @property
    def anthropic_models(self) -> tuple[str, ...]:
        return _csv(self.anthropic_model_ids)

    @property
    def ollama_models(self) -> tuple[str, ...]:
        return _csv(self.ollama_model_ids)

    def context_config(self) -> ContextConfig:
        """The context config file (or the packaged one) with the TURNGATE_CONTEXT_* overrides."""
        from turngate.core.context import (
            ENV_ALLOW_EXECUTION_REFS,
            ENV_EMPTY_REFS_FIRST_TURN,
            ENV_EMPTY_REFS_POLICY,
            ENV_ENFORCE_SCOPE_BOUND,
            ENV_MAX_REFS,
            ENV_PROMPT_SHAPE,
            load_context_config,
        )

        overrides = {
            ENV_MAX_REFS: self.context_max_refs,
            ENV_EMPTY_REFS_POLICY: self.context_empty_refs_policy,
            ENV_EMPTY_REFS_FIRST_TURN: self.context_empty_refs_first_turn,
            ENV_ALLOW_EXECUTION_REFS: self.context_allow_execution_refs,
            ENV_ENFORCE_SCOPE_BOUND: self.context_enforce_scope_bound,
            ENV_PROMPT_SHAPE: self.context_prompt_shape,
        }
        return load_context_config(
            self.context_config_path, {k: v for k, v in overrides.items() if v is not None}
        )

    def public_view(self) -> dict[str, Any]:
        """Effective configuration for display: secrets reduced to set/unset."""
        view: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                value = "<set>"
            elif isinstance(value, Path):
                value = value.as_posix()
            view[name] = value
        view["effective_ledger_url"] = _mask_url(self.effective_ledger_url)
        for name in ("ledger_url", "token_bus_url", "limits_url"):  # may carry a password
            if view.get(name):
                view[name] = _mask_url(view[name])
        return view


def _mask_url(url: str) -> str:
    """Hide a password in a database URL."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


def load_settings(**overrides: Any) -> Settings:
    return Settings(**overrides)
