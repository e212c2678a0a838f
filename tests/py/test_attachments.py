"""Files sent with a message, over HTTP against a real server: a PDF made here (two
pages, with pypdf) round-trips, its chunks are episodes per page with offsets and are
found by search; HTML and Markdown; limits are a 413 naming the file; a malformed PDF is
a 422 that stores nothing; wipes take the files; another org cannot read them."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from api_server import Tenant, api_server, make_tenant
from pypdf import PdfWriter
from pypdf.generic import DictionaryObject, NameObject, StreamObject

from chronomem.client import ChronomemError, Client

FILE_LIMIT = 64 * 1024


def make_pdf(pages: list[list[str]]) -> bytes:
    """A PDF with one page per list of lines (Helvetica, one text object a page)."""
    writer = PdfWriter()
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    for lines in pages:
        page = writer.add_blank_page(612, 792)
        stream = StreamObject()
        shown = " ".join(f"({line}) Tj T*" for line in lines)
        stream.set_data(f"BT /F1 12 Tf 72 720 Td 14 TL {shown} ET".encode())
        page[NameObject("/Contents")] = writer._add_object(stream)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@pytest.fixture(scope="module")
def base(app_dsn: str) -> Iterator[str]:
    with api_server(app_dsn, CHRONOMEM_MAX_ATTACHMENT_BYTES=str(FILE_LIMIT)) as url:
        yield url


@pytest.fixture(scope="module")
def tenant(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "attachments")


@pytest.fixture
def api(base: str, tenant: Tenant) -> Iterator[Client]:
    with tenant.client(base) as client:
        yield client


@pytest.fixture
def project(api: Client) -> uuid.UUID:
    return api.create_project(f"attachments {uuid.uuid4().hex[:8]}").project_id


def stored(admin_dsn: str, project: uuid.UUID) -> dict[str, int]:
    """Every row an upload writes for the project, counted as superuser."""
    with psycopg.connect(admin_dsn) as conn:
        counts = {}
        for table in (
            "memory.sessions",
            "memory.episodes",
            "memory.attachments",
            "memory.attachment_chunks",
            "memory.jobs",
        ):
            row = conn.execute(
                f"select count(*) from {table} where project_id = %s",  # type: ignore[arg-type]
                (project,),
            ).fetchone()
            assert row is not None
            counts[table] = row[0]
        return counts


def files_holding(admin_dsn: str, project: uuid.UUID, needle: str) -> int:
    """Attachments of the project whose bytes hold `needle`, as superuser."""
    with psycopg.connect(admin_dsn) as conn:
        row = conn.execute(
            "select count(*) from memory.attachments"
            " where project_id = %s and position(convert_to(%s, 'UTF8') in content) > 0",
            (project, needle),
        ).fetchone()
    assert row is not None
    count: int = row[0]
    return count


def upload(
    base: str, tenant: Tenant, project: uuid.UUID, files: list[tuple[str, bytes, str]], **form: str
) -> httpx.Response:
    return httpx.post(
        f"{base}/v1/projects/{project}/memory/attachments",
        headers={"Authorization": f"Bearer {tenant.token}"},
        data=form or {"message": json.dumps({"session": "s1", "content": "see the file"})},
        files=[("file", f) for f in files],
        timeout=30,
    )


def test_a_pdf_round_trips_in_chunks_per_page(
    api: Client, project: uuid.UUID, admin_dsn: str
) -> None:
    pdf = make_pdf([["Alpha report, first page."], ["The harbour of Zanzibar is on page two."]])
    result = api.ingest_files(
        project, "s1", [("report.pdf", pdf, "application/pdf")], content="the report"
    )
    [attachment] = result.attachments
    assert (attachment.filename, attachment.media_type, attachment.pages) == (
        "report.pdf",
        "application/pdf",
        2,
    )
    assert attachment.size_bytes == len(pdf) and len(attachment.episode_ids) == 2
    assert api.attachment_content(project, attachment.attachment_id) == pdf

    detail = api.get_attachment(project, attachment.attachment_id)
    assert [(c.chunk, c.page, c.offset) for c in detail.chunks] == [(1, 1, 0), (2, 2, 0)]
    assert [c.episode_id for c in detail.chunks] == attachment.episode_ids
    assert detail.session == "s1"

    messages = api.session_messages(project, "s1").messages
    assert [m.content.strip() for m in messages] == [
        "the report",
        "Alpha report, first page.",
        "The harbour of Zanzibar is on page two.",
    ]
    assert messages[0].metadata["attachments"][0]["sha256"] == attachment.sha256

    hits = [h for h in api.search(project, "Zanzibar harbour").results if h.kind == "episode"]
    assert hits and hits[0].id == attachment.episode_ids[1]
    assert hits[0].attachment is not None
    assert (hits[0].attachment.attachment_id, hits[0].attachment.page) == (
        attachment.attachment_id,
        2,
    )
    # The chunks are extracted like messages: one enrich job per episode.
    with psycopg.connect(admin_dsn) as conn:
        row = conn.execute(
            "select count(*) from memory.jobs where project_id = %s and kind = 'enrich'",
            (project,),
        ).fetchone()
    assert row is not None and row[0] == 3


def test_html_and_markdown(base: str, tenant: Tenant, api: Client, project: uuid.UUID) -> None:
    html = (
        b"<html><head><title>T</title><style>p{color:red}</style></head><body>"
        b"<h1>Quarterly</h1><p>Revenue &amp; costs grew.</p><script>alert(1)</script></body></html>"
    )
    markdown = b"# Plan\n\nShip the *beta* in May.\n\n- item one\n"
    response = upload(
        base,
        tenant,
        project,
        [("page.html", html, "text/html"), ("plan.md", markdown, "application/octet-stream")],
        session="s2",
        content="two files",
    )
    assert response.status_code == 200, response.text
    page, plan = response.json()["attachments"]
    assert (page["media_type"], plan["media_type"]) == ("text/html", "text/markdown")
    texts = [m.content for m in api.session_messages(project, "s2").messages]
    assert texts == ["two files", "Quarterly\n\nRevenue & costs grew.", markdown.decode().strip()]
    content = httpx.get(
        f"{base}/v1/projects/{project}/attachments/{page['attachment_id']}/content",
        headers={"Authorization": f"Bearer {tenant.token}"},
    )
    assert content.content == html and content.headers["content-type"].startswith("text/html")
    assert content.headers["content-disposition"].startswith("attachment;")


def test_limits_and_bad_files_name_the_file_and_store_nothing(
    base: str, tenant: Tenant, project: uuid.UUID, admin_dsn: str
) -> None:
    before = stored(admin_dsn, project)
    cases = [
        ([("big.txt", b"x" * (FILE_LIMIT + 1), "text/plain")], 413, "big.txt"),
        ([("empty.txt", b"", "text/plain")], 422, "empty.txt"),
        ([("doc.docx", b"PK\x03\x04", "application/msword")], 415, "doc.docx"),
        ([("fake.pdf", b"plain words, not a PDF", "application/pdf")], 422, "fake.pdf"),
        (
            [("broken.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog", "application/pdf")],
            422,
            "broken.pdf",
        ),
        ([("sly.txt", make_pdf([["hidden"]]), "text/plain")], 422, "sly.txt"),
        ([("latin.txt", b"caf\xe9", "text/plain")], 422, "latin.txt"),
        # A good file with a bad one: neither is stored, the message neither.
        (
            [
                ("ok.md", b"# fine", "text/markdown"),
                ("broken.pdf", b"%PDF-1.7 junk", "application/pdf"),
            ],
            422,
            "broken.pdf",
        ),
    ]
    for files, status, name in cases:
        response = upload(base, tenant, project, files)
        assert response.status_code == status, (name, response.text)
        assert name in response.json()["error"]["message"], response.text
    assert stored(admin_dsn, project) == before


def test_a_request_over_the_upload_limit_is_413(app_dsn: str, tenant: Tenant) -> None:
    with api_server(app_dsn, CHRONOMEM_MAX_ATTACHMENTS_BYTES="2048") as small:
        response = upload(small, tenant, tenant.project, [("a.txt", b"y" * 4096, "text/plain")])
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "payload_too_large"
        ok = upload(small, tenant, tenant.project, [("a.txt", b"small", "text/plain")])
        assert ok.status_code == 200, ok.text


def test_message_part_is_checked(base: str, tenant: Tenant, project: uuid.UUID) -> None:
    bad = upload(base, tenant, project, [("a.txt", b"x", "text/plain")], message="{not json")
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "message"
    missing = upload(base, tenant, project, [("a.txt", b"x", "text/plain")], role="user")
    assert missing.status_code == 422 and missing.json()["error"]["field"] == "message"
    unknown = upload(
        base,
        tenant,
        project,
        [("a.txt", b"x", "text/plain")],
        message=json.dumps({"session": "s", "content": "c", "colour": "red"}),
    )
    assert unknown.status_code == 422, unknown.text


def test_a_retry_replays_and_another_file_is_another_body(
    api: Client, project: uuid.UUID, admin_dsn: str
) -> None:
    one = api.ingest_files(
        project, "r", [("a.txt", b"first text", "text/plain")], content="m", idempotency_key="k1"
    )
    again = api.ingest_files(
        project, "r", [("a.txt", b"first text", "text/plain")], content="m", idempotency_key="k1"
    )
    assert again.replayed and again.attachments == one.attachments
    with pytest.raises(ChronomemError) as err:
        api.ingest_files(
            project,
            "r",
            [("a.txt", b"other text", "text/plain")],
            content="m",
            idempotency_key="k1",
        )
    assert err.value.status == 409
    assert stored(admin_dsn, project)["memory.attachments"] == 1


def wipe_fixture(api: Client, project: uuid.UUID) -> dict[str, uuid.UUID]:
    ids = {}
    for session, name, text in (
        ("keep", "keep.txt", "Nothing personal here."),
        ("gone", "gone.txt", "Zelda Quist wrote this memo."),
    ):
        result = api.ingest_files(project, session, [(name, text.encode(), None)], content="f")
        ids[session] = result.attachments[0].attachment_id
    return ids


def test_wipes_take_the_files(api: Client, project: uuid.UUID, admin_dsn: str) -> None:
    ids = wipe_fixture(api, project)
    api.wipe(project, session="gone")
    with pytest.raises(ChronomemError) as err:
        api.get_attachment(project, ids["gone"])
    assert err.value.status == 404
    assert api.get_attachment(project, ids["keep"]).filename == "keep.txt"  # control
    assert files_holding(admin_dsn, project, "Zelda") == 0

    api.wipe(project)
    assert stored(admin_dsn, project)["memory.attachments"] == 0
    assert stored(admin_dsn, project)["memory.attachment_chunks"] == 0


def test_a_subject_wipe_takes_the_files_that_mention_it(
    api: Client, project: uuid.UUID, admin_dsn: str
) -> None:
    ids = wipe_fixture(api, project)
    api.assert_facts(
        project, [{"subject": "Zelda Quist", "predicate": "works_at", "object": "Acme"}]
    )
    assert files_holding(admin_dsn, project, "Zelda") == 1  # positive control
    receipt = api.wipe(project, subject="Zelda Quist")
    assert receipt.stores is not None
    assert receipt.stores["memory.attachments"].deleted == 1
    assert files_holding(admin_dsn, project, "Zelda") == 0
    with pytest.raises(ChronomemError):
        api.get_attachment(project, ids["gone"])
    assert api.get_attachment(project, ids["keep"]).filename == "keep.txt"
    # The message sent with the file stays (a subject wipe keeps the conversation);
    # the file's chunk goes with the file.
    assert [m.content for m in api.session_messages(project, "gone").messages] == ["f"]


def test_another_org_cannot_read_an_attachment(
    base: str, api: Client, project: uuid.UUID, app_dsn: str
) -> None:
    result = api.ingest_files(project, "x", [("x.txt", b"secret text", "text/plain")], content="m")
    attachment = result.attachments[0].attachment_id
    assert api.get_attachment(project, attachment).size_bytes == 11  # control
    other = make_tenant(app_dsn, f"attachments other {uuid.uuid4().hex[:6]}")
    with other.client(base) as intruder:
        for read in (intruder.get_attachment, intruder.attachment_content):
            with pytest.raises(ChronomemError) as err:
                read(project, attachment)
            assert err.value.status == 404
        # Its own project does not hold the id either.
        with pytest.raises(ChronomemError) as err:
            intruder.get_attachment(other.project, attachment)
        assert err.value.status == 404


def test_reads_need_a_key(base: str, project: uuid.UUID) -> None:
    response: Any = httpx.get(f"{base}/v1/projects/{project}/attachments/{uuid.uuid4()}")
    assert response.status_code == 401


def test_a_file_the_redaction_policy_would_change_is_refused(
    api: Client, project: uuid.UUID, admin_dsn: str
) -> None:
    """The chunks are redacted like messages; a file whose text the policy changes is
    refused (its stored bytes would keep what the policy removes) and stores nothing."""
    api.set_redaction_rule(project, "email", "mask")
    before = stored(admin_dsn, project)
    with pytest.raises(ChronomemError) as err:
        api.ingest_files(
            project,
            "red",
            [
                ("ok.txt", b"No address here.", None),
                ("mail.txt", b"Write to zoe@example.com", None),
            ],
            content="m",
        )
    assert err.value.status == 422 and "mail.txt" in err.value.message
    assert err.value.field == "files[1]"
    assert stored(admin_dsn, project) == before
    assert files_holding(admin_dsn, project, "zoe@example.com") == 0
    # Control: a file the policy leaves alone is stored.
    result = api.ingest_files(project, "red", [("ok.txt", b"No address here.", None)], content="m")
    assert api.attachment_content(project, result.attachments[0].attachment_id) == (
        b"No address here."
    )


def test_an_upload_without_a_valid_key_reads_no_file(base: str, project: uuid.UUID) -> None:
    response = httpx.post(
        f"{base}/v1/projects/{project}/memory/attachments",
        headers={"Authorization": "Bearer cmk_nope"},
        data={"message": json.dumps({"session": "s", "content": "c"})},
        files=[("file", ("broken.pdf", b"%PDF-1.4 junk", "application/pdf"))],
    )
    # 401, not the 422 the file would get: the file is not read.
    assert response.status_code == 401, response.text
