"""Files sent with a message: the upload, and reads of a stored file.

The upload is its own route (POST .../memory/attachments, multipart/form-data) beside
the JSON ingest (POST .../memory), not a second content type of that one: FastAPI
declares one body per route, so one route with both would parse its body by hand and
describe it in OpenAPI by hand, and the JSON route's validation (and its errors) would
change for every client that never sends a file.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import quote
from uuid import UUID

from fastapi import APIRouter, File, Form, Header, Request, Response, UploadFile
from psycopg.types.json import Jsonb
from pydantic import ValidationError

from thin_api.attachments import ExtractedFile, extract
from thin_api.db import Access
from thin_api.deps import DB, Token
from thin_api.errors import ApiError, unauthorized
from thin_api.limits import AttachmentLimits
from thin_api.models import Attachment, AttachmentIngestResult, IngestRequest
from thin_api.routes import ERRORS

router = APIRouter(prefix="/v1", tags=["memory"], responses=ERRORS)


def _limits(request: Request) -> AttachmentLimits:
    limits = getattr(request.app.state, "attachment_limits", None)
    return limits if isinstance(limits, AttachmentLimits) else AttachmentLimits()


def _message(
    message: str | None, session: str | None, role: str | None, content: str | None
) -> IngestRequest:
    """The message part: today's JSON body ({session, messages, session_metadata}), or
    one message as JSON ({session, role, content, occurred_at, metadata}), or the form
    fields session, role and content."""
    if message is not None:
        try:
            doc = json.loads(message)
        except ValueError as err:
            raise ApiError(422, "invalid_request", "message must be JSON", "message") from err
        if isinstance(doc, dict) and "messages" not in doc:
            one = {k: v for k, v in doc.items() if k not in ("session", "session_metadata")}
            one.setdefault("role", "user")
            doc = {k: v for k, v in doc.items() if k in ("session", "session_metadata")}
            doc["messages"] = [one]
    elif session is not None and content is not None:
        doc = {"session": session, "messages": [{"role": role or "user", "content": content}]}
    else:
        raise ApiError(
            422,
            "invalid_request",
            "a message part (JSON) or the fields session and content are required",
            "message",
        )
    try:
        return IngestRequest.model_validate(doc)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApiError(
            422, "invalid_request", f"message: {where}: {first['msg']}", f"message.{where}"
        ) from err


@router.post(
    "/projects/{project_id}/memory/attachments",
    response_model=AttachmentIngestResult,
    responses={
        413: {"description": "A file, a PDF's pages or the request over its limit."},
        415: {"description": "A file of a media type not accepted."},
    },
)
def ingest_with_files(
    request: Request,
    project_id: UUID,
    token: Token,
    db: DB,
    file: Annotated[
        list[UploadFile],
        File(
            description="One or more files: text/plain, text/markdown, text/html or "
            "application/pdf (the part's type, or its name's extension when it has none)."
        ),
    ],
    message: Annotated[
        str | None,
        Form(
            description="JSON: the body of POST .../memory ({session, messages, "
            "session_metadata}) or one message ({session, role, content, occurred_at, "
            "metadata}). The files come with its last message."
        ),
    ] = None,
    session: Annotated[str | None, Form(description="Without `message`: the session.")] = None,
    role: Annotated[str | None, Form(description="Without `message`: the role (user).")] = None,
    content: Annotated[str | None, Form(description="Without `message`: the text.")] = None,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="As for POST .../memory; the body includes the files' digests.",
        ),
    ] = None,
) -> Any:
    """Store a message with files: each file whole, its text (PDF per page, HTML as
    text) chunked into episodes of the session after the message, each pointing back to
    the file, page and offset; searched and extracted like any episode. One
    transaction: a bad file (named in the error) stores nothing, the message neither."""
    body = _message(message, session, role, content)
    # A valid key before any file is read: the text extraction is work no one without
    # a key may make the server do. (The call below checks the permission.)
    if not db.authenticate(token):
        raise unauthorized()
    limits = _limits(request)
    files: list[ExtractedFile] = []
    for i, upload in enumerate(file):
        name = upload.filename or f"file {i + 1}"
        field = f"file[{i}]"
        size = upload.size
        data = upload.file.read(limits.max_file_bytes + 1)
        if len(data) > limits.max_file_bytes or (size or 0) > limits.max_file_bytes:
            raise ApiError(
                413,
                "payload_too_large",
                f'file "{name}" exceeds the limit of {limits.max_file_bytes} bytes per file',
                field,
            )
        files.append(extract(name, upload.content_type, data, field, limits.max_pages))
    messages = [m.model_dump(mode="json", exclude_none=True) for m in body.messages]
    return db.call(
        Access(token, project_id),
        "select memory_http.ingest_attachments(%s::uuid, %s::text, %s::jsonb, %s::jsonb,"
        " %s::bytea[], %s::text, %s::jsonb)",
        (
            project_id,
            body.session,
            Jsonb(messages),
            Jsonb(
                [
                    {"filename": f.filename, "media_type": f.media_type, "pages": f.pages}
                    for f in files
                ]
            ),
            [f.content for f in files],
            idempotency_key,
            None if body.session_metadata is None else Jsonb(body.session_metadata),
        ),
    )


@router.get("/projects/{project_id}/attachments/{attachment_id}", response_model=Attachment)
def get_attachment(project_id: UUID, attachment_id: UUID, token: Token, db: DB) -> Any:
    """A stored file's name, media type, size, SHA-256, pages and session, with its
    chunks: each one's episode id, page and character offset."""
    return db.call(
        Access(token, project_id),
        "select memory.get_attachment(%s::uuid, %s::uuid)",
        (project_id, attachment_id),
    )


@router.get(
    "/projects/{project_id}/attachments/{attachment_id}/content",
    response_class=Response,
    responses={
        200: {
            "description": "The file's bytes, with its media type.",
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
)
def attachment_content(project_id: UUID, attachment_id: UUID, token: Token, db: DB) -> Response:
    """The file's bytes as stored, with its media type, as a download (never rendered
    in place: an HTML file is served sandboxed)."""
    row = db.call_row(
        Access(token, project_id),
        "select * from memory.attachment_content(%s::uuid, %s::uuid)",
        (project_id, attachment_id),
    )
    return Response(
        content=bytes(row["content"]),
        media_type=row["media_type"],
        headers={
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(row['filename'])}",
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox",
        },
    )
