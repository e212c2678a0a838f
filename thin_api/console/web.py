"""What every console page shares: the session cookie, CSRF tokens, instants from
forms, the database call, and errors as pages.

The session cookie holds the session token (cms_..., memory_internal.auth_sessions):
HttpOnly, SameSite=Strict, Secure when the request came over TLS, path /console. A
form that changes something carries a CSRF token derived from the session token
(sha256), so only a page rendered for this session can post it; the sign-in form, before
there is a session, uses a random token kept in a cookie of its own (double submit).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, LiteralString
from uuid import UUID

import jinja2
import psycopg
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute

from thin_api.db import Access, Database, OrgBusy, Params
from thin_api.errors import ApiError, from_db_error

SESSION_COOKIE = "chronomem_console"
SIGN_IN_COOKIE = "chronomem_sign_in"
PATH = "/console"

_templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).resolve().parent / "templates"),
    autoescape=True,  # every value is text: a fact reading <script> shows as text
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _short_time(value: Any) -> str:
    """An ISO instant as the pages show it: UTC, to the second."""
    if value is None:
        return "—"
    text = str(value)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _iso(value: Any) -> str:
    """An ISO instant for a form field: as the database gave it, UTC written as Z."""
    return "" if value is None else str(value).replace("+00:00", "Z")


_templates.filters["t"] = _short_time
_templates.filters["iso"] = _iso


class SignInNeeded(Exception):
    """No session, or the database no longer accepts it."""


class BadInput(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def csrf_for(session_token: str) -> str:
    return hashlib.sha256(f"console-csrf:{session_token}".encode()).hexdigest()


def session_token(request: Request) -> str:
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        raise SignInNeeded
    return token


def check_csrf(request: Request, sent: str | None) -> str:
    """The session token, when `sent` is this session's CSRF token (else 403)."""
    token = session_token(request)
    if not sent or not hmac.compare_digest(sent, csrf_for(token)):
        raise ApiError(403, "csrf", "this form is not from this session; reload the page")
    return token


def new_sign_in_token() -> str:
    return secrets.token_hex(16)


def set_cookie(request: Request, response: Response, name: str, value: str) -> None:
    response.set_cookie(
        name,
        value,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def parse_instant(field: str, value: str | None) -> datetime | None:
    """An instant from a form field (ISO 8601; zone-less is UTC); None when empty."""
    if value is None or not value.strip():
        return None
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError as err:
        raise BadInput(field, f"{field}: not an ISO 8601 instant: {value!r}") from err
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_id(value: str) -> UUID:
    """An id from a path: one that is not a UUID is not found, as a random one."""
    try:
        return UUID(value)
    except ValueError as err:
        raise ApiError(404, "not_found", "not found") from err


def call(
    request: Request,
    project: UUID | None,
    query: LiteralString,
    params: Params = (),
    *,
    many: bool = False,
) -> Any:
    """memory_http.authorize_call with the session's token, then `query` (Database.call)."""
    db: Database = request.app.state.db
    return db.call(Access(session_token(request), project), query, params, many=many)


def project_nav(request: Request, project: UUID, section: str) -> dict[str, Any]:
    """What every project page shows in its header: the project's name (memory.get_project)."""
    rows = call(
        request, project, "select * from memory.get_project(%s::uuid)", (project,), many=True
    )
    if not rows:
        raise ApiError(404, "not_found", "not found")
    return {"project": rows[0], "section": section}


def render(request: Request, template: str, status: int = 200, **values: Any) -> HTMLResponse:
    token = request.cookies.get(SESSION_COOKIE)
    page = _templates.get_template(template).render(
        request=request,
        csrf=csrf_for(token) if token else "",
        signed_in=bool(token),
        **values,
    )
    return HTMLResponse(
        page,
        status,
        headers={
            # No script but our own file, no framing: an injected <script> would not run
            # even if escaping failed. Inline styles place the timeline's bars.
            "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
            "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin",
            "Cache-Control": "no-store",
        },
    )


_TITLES = {
    403: "Not allowed",
    404: "Not found",
    409: "Conflict",
    422: "Invalid input",
    429: "Busy",
    503: "Unavailable",
}


def error_page(request: Request, error: ApiError) -> Response:
    if error.status == 401:
        return sign_in_redirect(request)
    message = error.message if error.status != 404 else "Nothing here: no such page or id."
    return render(
        request,
        "error.html",
        error.status,
        title=_TITLES.get(error.status, "Error"),
        message=message,
        code=error.status,
    )


def sign_in_redirect(request: Request) -> Response:
    response = RedirectResponse(f"{PATH}/sign-in", status_code=303)
    if request.cookies.get(SESSION_COOKIE):
        response.delete_cookie(SESSION_COOKIE, path=PATH)
    return response


class ConsoleRoute(APIRoute):
    """Errors of a console page as pages: the API's JSON errors, mapped the same way
    (thin_api.errors.from_db_error), rendered as HTML; a lost session goes to sign-in."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInNeeded:
                return sign_in_redirect(request)
            except BadInput as err:
                return error_page(request, ApiError(422, "invalid_request", err.message))
            except RequestValidationError as err:
                first: Sequence[Any] = err.errors()
                where = ".".join(str(p) for p in first[0].get("loc", ())[1:]) if first else ""
                return error_page(
                    request, ApiError(422, "invalid_request", f"{where}: invalid value")
                )
            except ApiError as err:
                return error_page(request, err)
            except psycopg.Error as err:
                return error_page(request, from_db_error(err))
            except OrgBusy:
                return error_page(request, ApiError(429, "busy", "busy; retry in a moment"))

        return route
