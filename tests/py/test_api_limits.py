"""The API under load it must refuse or share: request bodies over the configured limit
(413 before parsing, whatever the framing), one org's share of the database pool, a
database that drops the API's connections (503 with Retry-After, never 500), the
schema's constraints and 405's Allow."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from api_server import SERVER_PIDS, Tenant, api_server, make_tenant

from thin_api.app import create_app

LIMIT = 1024 * 1024
BIG = 32 * 1024 * 1024


def peak_rss(base: str) -> int:
    """The server process's peak resident memory (VmHWM), in bytes."""
    with Path(f"/proc/{SERVER_PIDS[base]}/status").open() as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def raw_post(
    base: str,
    path: str,
    headers: dict[str, str],
    chunks: Iterable[bytes],
    *,
    chunked: bool,
    length: int | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """POST over a plain socket: the body is written by a thread (which gives up when the
    server closes), the answer read meanwhile, so a server that answers before reading
    the body is seen to do so."""
    url = urlsplit(base)
    sock = socket.create_connection((url.hostname, url.port), timeout=30)
    head = [f"POST {path} HTTP/1.1", f"Host: {url.netloc}", "Connection: close"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}")
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())

    def write() -> None:
        try:
            for chunk in chunks:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            got = sock.recv(65536)
            if not got:
                break
            data += got
        head_bytes, _, rest = data.partition(b"\r\n\r\n")
        lines = head_bytes.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        answer_headers = {
            k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])
        }
        want = int(answer_headers.get("content-length", "0"))
        while len(rest) < want:
            got = sock.recv(65536)
            if not got:
                break
            rest += got
    finally:
        sock.close()
        writer.join(10)
    return status, answer_headers, rest


def padded(body: bytes, size: int) -> bytes:
    """`body` (a JSON object) grown to `size` bytes with whitespace: valid JSON."""
    assert body.endswith(b"}")
    return body[:-1] + b" " * (size - len(body)) + b"}"


def big_chunks(total: int = BIG, step: int = 1024 * 1024) -> Iterator[bytes]:
    yield b'{"name": "x", "pad": "'
    sent = 0
    while sent < total:
        yield b"x" * step
        sent += step
    yield b'"}'


@pytest.fixture(scope="module")
def tenant(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "api limits")


@pytest.fixture(scope="module")
def small(app_dsn: str) -> Iterator[str]:
    with api_server(app_dsn, CHRONOMEM_API_MAX_BODY_BYTES=str(LIMIT)) as url:
        yield url


def assert_too_large(status: int, body: bytes) -> None:
    assert status == 413, body[:500]
    error = httpx.Response(413, content=body).json()["error"]
    assert error["code"] == "payload_too_large" and error["field"] == "body", error
    assert str(LIMIT) in error["message"], error


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("path", ["/v1/projects", "/mcp"])
def test_a_body_over_the_limit_is_refused_before_it_is_read(
    small: str, tenant: Tenant, path: str, chunked: bool
) -> None:
    headers = {
        "Authorization": f"Bearer {tenant.token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    before = peak_rss(small)
    started = time.monotonic()
    status, _, body = raw_post(small, path, headers, big_chunks(), chunked=chunked, length=BIG + 24)
    elapsed = time.monotonic() - started
    assert_too_large(status, body)
    assert elapsed < 5, elapsed
    grown = peak_rss(small) - before
    assert grown < 8 * 1024 * 1024, f"the server grew by {grown} bytes"
    # The server is still well, and a body of exactly the limit is accepted.
    assert httpx.get(f"{small}/healthz").status_code == 200


def test_a_body_of_the_limit_is_accepted(small: str, tenant: Tenant) -> None:
    headers = {"Authorization": f"Bearer {tenant.token}", "Content-Type": "application/json"}
    body = padded(b'{"name": "just under"}', LIMIT)
    r = httpx.post(f"{small}/v1/projects", content=body, headers=headers, timeout=30)
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "just under"
    body = padded(b'{"name": "just under, chunked"}', LIMIT)
    status, _, answer = raw_post(
        small, "/v1/projects", headers, [body[:1000], body[1000:]], chunked=True
    )
    assert status == 201, answer[:500]
    # One byte more is refused.
    over = padded(b'{"name": "just over"}', LIMIT + 1)
    r = httpx.post(f"{small}/v1/projects", content=over, headers=headers, timeout=30)
    assert_too_large(r.status_code, r.content)


def test_mcp_accepts_a_body_of_the_limit(small: str, tenant: Tenant) -> None:
    initialize = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": '
        b'"2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}'
    )
    headers = {
        "Authorization": f"Bearer {tenant.token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    r = httpx.post(f"{small}/mcp", content=padded(initialize, LIMIT), headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["result"]["serverInfo"]["name"] == "chronomem"


def test_one_org_cannot_take_the_whole_pool(app_dsn: str, admin_dsn: str) -> None:
    busy, other = make_tenant(app_dsn, "busy org"), make_tenant(app_dsn, "quiet org")
    settings = {
        "CHRONOMEM_API_POOL_MIN": "3",
        "CHRONOMEM_API_POOL_MAX": "3",
        "CHRONOMEM_API_POOL_PER_ORG": "2",
        "CHRONOMEM_API_POOL_TIMEOUT": "2",
    }
    fact = {"facts": [{"subject": "s", "predicate": "p", "object": "o"}]}
    with api_server(app_dsn, **settings) as base:
        auth = {"Authorization": f"Bearer {busy.token}"}
        warm = httpx.post(f"{base}/v1/projects/{busy.project}/facts", json=fact, headers=auth)
        assert warm.status_code == 200, warm.text
        # Every write of the busy org's project waits on its lock, holding its connection.
        with psycopg.connect(admin_dsn, autocommit=True) as lock:
            lock.execute(
                "select pg_advisory_lock(memory_internal.project_lock_key(%s))", (busy.project,)
            )
            with ThreadPoolExecutor(8) as pool:
                writes = [
                    pool.submit(
                        httpx.post,
                        f"{base}/v1/projects/{busy.project}/facts",
                        json=fact,
                        headers=auth,
                        timeout=30,
                    )
                    for _ in range(8)
                ]
                time.sleep(1.0)
                started = time.monotonic()
                quiet = httpx.get(
                    f"{base}/v1/projects/{other.project}/facts",
                    headers={"Authorization": f"Bearer {other.token}"},
                    timeout=10,
                )
                elapsed = time.monotonic() - started
                assert quiet.status_code == 200, quiet.text
                assert elapsed < 1.5, elapsed
                # The busy org's requests beyond its share are told to come back.
                time.sleep(2.0)
                lock.execute(
                    "select pg_advisory_unlock(memory_internal.project_lock_key(%s))",
                    (busy.project,),
                )
                answers = [w.result() for w in writes]
    statuses = sorted(a.status_code for a in answers)
    assert set(statuses) <= {200, 429}, [a.text for a in answers]
    assert statuses.count(200) >= 2 and 429 in statuses, statuses
    for a in answers:
        if a.status_code == 429:
            assert a.headers.get("Retry-After"), a.headers
            assert a.json()["error"]["code"] == "busy"


def test_dropped_connections_are_503_with_retry_after(
    app_dsn: str, admin_dsn: str, tenant: Tenant
) -> None:
    with api_server(app_dsn, CHRONOMEM_API_POOL_MIN="2") as base:
        auth = {"Authorization": f"Bearer {tenant.token}"}
        url = f"{base}/v1/projects/{tenant.project}/facts"
        assert httpx.get(url, headers=auth).status_code == 200
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            killed = admin.execute(
                "select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity "
                "where application_name = 'chronomem-api' and datname = current_database()) t"
            ).fetchone()
        assert killed and killed[0] >= 1
        seen: list[int] = []
        for _ in range(10):
            r = httpx.get(url, headers=auth)
            seen.append(r.status_code)
            if r.status_code == 200:
                break
            assert r.status_code == 503, r.text
            assert r.headers.get("Retry-After"), r.headers
            assert r.json()["error"]["code"] == "unavailable"
        assert 503 in seen and seen[-1] == 200, seen


def test_405_names_the_allowed_methods(small: str, tenant: Tenant) -> None:
    auth = {"Authorization": f"Bearer {tenant.token}"}
    r = httpx.patch(f"{small}/v1/projects/{tenant.project}", headers=auth, timeout=30)
    assert r.status_code == 405, r.text
    allowed = {m.strip() for m in r.headers.get("Allow", "").split(",")}
    assert {"GET", "DELETE"} <= allowed and "PATCH" not in allowed, r.headers


def _schema(document: dict[str, Any], ref_or_schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in ref_or_schema:
        name = ref_or_schema["$ref"].rsplit("/", 1)[1]
        return dict(document["components"]["schemas"][name])
    return ref_or_schema


def _param(document: dict[str, Any], path: str, method: str, name: str) -> dict[str, Any]:
    for p in document["paths"][path][method]["parameters"]:
        if p["name"] == name:
            return dict(p["schema"])
    raise AssertionError(name)


def _plain(schema: dict[str, Any]) -> dict[str, Any]:
    """The non-null branch of an optional field's schema."""
    for branch in schema.get("anyOf", []):
        if branch.get("type") != "null":
            return dict(branch)
    return schema


def test_openapi_carries_the_enforced_constraints() -> None:
    doc: dict[str, Any] = create_app("postgresql://unused").openapi()
    props = lambda name: doc["components"]["schemas"][name]["properties"]  # noqa: E731
    assert props("FactsRequest")["facts"]["maxItems"] == 1000
    assert props("FactsRequest")["override_tombstones"]["type"] == "boolean"
    ingest = props("IngestRequest")
    assert (ingest["messages"]["minItems"], ingest["messages"]["maxItems"]) == (1, 100)
    assert (ingest["session"]["minLength"], ingest["session"]["maxLength"]) == (1, 200)
    for model, field, low, high in [
        ("SearchRequest", "k", 1, 200),
        ("ContextRequest", "k", 1, 200),
        ("ContextRequest", "max_tokens", 50, 2**31 - 1),
    ]:
        schema = props(model)[field]
        assert schema.get("minimum") == low, (model, field, schema)
        assert schema.get("maximum") == high, (model, field, schema)
    assert _plain(props("EntityUpsert")["aliases"]).get("maxItems") == 100
    facts = "/v1/projects/{project_id}/facts"
    limit = _plain(_param(doc, facts, "get", "limit"))
    assert (limit["minimum"], limit["maximum"]) == (1, 1000)
    depth = _plain(_param(doc, "/v1/projects/{project_id}/graph/neighbors", "get", "depth"))
    assert "maximum" in depth and "minimum" in depth, depth
    as_of = _plain(_param(doc, facts, "get", "as_of"))
    assert as_of.get("pattern"), as_of
