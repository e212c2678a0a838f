"""The /v1 routes, one module per area; each route is memory_http.authorize_call plus one
SQL call (the permission each call needs is SQL's: memory_http.call_permissions())."""

from __future__ import annotations

from typing import Any

from thin_api.models import ErrorResponse


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


# Documented on every authenticated route.
ERRORS: dict[int | str, dict[str, Any]] = {
    401: _error("Missing, malformed, unknown or revoked API key (no detail)."),
    403: _error("The key does not grant this permission here (own org only)."),
    404: _error("Not found, or not in the key's org."),
    409: _error("Conflict (e.g. an idempotency key reused with another body)."),
    413: _error("The request body exceeds the configured limit (named in the message)."),
    422: _error("Invalid input; `field` names the field at fault."),
    429: _error("The key's org already uses its share of the database connections (Retry-After)."),
    503: _error("The database is unavailable or the query timed out (Retry-After)."),
}
