"""The request body limit: a pure ASGI middleware in front of everything the server
answers (the /v1 routes and MCP at /mcp alike).

A declared Content-Length over the limit is refused before a byte of the body is read
(the HTTP server delivers no more than a declared length). A body without one (chunked)
is read here, counted as it streams, and refused as soon as it passes the limit; one
within it is handed on whole. Either way no request makes the server hold more than the
limit of its body, and nothing parses a body over it.

An upload (POST .../memory/attachments) has its own, larger limit: the files of one
request together (CHRONOMEM_MAX_ATTACHMENTS_BYTES); each file is then held to
CHRONOMEM_MAX_ATTACHMENT_BYTES by the route, which names the file over it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chronomem.settings import SettingsError
from thin_api.errors import too_large

# The upload route's path: its body limit is the attachments' one.
UPLOAD_PATH = re.compile(r"^/v1/projects/[^/]+/memory/attachments/?$")


def _env_int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name) or None
    if raw is None:
        return default
    if not raw.strip().isdigit() or not low <= int(raw) <= high:
        raise SettingsError(f"{name} must be an integer between {low} and {high}, not {raw!r}")
    return int(raw)


@dataclass(frozen=True)
class AttachmentLimits:
    """How large the files sent with a message may be."""

    max_file_bytes: int = 10 * 1024 * 1024
    """One file; a larger one is a 413 naming it (at most 64 MiB, the column's check)."""
    max_request_bytes: int = 32 * 1024 * 1024
    """A whole upload request (files and message); a larger one is a 413 before it is read."""
    max_pages: int = 1000
    """Pages of one PDF; more is a 413 naming the file."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AttachmentLimits:
        return cls(
            max_file_bytes=_env_int(
                env, "CHRONOMEM_MAX_ATTACHMENT_BYTES", cls.max_file_bytes, 1, 64 * 1024 * 1024
            ),
            max_request_bytes=_env_int(
                env, "CHRONOMEM_MAX_ATTACHMENTS_BYTES", cls.max_request_bytes, 1024, 2**31
            ),
            max_pages=_env_int(env, "CHRONOMEM_MAX_ATTACHMENT_PAGES", cls.max_pages, 1, 100_000),
        )


class BodyLimitMiddleware:
    def __init__(
        self, app: ASGIApp, *, max_bytes: int, max_upload_bytes: int | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_upload_bytes = max_upload_bytes or max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = (
            self.max_upload_bytes
            if scope.get("method") == "POST" and UPLOAD_PATH.match(scope.get("path", ""))
            else self.max_bytes
        )
        declared = [value for name, value in scope["headers"] if name == b"content-length"]
        if declared:
            try:
                length = max(int(value) for value in declared)
            except ValueError:
                length = limit + 1  # not a length: refuse rather than guess
            if length > limit:
                await too_large(limit).response()(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        pending: list[Message] = []
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                pending.append(message)
                break
            body = message.get("body", b"")
            seen += len(body)
            if seen > limit:
                await too_large(limit).response()(scope, receive, send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                pending.append({"type": "http.request", "body": b"".join(chunks)})
                break

        async def replay() -> Message:
            return pending.pop(0) if pending else await receive()

        await self.app(scope, replay, send)
