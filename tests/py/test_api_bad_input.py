"""Bad input over HTTP: a 4xx naming the field, never a 500, with the documented error
shape; plus a sweep of junk over every route that must never produce a 5xx."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from api_server import Tenant, api_server, make_tenant

DIM = 384  # the test database's embedding dimension (the default)


@pytest.fixture(scope="module")
def base(app_dsn: str) -> Iterator[str]:
    with api_server(app_dsn) as url:
        yield url


@pytest.fixture(scope="module")
def tenant(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "api bad input")


@pytest.fixture(scope="module")
def http(base: str, tenant: Tenant) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {tenant.token}"}
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        p = tenant.project
        client.post(
            f"/v1/projects/{p}/memory",
            json={"session": "s", "messages": [{"role": "user", "content": "hello"}]},
        )
        client.post(
            f"/v1/projects/{p}/facts",
            json={
                "facts": [
                    {
                        "subject": "alice",
                        "predicate": "knows",
                        "object": "bob",
                        "object_type": "entity",
                    }
                ]
            },
        )
        yield client


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert set(response.json()) == {"error"}, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"code", "message", "field"}
    assert isinstance(error["code"], str) and isinstance(error["message"], str)
    return error


P = "/v1/projects/{p}"
MSG = {"role": "user", "content": "hi"}
# (method, path, request keywords, status, code, field)
CASES: list[tuple[str, str, dict[str, Any], int, str, str | None]] = [
    ("POST", "/v1/projects", {"json": {"name": ""}}, 422, "invalid_request", "name"),
    ("POST", "/v1/projects", {"json": {"name": "   "}}, 422, "invalid_request", "name"),
    ("POST", "/v1/projects", {"json": {"name": "x" * 201}}, 422, "invalid_request", "name"),
    ("POST", "/v1/projects", {"json": {}}, 422, "invalid_request", "name"),
    ("POST", "/v1/projects", {"json": {"name": "a", "extra": 1}}, 422, "invalid_request", "extra"),
    ("POST", "/v1/projects", {"content": b"{not json"}, 422, "invalid_request", "body"),
    ("POST", "/v1/projects", {"json": ["name"]}, 422, "invalid_request", "body"),
    ("GET", "/v1/projects/not-a-uuid", {}, 422, "invalid_request", "project_id"),
    (
        "POST",
        P + "/api-keys",
        {"json": {"name": "k", "permissions": ["root"]}},
        422,
        "invalid_request",
        "permissions[0]",
    ),
    (
        "POST",
        P + "/api-keys",
        {"json": {"name": "k", "permissions": []}},
        422,
        "invalid_request",
        "permissions",
    ),
    ("DELETE", P + "/api-keys/xyz", {}, 422, "invalid_request", "key_id"),
    ("DELETE", P + "/api-keys/" + str(uuid.UUID(int=1)), {}, 404, "not_found", None),
    (
        "POST",
        P + "/memory",
        {"json": {"session": "", "messages": [MSG]}},
        422,
        "invalid_request",
        "session",
    ),
    (
        "POST",
        P + "/memory",
        {"json": {"session": "s", "messages": []}},
        422,
        "invalid_request",
        "messages",
    ),
    (
        "POST",
        P + "/memory",
        {"json": {"session": "s", "messages": [{"role": "robot", "content": "x"}]}},
        422,
        "invalid_request",
        "messages[0].role",
    ),
    (
        "POST",
        P + "/memory",
        {"json": {"session": "s", "messages": [MSG, {"role": "user", "content": "  "}]}},
        422,
        "invalid_request",
        "messages[1]",
    ),
    (
        "POST",
        P + "/memory",
        {"json": {"session": "s", "messages": [{**MSG, "occurred_at": "yesterday"}]}},
        422,
        "invalid_request",
        "messages[0].occurred_at",
    ),
    (
        "POST",
        P + "/memory",
        {"json": {"session": "s", "messages": [{**MSG, "occurred_at": 1700000000}]}},
        422,
        "invalid_request",
        "messages[0].occurred_at",
    ),
    (
        "POST",
        P + "/memory",
        {"json": {"session": "s", "messages": [MSG] * 101}},
        422,
        "invalid_request",
        "messages",
    ),
    (
        "POST",
        P + "/memory",
        {"json": {"session": "s", "messages": [MSG]}, "headers": {"Idempotency-Key": "k" * 201}},
        422,
        "invalid_request",
        "Idempotency-Key",
    ),
    (
        "POST",
        P + "/memory",
        {"json": {"session": "a\u0000b", "messages": [MSG]}},
        422,
        "invalid_request",
        "session",
    ),
    (
        "POST",
        P + "/memory",
        {"json": {"session": "s", "messages": [{"role": "user", "content": "a\u0000"}]}},
        422,
        "invalid_request",
        "messages[0].content",
    ),
    (
        "POST",
        P + "/memory",
        {"json": {"session": "s", "messages": [{**MSG, "metadata": {"k": ["a\u0000"]}}]}},
        422,
        "invalid_request",
        "messages[0].metadata.k[0]",
    ),
    (
        "POST",
        P + "/memory",
        {
            "content": b'{"session": "s", "messages": [{"role": "user", "content": "x", '
            b'"metadata": {"\\ud800": 1}}]}',
            "headers": {"Content-Type": "application/json"},
        },
        422,
        "invalid_request",
        "messages[0].metadata.\\ud800",
    ),
    (
        "POST",
        P + "/memory",
        {
            "content": b'{"session": "s", "messages": [{"role": "user", "content": "x"}], '
            b'"session_metadata": {"n": 1e309}}',
            "headers": {"Content-Type": "application/json"},
        },
        422,
        "invalid_request",
        "session_metadata.n",
    ),
    (
        "POST",
        P + "/memory",
        {"json": {"session": "s", "messages": [MSG], "extra_key": 1}},
        422,
        "invalid_request",
        "extra_key",
    ),
    ("GET", P + "/facts", {"params": {"subject": "a\u0000"}}, 422, "invalid_request", "subject"),
    ("POST", P + "/search", {"json": {"query": "a\u0000"}}, 422, "invalid_request", "query"),
    (
        "DELETE",
        P + "/memory",
        {"params": {"session": "s", "subject": "alice"}},
        422,
        "invalid_request",
        "session",
    ),
    ("DELETE", P + "/memory", {"params": {"session": "no such session"}}, 404, "not_found", None),
    ("GET", P + "/sessions/s/messages", {"params": {"limit": 0}}, 422, "invalid_request", "limit"),
    (
        "GET",
        P + "/sessions/s/messages",
        {"params": {"after": "x"}},
        422,
        "invalid_request",
        "after",
    ),
    ("POST", P + "/facts", {"json": {"facts": "alice knows bob"}}, 422, "invalid_request", "facts"),
    (
        "POST",
        P + "/facts",
        {"json": {"facts": [{"subject": "a", "predicate": "b", "object": "c"}] * 1001}},
        422,
        "invalid_request",
        "facts",
    ),
    (
        "POST",
        P + "/facts",
        {"json": {"facts": [], "override_tombstones": "maybe"}},
        422,
        "invalid_request",
        "override_tombstones",
    ),
    (
        "POST",
        P + "/facts",
        {"json": {"facts": [], "override_tombstones": "yes"}},
        422,
        "invalid_request",
        "override_tombstones",
    ),
    (
        "POST",
        P + "/facts",
        {"json": {"facts": [], "override_tombstones": "true"}},
        422,
        "invalid_request",
        "override_tombstones",
    ),
    (
        "POST",
        P + "/facts",
        {"json": {"facts": [], "override_tombstones": 1}},
        422,
        "invalid_request",
        "override_tombstones",
    ),
    ("POST", P + "/search", {"json": {"query": "x", "k": "10"}}, 422, "invalid_request", "k"),
    ("POST", P + "/search", {"json": {"query": "x", "k": 10.0}}, 422, "invalid_request", "k"),
    (
        "POST",
        P + "/search",
        {"json": {"query": "x", "query_embedding": ["0.5"] * DIM}},
        422,
        "invalid_request",
        "query_embedding[0]",
    ),
    (
        "POST",
        P + "/entities/merge",
        {"json": {"keep": "a", "absorb": "b", "dry_run": "yes"}},
        422,
        "invalid_request",
        "dry_run",
    ),
    ("GET", P + "/facts", {"params": {"as_of": "yesterday"}}, 422, "invalid_request", "as_of"),
    ("GET", P + "/facts", {"params": {"as_of": "1700000000"}}, 422, "invalid_request", "as_of"),
    (
        "GET",
        P + "/facts",
        {"params": {"known_at": "2024-13-45"}},
        422,
        "invalid_request",
        "known_at",
    ),
    ("GET", P + "/facts", {"params": {"known_at": "infinity"}}, 422, "invalid_request", "known_at"),
    ("GET", P + "/facts", {"params": {"limit": 0}}, 422, "invalid_request", "limit"),
    ("GET", P + "/facts", {"params": {"limit": 1001}}, 422, "invalid_request", "limit"),
    ("GET", P + "/facts", {"params": {"limit": 10**12}}, 422, "invalid_request", "limit"),
    ("GET", P + "/facts", {"params": {"cursor": "page-2"}}, 422, "invalid_request", "cursor"),
    ("POST", P + "/facts/not-a-uuid/retract", {}, 422, "invalid_request", "fact_id"),
    ("POST", P + "/facts/" + str(uuid.UUID(int=2)) + "/retract", {}, 404, "not_found", None),
    (
        "POST",
        P + "/facts/" + str(uuid.UUID(int=2)) + "/retract",
        {"json": {"reason": 5}},
        422,
        "invalid_request",
        "reason",
    ),
    ("GET", P + "/facts/" + str(uuid.UUID(int=3)) + "/history", {}, 404, "not_found", None),
    ("GET", P + "/timeline", {}, 422, "invalid_request", "subject"),
    ("GET", P + "/timeline", {"params": {"subject": ""}}, 422, "invalid_request", "subject"),
    (
        "PUT",
        P + "/predicates/plan",
        {"json": {"cardinality": "three"}},
        422,
        "invalid_request",
        "cardinality",
    ),
    (
        "PUT",
        P + "/predicates/%21%21%21",
        {"json": {"cardinality": "one"}},
        422,
        "invalid_request",
        "predicate",
    ),
    ("POST", P + "/search", {"json": {}}, 422, "invalid_request", "query"),
    ("POST", P + "/search", {"json": {"query": "x", "k": 0}}, 422, "invalid_request", "k"),
    ("POST", P + "/search", {"json": {"query": "x", "k": 201}}, 422, "invalid_request", "k"),
    ("POST", P + "/search", {"json": {"query": "x", "k": "ten"}}, 422, "invalid_request", "k"),
    (
        "POST",
        P + "/search",
        {"json": {"query": "x", "fusion": "borda"}},
        422,
        "invalid_request",
        "fusion",
    ),
    (
        "POST",
        P + "/search",
        {"json": {"query": "x", "legs": ["psychic"]}},
        422,
        "invalid_request",
        "legs[0]",
    ),
    (
        "POST",
        P + "/search",
        {"json": {"query": "x", "query_embedding": [0.1, 0.2]}},
        422,
        "invalid_request",
        "query_embedding",
    ),
    (
        "POST",
        P + "/search",
        {"json": {"query": "x", "query_embedding": []}},
        422,
        "invalid_request",
        "query_embedding",
    ),
    (
        "POST",
        P + "/search",
        {"json": {"query": "x", "query_embedding": ["a"] * DIM}},
        422,
        "invalid_request",
        "query_embedding[0]",
    ),
    (
        "POST",
        P + "/search",
        {"json": {"query": "x", "as_of": "noon"}},
        422,
        "invalid_request",
        "as_of",
    ),
    (
        "POST",
        P + "/context",
        {"json": {"query": "x", "max_tokens": 10}},
        422,
        "invalid_request",
        "max_tokens",
    ),
    ("POST", P + "/context", {"json": {"query": "x", "k": -1}}, 422, "invalid_request", "k"),
    ("GET", P + "/graph/neighbors", {}, 422, "invalid_request", "entity"),
    (
        "GET",
        P + "/graph/neighbors",
        {"params": {"entity": "alice", "depth": 9}},
        422,
        "invalid_request",
        "depth",
    ),
    ("GET", P + "/graph/neighbors", {"params": {"entity": "nobody"}}, 404, "not_found", None),
    ("GET", P + "/entities", {"params": {"limit": -5}}, 422, "invalid_request", "limit"),
    ("GET", "/v1/nowhere", {}, 404, "not_found", None),
    ("PATCH", P, {}, 405, "method_not_allowed", None),
]


@pytest.mark.parametrize(
    ("method", "path", "kw", "status", "code", "field"),
    CASES,
    ids=[f"{c[0]} {c[1]} {i}" for i, c in enumerate(CASES)],
)
def test_bad_input_names_the_field(
    http: httpx.Client,
    tenant: Tenant,
    method: str,
    path: str,
    kw: dict[str, Any],
    status: int,
    code: str,
    field: str | None,
) -> None:
    response = http.request(method, path.format(p=tenant.project), **kw)
    assert response.status_code == status, response.text
    error = error_of(response)
    assert (error["code"], error["field"]) == (code, field), error


def test_a_fault_in_one_fact_costs_only_that_fact(http: httpx.Client, tenant: Tenant) -> None:
    facts = [
        {"subject": "a", "predicate": "b", "object": "c"},
        {"subject": "a", "predicate": "b", "object": "d", "confidence": 7},
        "not an object",
        {
            "subject": "a",
            "predicate": "b",
            "object": "e",
            "valid_to": "1999-01-01",
            "valid_from": "2000-01-01",
        },
        {"subject": ["list"], "predicate": "b", "object": "f"},
    ]
    response = http.post(f"/v1/projects/{tenant.project}/facts", json={"facts": facts})
    # A non-object item is a malformed request (the batch's shape), not a bad fact.
    assert response.status_code == 422 and error_of(response)["field"] == "facts[2]"
    del facts[2]
    response = http.post(f"/v1/projects/{tenant.project}/facts", json={"facts": facts})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["inserted", "invalid", "invalid", "invalid"]
    assert [r["error"]["field"] for r in results[1:]] == ["confidence", "valid_to", "subject"]


JUNK: list[Any] = [
    None,
    "",
    "x" * 5000,
    -1,
    0,
    2**63,
    1.5e308,
    True,
    [],
    {},
    [1, "a"],
    {"$ne": 1},
    "2024-02-30",
    "\u202e\ud7ff",
    "' or 1=1 --",
]
ROUTES: list[tuple[str, str, list[str], list[str]]] = [
    # (method, path, body fields, query params)
    ("POST", "/v1/projects", ["name"], []),
    ("POST", P + "/api-keys", ["name", "permissions"], []),
    ("POST", P + "/memory", ["session", "messages", "session_metadata"], []),
    ("DELETE", P + "/memory", [], ["session", "subject"]),
    ("GET", P + "/sessions/s/messages", [], ["after", "limit"]),
    ("POST", P + "/facts", ["facts", "override_tombstones"], []),
    ("GET", P + "/facts", [], ["as_of", "known_at", "subject", "predicate", "cursor", "limit"]),
    ("GET", P + "/timeline", [], ["subject", "predicate"]),
    ("PUT", P + "/predicates/likes", ["cardinality"], []),
    (
        "POST",
        P + "/search",
        ["query", "query_embedding", "as_of", "known_at", "k", "legs", "fusion"],
        [],
    ),
    (
        "POST",
        P + "/context",
        ["query", "query_embedding", "as_of", "known_at", "max_tokens", "k"],
        [],
    ),
    ("GET", P + "/graph/neighbors", [], ["entity", "depth", "as_of", "known_at", "limit"]),
    ("GET", P + "/entities", [], ["cursor", "limit"]),
]


def test_junk_never_gets_a_server_error(http: httpx.Client, tenant: Tenant) -> None:
    valid = {
        "name": "n",
        "permissions": ["project:read"],
        "session": "junk",
        "messages": [MSG],
        "facts": [],
        "cardinality": "many",
        "query": "hello",
        "entity": "alice",
        "subject": "alice",
    }
    sent = 0
    for method, path, fields, params in ROUTES:
        url = path.format(p=tenant.project)
        for name, value in itertools.product(fields, JUNK):
            body = {f: valid[f] for f in fields if f in valid}
            body[name] = value
            response = http.request(method, url, json=body)
            assert response.status_code < 500, (method, path, name, value, response.text)
            if response.status_code >= 400:
                error_of(response)
            sent += 1
        for name, value in itertools.product(params, JUNK):
            if value is None or isinstance(value, (list, dict)):
                continue
            query = {p: valid[p] for p in params if p in valid}
            query[name] = str(value)
            response = http.request(method, url, params=query)
            assert response.status_code < 500, (method, path, name, value, response.text)
            if response.status_code >= 400:
                error_of(response)
            sent += 1
        # And the JSON body itself as junk.
        for junk in (b"", b"null", b"[]", b"\xff\xfe", b'{"a":' * 50):
            response = http.request(
                method, url, content=junk, headers={"Content-Type": "application/json"}
            )
            assert response.status_code < 500, (method, path, junk, response.text)
            sent += 1
    assert sent > 300


BAD_INSTANTS = [
    "9999-12-31T23:59:59-14:00",
    "0001-01-01T00:00:00+14:00",
    "2024-01-01 BC",
    "2024-01-01 allballs",
    "2024-01-01 5:00 pm",
    " 2024-01-01",
    "2024-01-01T00:00:00Zjunk",
    "10000-01-01",
    "2024-01-01T24:00:00",
    "2024-02-30",
    "epoch",
]
GOOD_INSTANTS = [
    "2024-01-01",
    "2024-01-01T00:00:00Z",
    "2024-01-01 12:00:00+02",
    "2024-01-01T12:00:00.123456+0530",
    "2024-01-01T12:00:00.5-03:30",
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59+14:00",
]


@pytest.mark.parametrize("value", BAD_INSTANTS)
def test_an_instant_sql_would_refuse_is_a_422_naming_it(
    http: httpx.Client, tenant: Tenant, value: str
) -> None:
    p = tenant.project
    r = http.get(f"/v1/projects/{p}/facts", params={"as_of": value})
    assert r.status_code == 422 and error_of(r)["field"] == "as_of", r.text
    r = http.post(f"/v1/projects/{p}/search", json={"query": "x", "known_at": value})
    assert r.status_code == 422 and error_of(r)["field"] == "known_at", r.text
    message = {**MSG, "occurred_at": value}
    r = http.post(f"/v1/projects/{p}/memory", json={"session": "instants", "messages": [message]})
    assert r.status_code == 422 and error_of(r)["field"] == "messages[0].occurred_at", r.text


@pytest.mark.parametrize("value", GOOD_INSTANTS)
def test_an_iso_instant_is_accepted(http: httpx.Client, tenant: Tenant, value: str) -> None:
    p = tenant.project
    r = http.get(f"/v1/projects/{p}/facts", params={"as_of": value})
    assert r.status_code == 200, r.text
    message = {**MSG, "occurred_at": value}
    r = http.post(f"/v1/projects/{p}/memory", json={"session": "instants", "messages": [message]})
    assert r.status_code == 200, r.text


def test_a_value_that_cannot_reach_the_database_costs_only_its_fact(
    http: httpx.Client, tenant: Tenant
) -> None:
    tag = uuid.uuid4().hex[:8]
    # Raw bytes: a JSON client would not send a lone surrogate or 1e309.
    body = (
        '{"facts": ['
        f'{{"subject": "u1-{tag}", "predicate": "p", "object": "o1"}},'
        f'{{"subject": "u2-{tag}", "predicate": "p", "object": "o2", "content": "a\\u0000b"}},'
        f'{{"subject": "u3-{tag}", "predicate": "p", "object": "o3"}},'
        f'{{"subject": "u4-{tag}\\ud800", "predicate": "p", "object": "o4"}},'
        f'{{"subject": "u5-{tag}", "predicate": "p", "object": "o5", "confidence": 1e309}},'
        f'{{"subject": "u6-{tag}", "predicate": "p", "object": "o6", "x\\udc00": 1}},'
        f'{{"subject": "u7-{tag}", "predicate": "p", "object": {{"deep": ["\\u0000"]}}}},'
        f'{{"subject": "u8-{tag}", "predicate": "p", "object": "o8"}}'
        "]}"
    ).encode()
    r = http.post(
        f"/v1/projects/{tenant.project}/facts",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 200, r.text
    answer = r.json()
    results = answer["results"]
    assert [x["index"] for x in results] == list(range(8))
    statuses = [x["status"] for x in results]
    assert statuses == [
        "inserted",
        "invalid",
        "inserted",
        "invalid",
        "invalid",
        "invalid",
        "invalid",
        "inserted",
    ], results
    fields = [x["error"]["field"] for x in results if x["status"] == "invalid"]
    assert fields == ["content", "subject", "confidence", "x\\udc00", "object.deep[0]"], fields
    assert (answer["inserted"], answer["invalid"]) == (3, 5), answer
    # The good facts are stored (positive control), the bad ones are not.
    stored = {
        f["subject"]
        for f in http.get(f"/v1/projects/{tenant.project}/facts", params={"limit": 1000}).json()[
            "facts"
        ]
        if f["subject"].endswith(tag)
    }
    assert stored == {f"u1-{tag}", f"u3-{tag}", f"u8-{tag}"}, stored
