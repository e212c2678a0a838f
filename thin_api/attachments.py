"""The text of a file sent with a message, per page, for memory.ingest_attachments.

Four kinds are accepted: plain text and Markdown (UTF-8, stored as they are), HTML
(its text, read with the standard library's parser: scripts and styles left out,
block elements ending paragraphs) and PDF (pypdf, one text per page). The media type
is the part's own (or, for application/octet-stream or none, the file name's
extension), checked against the bytes: a "PDF" that does not start as one, or text
that is not UTF-8, is refused naming the file. Chunking is not done here: SQL holds the
one rule (memory_internal.chunk_text).
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass
from html.parser import HTMLParser

from pypdf import PdfReader
from pypdf.errors import PyPdfError

from thin_api.errors import ApiError

MEDIA_TYPES = ("text/plain", "text/markdown", "text/html", "application/pdf")

_ALIASES = {
    "text/x-markdown": "text/markdown",
    "application/xhtml+xml": "text/html",
    "application/x-pdf": "application/pdf",
}
_BY_EXTENSION = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
}
_UNTYPED = ("", "application/octet-stream")

# pypdf logs what it repairs in a damaged file; the answer says what matters.
logging.getLogger("pypdf").setLevel(logging.ERROR)


@dataclass(frozen=True)
class ExtractedFile:
    filename: str
    media_type: str
    content: bytes
    pages: list[str]


def _bad(filename: str, field: str, message: str, status: int = 422) -> ApiError:
    return ApiError(status, "invalid_request", f'file "{filename}": {message}', field)


def media_type_of(filename: str, declared: str | None) -> str | None:
    """The accepted media type the part declares (parameters such as charset left
    out), or its name's extension's when it declares none; None when not accepted."""
    kind = (declared or "").split(";", 1)[0].strip().lower()
    kind = _ALIASES.get(kind, kind)
    if kind in _UNTYPED:
        dot = filename.rfind(".")
        return _BY_EXTENSION.get(filename[dot:].lower()) if dot >= 0 else None
    return kind if kind in MEDIA_TYPES else None


class _HtmlText(HTMLParser):
    """An HTML document's text: block elements end paragraphs; script, style and the
    like are left out."""

    _BLOCKS = frozenset(
        (
            "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt",
            "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
            "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "table",
            "td", "th", "tr", "ul",
        )
    )  # fmt: skip
    _HIDDEN = frozenset(("script", "style", "template", "noscript", "head", "title"))

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._HIDDEN:
            self._hidden += 1
        elif tag in self._BLOCKS:
            self.parts.append("\n\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._BLOCKS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._HIDDEN:
            self._hidden = max(0, self._hidden - 1)
        elif tag in self._BLOCKS:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def html_text(document: str) -> str:
    parser = _HtmlText()
    parser.feed(document)
    parser.close()
    text = "".join(parser.parts)
    # Runs of spaces within a line are one space; blank-line runs one paragraph break.
    lines = [re.sub(r"[ \t\f\v\r]+", " ", line).strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _clean(text: str) -> str:
    # PostgreSQL text holds no NUL.
    return text.replace("\x00", "")


def _pdf_pages(filename: str, field: str, content: bytes, max_pages: int) -> list[str]:
    try:
        reader = PdfReader(io.BytesIO(content), strict=False)
        if reader.is_encrypted:
            raise _bad(filename, field, "the PDF is encrypted")
        count = len(reader.pages)
        if count > max_pages:
            raise _bad(filename, field, f"the PDF has {count} pages, at most {max_pages}", 413)
        return [_clean(page.extract_text() or "") for page in reader.pages]
    except ApiError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
        raise _bad(filename, field, f"not a readable PDF ({type(err).__name__})") from err


def extract(
    filename: str, declared: str | None, content: bytes, field: str, max_pages: int
) -> ExtractedFile:
    """The file's text per page, or a 4xx naming the file: empty, a media type not
    accepted (415), bytes that are not what the type says, a PDF that cannot be read,
    no text at all."""
    if not content:
        raise _bad(filename, field, "the file is empty")
    kind = media_type_of(filename, declared)
    if kind is None:
        raise _bad(
            filename,
            field,
            f"media type {declared or 'unknown'!r} is not accepted "
            f"(one of {', '.join(MEDIA_TYPES)})",
            415,
        )
    is_pdf = content[:1024].find(b"%PDF-") >= 0
    if kind == "application/pdf":
        if not is_pdf:
            raise _bad(filename, field, "declared application/pdf but is not a PDF")
        pages = _pdf_pages(filename, field, content, max_pages)
    else:
        if is_pdf:
            raise _bad(filename, field, f"declared {kind} but is a PDF")
        try:
            text = content.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise _bad(filename, field, f"declared {kind} but is not UTF-8 text") from err
        if "\x00" in text:
            raise _bad(filename, field, f"declared {kind} but holds binary data")
        pages = [html_text(text) if kind == "text/html" else text]
    if not any(page.strip() for page in pages):
        raise _bad(filename, field, "no text could be extracted from the file")
    return ExtractedFile(filename, kind, content, pages)
