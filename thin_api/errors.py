"""Errors as JSON `{"error": {"code", "message", "field"}}` with stable codes.

SQLSTATEs are mapped here, once: bad input is a 4xx naming the field where the SQL
message (or its DETAIL) names one; another tenant's ids are 404, never 403; a server
fault is a 500 that says nothing about its cause (it is logged instead).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from thin_api.db import OrgBusy
from thin_api.models import ErrorResponse

log = logging.getLogger("chronomem.api")

UNAUTHORIZED_MESSAGE = "missing or invalid API key"


# Seconds a client is told to wait (Retry-After) when the database is unavailable or
# its org's share of the connections is in use.
RETRY_AFTER_SECONDS = 1


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = dict(headers or {})
        if status == 401:
            self.headers.setdefault("WWW-Authenticate", "Bearer")
        if status in (429, 503):
            self.headers.setdefault("Retry-After", str(RETRY_AFTER_SECONDS))

    def response(self) -> JSONResponse:
        body = ErrorResponse.model_validate(
            {"error": {"code": self.code, "message": self.message, "field": self.field}}
        )
        return JSONResponse(body.model_dump(mode="json"), self.status, headers=self.headers)


def unauthorized() -> ApiError:
    return ApiError(401, "unauthorized", UNAUTHORIZED_MESSAGE)


def unavailable(message: str = "the database is unavailable") -> ApiError:
    return ApiError(503, "unavailable", message)


def org_busy() -> ApiError:
    return ApiError(
        429, "busy", "this org already uses its share of the database connections; retry later"
    )


def too_large(limit: int) -> ApiError:
    return ApiError(
        413, "payload_too_large", f"the request body exceeds the limit of {limit} bytes", "body"
    )


# SQLSTATE -> (HTTP status, code).  Class 22 (data exceptions) is bad input as a whole.
_BY_SQLSTATE: dict[str, tuple[int, str]] = {
    "28000": (401, "unauthorized"),
    "CM403": (403, "forbidden"),
    "P0002": (404, "not_found"),
    "23505": (409, "conflict"),
    "23P01": (409, "conflict"),
    # A row written refers to one deleted meanwhile (a project deleted while the
    # request ran): nothing the request could have done otherwise.
    "23503": (409, "conflict"),
    # The state of what the request is about forbids it now (a conflict settled already).
    "55000": (409, "conflict"),
    "40001": (409, "retry"),
    "40P01": (409, "retry"),
    "55P03": (409, "retry"),
    "54000": (422, "invalid_request"),
    "23502": (422, "invalid_request"),
    "23514": (422, "invalid_request"),
    "57014": (503, "timeout"),
}
_BY_CLASS: dict[str, tuple[int, str]] = {
    "22": (422, "invalid_request"),
    # Connection exceptions: the database is unreachable or dropped the connection.
    "08": (503, "unavailable"),
}
# Operator intervention: admin_shutdown, crash_shutdown, cannot_connect_now (57014,
# query_canceled, is the statement timeout, above). The server is going away or coming
# up: a retry later can succeed.
_UNAVAILABLE = {"57P01", "57P02", "57P03", "57P04", "57P05", "53300"}

# Where a SQL message names the field (checked in order, case-insensitive).
_FIELD_RULES: Sequence[tuple[re.Pattern[str], str]] = [
    (re.compile(p, re.IGNORECASE), f)
    for p, f in [
        (r"^message (\d+):", r"messages[\1]"),
        (r"\bidempotency key\b", "Idempotency-Key"),
        (r"\bsearch leg\b", "legs"),
        (r"\bbatch holds at most\b", "facts"),
        (r"\bat most \d+ messages\b", "messages"),
        (r"^wipe takes a session or a subject", "session"),
        (r"^alias(es)?\b", "aliases"),
        (r"^at and known_at\b", "as_of"),
        (
            r"^(k|max_tokens|session|messages|facts|cardinality|predicate|depth|limit|subject"
            r"|name|summary|keep|absorb|permissions|query_embedding|query|as_of|known_at"
            r"|cursor)\b",
            r"\1",
        ),
    ]
]
_FIELD_NAME = re.compile(r"^[A-Za-z_][\w.\-]*(\[\d+\])?[\w.\-]*$")


def sql_field(message: str, detail: str | None) -> str | None:
    if detail and _FIELD_NAME.match(detail):
        return detail
    for pattern, field in _FIELD_RULES:
        if m := pattern.search(message):
            return m.expand(field)
    return None


def from_db_error(err: psycopg.Error) -> ApiError:
    state = err.sqlstate
    if state is None and isinstance(err, psycopg.DataError):
        # Refused by the driver before it reached the server (e.g. NUL in text).
        return ApiError(422, "invalid_request", str(err).split("\n")[0])
    if state is None or state in _UNAVAILABLE or state.startswith("08"):
        # Connection-level: the database is unreachable, shutting down or went away.
        log.warning("database unavailable (%s): %s", state, err)
        return unavailable()
    status, code = _BY_SQLSTATE.get(state) or _BY_CLASS.get(state[:2]) or (500, "internal")
    if status == 401:
        return unauthorized()  # no detail, whatever went wrong
    if status >= 500:
        if status == 500:
            log.error("unexpected database error %s: %s", state, err)
        if status == 503:
            return ApiError(status, code, "query timed out")
        return ApiError(status, code, "internal error")
    diag = err.diag
    message = diag.message_primary or "invalid request"
    # The field is in DETAIL (086) or in the diagnostics' column (087's webhook checks).
    named = diag.message_detail or (diag.column_name if state.startswith("22") else None)
    if status in (409, 422):
        field = sql_field(message, named)
    else:  # a 404 names a field only when DETAIL does (a name in the body not found)
        field = named if status == 404 and named and _FIELD_NAME.match(named) else None
    return ApiError(status, code, message, field)


def _field_from_loc(loc: Sequence[int | str]) -> str | None:
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith("function-after[") or part.startswith("function-before["):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or ("body" if loc and loc[0] == "body" else None)


def _param_at_fault(request: Request) -> str | None:
    """The path or query parameter holding a NUL, which no database text can hold (the
    driver refuses it before the server sees it, so no SQL message names it)."""
    for name, value in [*request.path_params.items(), *request.query_params.multi_items()]:
        if isinstance(value, str) and "\x00" in value:
            return str(name)
    return None


def _method_table(app: FastAPI) -> list[tuple[re.Pattern[str], set[str]]]:
    """(path pattern, methods) of every operation: the documented ones from the OpenAPI
    document, plus routes outside it (MCP at /mcp)."""
    table: dict[str, set[str]] = {}
    for path, item in app.openapi().get("paths", {}).items():
        table.setdefault(path, set()).update(m.upper() for m in item if m in _HTTP_METHODS)
    for route in app.router.routes:
        path, methods = getattr(route, "path", None), getattr(route, "methods", None)
        if isinstance(path, str) and methods and not getattr(route, "include_in_schema", True):
            table.setdefault(path, set()).update(methods)
    out = []
    for path, methods in table.items():
        if "GET" in methods:
            methods.add("HEAD")
        parts = re.split(r"\{[^}]+\}", path)
        out.append((re.compile("[^/]+".join(re.escape(p) for p in parts)), methods))
    return out


_HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def _allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """Every method some operation of the request's path answers (a 405's Allow)."""
    table = getattr(app.state, "method_table", None)
    if table is None:
        table = app.state.method_table = _method_table(app)
    path = request.url.path
    return sorted({m for pattern, methods in table if pattern.fullmatch(path) for m in methods})


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(psycopg.Error)
    async def _db_error(request: Request, exc: psycopg.Error) -> JSONResponse:
        error = from_db_error(exc)
        if error.status == 422 and error.field is None:
            error.field = _param_at_fault(request)
        return error.response()

    @app.exception_handler(OrgBusy)
    async def _org_busy(request: Request, exc: OrgBusy) -> JSONResponse:
        return org_busy().response()

    @app.exception_handler(PoolTimeout)
    async def _pool_timeout(request: Request, exc: PoolTimeout) -> JSONResponse:
        return unavailable("no database connection available").response()

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors: list[dict[str, Any]] = list(exc.errors())
        first = errors[0] if errors else {}
        field = _field_from_loc(first.get("loc", ()))
        message = str(first.get("msg", "invalid request"))
        # Where pydantic can only locate the field, the validator gives the JSON path
        # inside it (thin_api.models.unreachable).
        inner = (first.get("ctx") or {}).get("path")
        if inner and field:
            field += inner if inner.startswith("[") else f".{inner}"
            message = message.replace(f"{inner} ", "", 1)
        if field is None and first.get("type") == "json_invalid":
            field = "body"
        if field:
            message = f"{field}: {message}"
        return ApiError(422, "invalid_request", message, field).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # FastAPI's "There was an error parsing the body" (e.g. not UTF-8): bad input
            # like any other, a 422 naming the body.
            return ApiError(422, "invalid_request", f"body: {exc.detail}", "body").response()
        codes = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}
        code = codes.get(exc.status_code, "http_error")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(_allowed_methods(app, request))
        return ApiError(exc.status_code, code, str(exc.detail), headers=headers).response()

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return ApiError(500, "internal", "internal error").response()
