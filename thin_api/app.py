"""The ASGI app, `thin_api.app:app`.

The database DSN (an app-role one) comes from CHRONOMEM_API_DSN, which `chronomem
serve` sets; it is read at startup, so importing this module needs no database.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from chronomem.settings import ApiSettings, Settings, SettingsError
from thin_api import console, errors, mcp_server
from thin_api.db import Database
from thin_api.embedding import QueryEmbedder
from thin_api.limits import AttachmentLimits, BodyLimitMiddleware
from thin_api.metrics import ApiMetrics, MetricsMiddleware
from thin_api.routes import (
    attachments,
    conflicts,
    extraction,
    facts,
    memory,
    ops,
    projects,
    retrieval,
    usage,
    webhooks,
)

DSN_VARIABLE = "CHRONOMEM_API_DSN"

DESCRIPTION = """\
Long-term memory for AI agents as a temporal knowledge graph in PostgreSQL.

Authenticate with an API key: `Authorization: Bearer cmk_...` (create the first one with
`chronomem create-key`). Errors are `{"error": {"code", "message", "field"}}`.
Timestamps are ISO 8601; a timestamp without a zone is read as UTC; answers are in UTC.
"""


def create_app(dsn: str | None = None, settings: Settings | None = None) -> FastAPI:
    metrics = ApiMetrics()
    # The body limit is needed before the lifespan runs (the middleware stack is built
    # on the first request); the rest of the settings are read at startup.
    limit = (settings or Settings.from_env()).api.max_body_bytes
    attachment_limits = AttachmentLimits.from_env(os.environ)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        conf = settings or Settings.from_env()
        url = dsn or os.environ.get(DSN_VARIABLE)
        if not url:
            raise SettingsError(f"{DSN_VARIABLE} is not set (`chronomem serve` sets it)")
        api: ApiSettings = conf.api
        db = Database(
            url,
            min_size=api.pool_min,
            max_size=api.pool_max,
            timeout=api.pool_timeout,
            org_connections=api.org_connections,
            statement_timeout_ms=int(api.statement_timeout * 1000),
        )
        db.open()
        metrics.watch_database(db)
        app.state.db = db
        app.state.embedder = QueryEmbedder(conf.embedding, enabled=api.query_embeddings)
        app.state.embedder.warm()  # the first search then finds the model loaded
        try:
            yield
        finally:
            db.close()

    app = FastAPI(
        title="Chronomem",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.metrics = metrics
    errors.install(app)
    app.state.attachment_limits = attachment_limits
    for module in (
        projects,
        memory,
        attachments,
        facts,
        conflicts,
        extraction,
        retrieval,
        webhooks,
        usage,
        ops,
    ):
        app.include_router(module.router)
    mcp_server.mount(app)  # MCP over streamable HTTP at /mcp
    console.install(app)  # the operator console at /console (not in the OpenAPI document)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(  # outermost: before parsing
        BodyLimitMiddleware,
        max_bytes=limit,
        max_upload_bytes=attachment_limits.max_request_bytes,
    )
    logging.getLogger("chronomem.api").setLevel(logging.INFO)
    return app


app = create_app()
