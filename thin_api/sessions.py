"""Sign-in: an API key or a verified JWT exchanged for a session (a cms_ token that
memory_http.authenticate accepts like a key), and sign-out. Like
Database.authenticate, these are not calls of memory_http.call_permissions(): they
make the credential the calls then use.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, LiteralString
from uuid import UUID

import psycopg
from fastapi import FastAPI
from psycopg.types.json import Jsonb

from thin_api.db import Database
from thin_api.errors import from_db_error, log, unauthorized
from thin_api.oidc import BearerSessions, JwtRefused, JwtVerifier

# A console session ends after this long without a request (and after 12 hours in any
# case: memory_internal.session_max_age()).
CONSOLE_IDLE_SECONDS = 30 * 60


@dataclass(frozen=True)
class Session:
    token: str
    org_id: UUID
    project_id: UUID
    permissions: list[str]
    expires_at: datetime


def _session(db: Database, query: LiteralString, params: tuple[Any, ...], bucket: str) -> Session:
    try:
        with db.share.hold(bucket), db.pool.connection() as conn, conn.transaction():
            row = conn.execute(query, params).fetchone()
    except psycopg.Error as err:
        raise from_db_error(err) from err
    if row is None:
        raise unauthorized()
    return Session(
        row["token"], row["org_id"], row["project_id"], row["permissions"], row["expires_at"]
    )


def open_key_session(db: Database, api_key: str) -> Session:
    """A console session with the key's org, project and permissions (401 for anything
    but a valid API key)."""
    return _session(
        db,
        "select * from memory_http.open_key_session(%s::text, %s::integer)",
        (api_key, CONSOLE_IDLE_SECONDS),
        api_key,
    )


def open_jwt_session(db: Database, verifier: JwtVerifier, token: str, idle: int | None) -> Session:
    """A session for a JWT the verifier accepts and a mapping of the database names
    (401 otherwise, whatever the reason). idle: the idle expiry in seconds (None: the
    session lasts as long as the token)."""
    try:
        claims = verifier.verify(token)
    except JwtRefused as err:
        log.info("bearer JWT refused: %s", err)
        raise unauthorized() from err
    return _session(
        db,
        "select * from memory_http.open_oidc_session(%s::jsonb, %s::integer)",
        (Jsonb(claims), idle),
        "jwt",
    )


def close_session(db: Database, token: str) -> None:
    with db.share.hold(token), db.pool.connection() as conn, conn.transaction():
        conn.execute("select memory_http.close_session(%s::text)", (token,))


def bearer_session(app: FastAPI, token: str) -> str:
    """The session token standing for a bearer JWT on the HTTP API: from the cache while
    the JWT lasts, else verified and exchanged now (401 when refused)."""
    cache: BearerSessions = app.state.bearer_sessions
    found = cache.get(token)
    if found is not None:
        return found
    session = open_jwt_session(app.state.db, app.state.jwt_verifier, token, None)
    cache.put(token, session.token, min(session.expires_at.timestamp(), time.time() + 3600))
    return session.token
