"""The operator console at /console: server-rendered pages (Jinja2) over the same SQL
calls as the API, each through memory_http.authorize_call with the signed-in session's
token. The console adds no rules: every number and row on a page is what the SQL
function it names returns (docs/console.md)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from thin_api.console import review
from thin_api.console.pages import router
from thin_api.oidc import BearerSessions, JwtVerifier

STATIC = Path(__file__).resolve().parent / "static"


def install(app: FastAPI) -> None:
    """The console's pages and static files, and the JWT verifier the console's sign-in
    and the API's bearer JWTs share (CHRONOMEM_OIDC_PROVIDERS)."""
    app.state.jwt_verifier = JwtVerifier.from_env()
    app.state.bearer_sessions = BearerSessions()
    app.include_router(router)
    app.include_router(review.router)
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
