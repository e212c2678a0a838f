"""The request body limit: a pure ASGI middleware in front of everything the server
answers (the /v1 routes and MCP at /mcp alike).

A declared Content-Length over the limit is refused before a byte of the body is read
(the HTTP server delivers no more than a declared length). A body without one (chunked)
is read here, counted as it streams, and refused as soon as it passes the limit; one
within it is handed on whole. Either way no request makes the server hold more than the
limit of its body, and nothing parses a body over it.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from thin_api.errors import too_large


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
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
