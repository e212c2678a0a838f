"""Settings read from the environment, and the fixed names of roles and database."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

DATABASE_NAME = "chronomem"
OWNER_ROLE = "chronomem_owner"  # owns the schema and runs migrations
APP_ROLE = "chronomem_app"  # API and workers: owns nothing, RLS forced
ANALYST_ROLE = "chronomem_analyst"  # read-only
ROLES: Mapping[str, str] = {"owner": OWNER_ROLE, "app": APP_ROLE, "analyst": ANALYST_ROLE}


class SettingsError(ValueError):
    """A variable is set to something unusable; the message names it."""


def _get(env: Mapping[str, str], name: str) -> str | None:
    # An empty variable counts as unset, so `FOO= cmd` can switch a setting off.
    return env.get(name) or None


def _number(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, not {raw!r}") from None
    if not low <= value <= high:
        raise SettingsError(f"{name} must be between {low:g} and {high:g}, not {raw}")
    return value


def _int(env: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    """The variable as an integer in [low, high]; None when unset."""
    raw = _get(env, name)
    if raw is None:
        return None
    if not raw.strip().isdigit() or not low <= int(raw) <= high:
        raise SettingsError(f"{name} must be an integer between {low} and {high}, not {raw!r}")
    return int(raw)


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """The variable, one of choices (case-insensitive); the first when unset."""
    value = (_get(env, name) or choices[0]).strip().lower()
    if value not in choices:
        raise SettingsError(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return value


@dataclass(frozen=True)
class LLMSettings:
    """Any OpenAI-compatible chat endpoint (OpenAI, Azure, Ollama, vLLM, OpenRouter).

    Without a base URL there is no extraction: enrich jobs wait (status 'waiting') and
    resume when a worker with an endpoint starts."""

    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    timeout: float = 120.0  # seconds per call; keep it below the worker lease
    response_format: str = "auto"
    """How the answer's JSON is asked for: json_schema (strict structured output),
    json_object (JSON mode, the schema in the prompt), none (plain text, the schema in
    the prompt), or auto: json_schema, falling back to the next when the endpoint
    refuses it (remembered per worker)."""

    @property
    def configured(self) -> bool:
        return self.base_url is not None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LLMSettings:
        base_url, model = _get(env, "CHRONOMEM_LLM_BASE_URL"), _get(env, "CHRONOMEM_LLM_MODEL")
        if base_url and not model:
            raise SettingsError("CHRONOMEM_LLM_BASE_URL is set: set CHRONOMEM_LLM_MODEL too")
        return cls(
            base_url=base_url,
            api_key=_get(env, "CHRONOMEM_LLM_API_KEY"),
            model=model,
            timeout=_number(env, "CHRONOMEM_LLM_TIMEOUT", 120.0, 1, 3600),
            response_format=_choice(
                env, "CHRONOMEM_LLM_RESPONSE_FORMAT", ("auto", "json_schema", "json_object", "none")
            ),
        )


@dataclass(frozen=True)
class EmbeddingSettings:
    """An OpenAI-compatible embeddings endpoint, or (no base URL) the local
    all-MiniLM-L6-v2 model shipped by the `embed` extra (384 dimensions, offline)."""

    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    dim: int | None = None
    """The endpoint's vector length; when None the worker asks the endpoint once at start."""
    runtime: str = "onnx"
    """The local model's runtime: `onnx` (ONNX Runtime on the same weights, exported on
    first use; torch when onnxruntime is not installed) or `torch`."""
    cache_dir: Path | None = None
    """Where the local model's ONNX export is kept; None: under the environment's prefix."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> EmbeddingSettings:
        base_url, model = (
            _get(env, "CHRONOMEM_EMBEDDING_BASE_URL"),
            _get(env, "CHRONOMEM_EMBEDDING_MODEL"),
        )
        if base_url and not model:
            raise SettingsError(
                "CHRONOMEM_EMBEDDING_BASE_URL is set: set CHRONOMEM_EMBEDDING_MODEL too"
            )
        runtime = (_get(env, "CHRONOMEM_EMBEDDING_RUNTIME") or "onnx").lower()
        if runtime not in ("onnx", "torch"):
            raise SettingsError(
                f"CHRONOMEM_EMBEDDING_RUNTIME must be onnx or torch, not {runtime!r}"
            )
        return cls(
            base_url=base_url,
            api_key=_get(env, "CHRONOMEM_EMBEDDING_API_KEY"),
            model=model,
            dim=_int(env, "CHRONOMEM_EMBEDDING_DIM", 1, 16000),
            runtime=runtime,
            cache_dir=Path(cache) if (cache := _get(env, "CHRONOMEM_EMBEDDING_CACHE")) else None,
        )


@dataclass(frozen=True)
class WorkerSettings:
    concurrency: int = 2
    """Jobs run at once per worker process (one thread and connection each). With two
    lanes or more, lane 0 never takes webhook deliveries (workers/runner.py)."""
    lease: float = 300.0
    """Seconds a claimed job stays ours; a dead worker's job is reclaimed after it."""
    poll_interval: float = 5.0
    """Seconds between queue polls when no NOTIFY arrives (the wake-up is NOTIFY)."""
    min_confidence: float = 0.5
    """Extracted facts below this confidence are dropped (by memory_worker.apply_extraction)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkerSettings:
        return cls(
            concurrency=_int(env, "CHRONOMEM_WORKER_CONCURRENCY", 1, 64) or cls.concurrency,
            lease=_number(env, "CHRONOMEM_WORKER_LEASE", 300.0, 1, 86400),
            poll_interval=_number(env, "CHRONOMEM_WORKER_POLL_INTERVAL", 5.0, 0.05, 3600),
            min_confidence=_number(env, "CHRONOMEM_MIN_CONFIDENCE", 0.5, 0, 1),
        )


def _flag(env: Mapping[str, str], name: str) -> bool:
    return (_get(env, name) or "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class WebhookSettings:
    """Webhook delivery (workers/webhooks.py) and its share of the worker's lanes."""

    timeout: float = 10.0
    """Seconds one attempt may take in all: resolving, connecting, TLS, sending the body
    and receiving the answer's headers. Past it the attempt fails (and is retried)."""
    allow_private: bool = False
    """Deliver to loopback, private, link-local and other non-public addresses too
    (a local receiver, tests). Off by default: endpoint URLs come from tenants, and the
    worker must not become their way into the operator's network."""
    max_in_flight_per_org: int = 4
    """Deliveries of one org in flight at once, across the workers (memory_worker.claim_jobs
    leaves the org's other deliveries queued until one ends)."""
    max_in_flight_per_endpoint: int = 2
    """Deliveries to one endpoint in flight at once."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebhookSettings:
        env = os.environ if env is None else env
        return cls(
            timeout=_number(env, "CHRONOMEM_WEBHOOK_TIMEOUT", cls.timeout, 0.1, 120),
            allow_private=_flag(env, "CHRONOMEM_WEBHOOK_ALLOW_PRIVATE"),
            max_in_flight_per_org=_int(env, "CHRONOMEM_WEBHOOK_MAX_IN_FLIGHT_PER_ORG", 1, 1000)
            or cls.max_in_flight_per_org,
            max_in_flight_per_endpoint=_int(
                env, "CHRONOMEM_WEBHOOK_MAX_IN_FLIGHT_PER_ENDPOINT", 1, 1000
            )
            or cls.max_in_flight_per_endpoint,
        )


@dataclass(frozen=True)
class ApiSettings:
    """The HTTP API (`chronomem serve`, and `chronomem up` with the worker)."""

    host: str = "127.0.0.1"
    port: int = 8765
    pool_min: int = 1
    pool_max: int = 10
    """Database connections the API keeps (each request holds one for its transaction)."""
    pool_timeout: float = 10.0
    """Seconds a request waits for a connection (its org's share, then the pool) before
    it is answered 429 (its org's share) or 503 (the pool) with Retry-After."""
    pool_per_org: int | None = None
    """Connections one org may hold at once; None: three quarters of pool_max (at least
    1), so that one org's many slow requests leave connections for the others."""
    max_body_bytes: int = 4 * 1024 * 1024
    """Largest request body (HTTP and MCP); a larger one is a 413 before it is parsed."""
    statement_timeout: float = 30.0
    """Seconds a request's SQL may run before it is cancelled (a 503 timeout)."""
    query_embeddings: bool = True
    """Embed search queries with the configured embedder (CHRONOMEM_EMBEDDING_*, else the
    local model when installed); off: vector legs run only on a client's own vector."""

    @property
    def org_connections(self) -> int:
        """Connections one org may hold at once (pool_per_org, at most pool_max)."""
        share = self.pool_per_org or max(1, self.pool_max * 3 // 4)
        return min(share, self.pool_max)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ApiSettings:
        embed = (_get(env, "CHRONOMEM_API_QUERY_EMBEDDINGS") or "auto").strip().lower()
        if embed not in ("auto", "off"):
            raise SettingsError(
                f"CHRONOMEM_API_QUERY_EMBEDDINGS must be auto or off, not {embed!r}"
            )
        pool_min = _int(env, "CHRONOMEM_API_POOL_MIN", 0, 256)
        pool_max = _int(env, "CHRONOMEM_API_POOL_MAX", 1, 256) or cls.pool_max
        if pool_min is not None and pool_min > pool_max:
            raise SettingsError("CHRONOMEM_API_POOL_MIN must not exceed CHRONOMEM_API_POOL_MAX")
        return cls(
            host=_get(env, "CHRONOMEM_API_HOST") or cls.host,
            port=_int(env, "CHRONOMEM_API_PORT", 1, 65535) or cls.port,
            pool_min=min(cls.pool_min, pool_max) if pool_min is None else pool_min,
            pool_max=pool_max,
            pool_timeout=_number(env, "CHRONOMEM_API_POOL_TIMEOUT", 10.0, 0.1, 3600),
            pool_per_org=_int(env, "CHRONOMEM_API_POOL_PER_ORG", 1, 256),
            max_body_bytes=_int(env, "CHRONOMEM_API_MAX_BODY_BYTES", 1024, 2**31)
            or cls.max_body_bytes,
            statement_timeout=_number(env, "CHRONOMEM_API_STATEMENT_TIMEOUT", 30.0, 0.1, 86400),
            query_embeddings=embed == "auto",
        )


@dataclass(frozen=True)
class Settings:
    database_url: str | None
    """Superuser DSN of an existing server; when None, the embedded server is used."""
    data_dir: Path
    app_password: str | None
    owner_password: str | None
    """Only needed where the server asks for passwords (e.g. DATABASE_URL over TCP)."""
    llm: LLMSettings = field(default_factory=LLMSettings)
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    webhook: WebhookSettings = field(default_factory=WebhookSettings)
    api: ApiSettings = field(default_factory=ApiSettings)

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pg"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        data_dir = _get(env, "CHRONOMEM_DATA_DIR") or platformdirs.user_data_dir("chronomem")
        return cls(
            database_url=_get(env, "DATABASE_URL"),
            data_dir=Path(data_dir).expanduser(),
            app_password=_get(env, "CHRONOMEM_APP_PASSWORD"),
            owner_password=_get(env, "CHRONOMEM_OWNER_PASSWORD"),
            llm=LLMSettings.from_env(env),
            embedding=EmbeddingSettings.from_env(env),
            worker=WorkerSettings.from_env(env),
            webhook=WebhookSettings.from_env(env),
            api=ApiSettings.from_env(env),
        )
