"""Tenancy and security over HTTP, as the app role behind a real server.

Org B, with its own valid key holding every permission, gets 404 (never 403) for org
A's ids on every route and can read, search, list, retract or wipe nothing of A's;
the 404 body is the same as for random ids (existence cannot be inferred), and every
route with an id in its path has such a case (test_every_route_with_a_path_id_has_a_case
enumerates app.routes). Each case has a positive control (A's key succeeds). Revoked
and malformed keys are 401 without detail; 403 happens only inside one's own org. A
pool of two connections serving alternating tenants never carries one request's org
into the next.
"""

from __future__ import annotations

import json
import random
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest
from api_server import Tenant, api_server, make_tenant
from fastapi.routing import iter_route_contexts

from chronomem.client import Client
from thin_api.app import app

UNAUTHORIZED = {
    "error": {"code": "unauthorized", "message": "missing or invalid API key", "field": None}
}


@dataclass
class World:
    base: str
    a: Tenant
    b: Tenant
    fact: uuid.UUID  # one of A's facts
    session: str  # one of A's sessions
    key: uuid.UUID  # an extra key of A's project
    http: httpx.Client  # one connection pool for the module (a new client per call is slow)
    endpoint: uuid.UUID  # a webhook endpoint of A's project (disabled: it never delivers)
    conflict: uuid.UUID  # an open conflict of A's project
    change: int  # a predicate change of A's project (the declaration of plan)
    episode: uuid.UUID  # one of A's episodes
    # One of A's attachments (a world made without one gets an id that exists nowhere).
    attachment: uuid.UUID = field(default_factory=uuid.uuid4)


@pytest.fixture(scope="module")
def base(app_dsn: str) -> Iterator[str]:
    # A pool of at most two connections, so consecutive requests reuse connections.
    with api_server(app_dsn, CHRONOMEM_API_POOL_MIN="1", CHRONOMEM_API_POOL_MAX="2") as url:
        yield url


def seed(client: Client, project: uuid.UUID, tag: str) -> list[uuid.UUID]:
    client.declare_predicate(project, "plan", "one")
    result = client.assert_facts(
        project,
        [
            {
                "subject": f"{tag} user",
                "predicate": "plan",
                "object": f"{tag} pro",
                "valid_from": "2024-01-01",
            },
            {
                "subject": f"{tag} user",
                "predicate": "works at",
                "object": f"{tag} corp",
                "object_type": "entity",
                "valid_from": "2024-01-01",
            },
            # Two homes at once for an undeclared predicate: an open conflict.
            *(
                {"subject": f"{tag} user", "predicate": "lives in", "object": f"{tag} {city}"}
                for city in ("paris", "rome")
            ),
        ],
    )
    client.ingest(project, f"{tag} chat", [{"role": "user", "content": f"{tag} secret words"}])
    return [r.fact_id for r in result.results if r.fact_id]


def inbox(client: Client, project: uuid.UUID) -> tuple[uuid.UUID, int]:
    """The seeded project's open conflict and its latest predicate change."""
    (conflict,) = client.list_conflicts(project).conflicts
    return conflict.conflict_id, client.predicate_changes(project, limit=1).changes[0].change_id


def disabled_endpoint(client: Client, project: uuid.UUID) -> uuid.UUID:
    """A webhook endpoint that is disabled at once, so no delivery job is ever queued
    for it (later modules' workers must not find jobs of this one)."""
    endpoint = client.create_webhook(project, "https://hooks.example.com/tenancy").endpoint_id
    client.update_webhook(project, endpoint, enabled=False)
    return endpoint


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def world(base: str, app_dsn: str, http: httpx.Client) -> World:
    a = make_tenant(app_dsn, "tenant A")
    b = make_tenant(app_dsn, "tenant B")
    with a.client(base) as ca, b.client(base) as cb:
        facts = seed(ca, a.project, "alpha")
        seed(cb, b.project, "bravo")
        key = ca.create_api_key(a.project, "spare", ["project:read"]).key_id
        endpoint = disabled_endpoint(ca, a.project)
        conflict, change = inbox(ca, a.project)
        episode = ca.ingest(
            a.project, "alpha chat", [{"role": "user", "content": "alpha more words"}]
        ).episode_ids[0]
        ca.set_extraction_schema(a.project, {"labels": [{"name": "alpha"}]})
        attachment = (
            ca.ingest_files(
                a.project, "alpha files", [("a.txt", b"alpha file words", None)], content="alpha f"
            )
            .attachments[0]
            .attachment_id
        )
    return World(
        base, a, b, facts[0], "alpha chat", key, http, endpoint, conflict, change, episode,
        attachment,
    )  # fmt: skip


def call(w: World, token: str, method: str, path: str, **kw: Any) -> httpx.Response:
    url = path.format(
        p=w.a.project,
        f=w.fact,
        s=w.session,
        k=w.key,
        e=w.endpoint,
        c=w.conflict,
        ch=w.change,
        ep=w.episode,
        a=w.attachment,
        bp=w.b.project,
        pred="likes",
        det="email",
    )
    return w.http.request(
        method, w.base + url, headers={"Authorization": b"Bearer " + token.encode()}, **kw
    )


def a_ids(w: World) -> dict[str, str]:
    """A's ids in the path templates, as they appear in URLs and answers."""
    return {"p": str(w.a.project), "f": str(w.fact), "s": w.session, "k": str(w.key),
            "e": str(w.endpoint), "c": str(w.conflict), "ep": str(w.episode),
            "a": str(w.attachment)}  # fmt: skip


def with_random_ids(w: World) -> World:
    """The world with every id of A's replaced by one that exists nowhere."""
    a = Tenant(w.a.app_dsn, w.a.org, uuid.uuid4(), w.a.key_id, w.a.token)
    return World(
        w.base, a, w.b, uuid.uuid4(), f"no such {uuid.uuid4().hex}", uuid.uuid4(), w.http,
        uuid.uuid4(), uuid.uuid4(), 2**62 + random.randrange(2**30), uuid.uuid4(),
    )  # fmt: skip


def masked(response: httpx.Response, w: World) -> tuple[int, str]:
    text = response.text
    for name, value in a_ids(w).items():
        text = text.replace(value, f"<{name}>")
    # The change id is a number: masked where it stands alone, not inside another id.
    text = re.sub(rf"(?<![\w-]){w.change}(?![\w-])", "<ch>", text)
    return response.status_code, text


def assert_same_as_random(w: World, method: str, path: str, kw: dict[str, Any]) -> None:
    """B's answer for A's ids is the answer for ids that do not exist, byte for byte
    (ids masked): it tells B nothing about A."""
    real = masked(call(w, w.b.token, method, path, **_fill(kw, w)), w)
    other = with_random_ids(w)
    fake = masked(call(other, w.b.token, method, path, **_fill(kw, other)), other)
    assert real == fake, (method, path, real, fake)


# Every route that takes an id, with a request that succeeds for the owner.  Reads
# first; the writes below them are checked with state verified afterwards.
READS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/v1/projects/{p}", {}),
    ("GET", "/v1/projects/{p}/api-keys", {}),
    ("GET", "/v1/projects/{p}/sessions", {}),
    ("GET", "/v1/projects/{p}/backlog", {}),
    ("GET", "/v1/projects/{p}/usage", {}),
    ("GET", "/v1/projects/{p}/model-budget", {}),
    ("GET", "/v1/projects/{p}/sessions/{s}/messages", {}),
    ("GET", "/v1/projects/{p}/attachments/{a}", {}),
    ("GET", "/v1/projects/{p}/attachments/{a}/content", {}),
    ("GET", "/v1/projects/{p}/facts", {}),
    ("GET", "/v1/projects/{p}/facts", {"params": {"as_of": "2024-06-01", "subject": "alpha user"}}),
    ("GET", "/v1/projects/{p}/facts/{f}/history", {}),
    ("GET", "/v1/projects/{p}/timeline", {"params": {"subject": "alpha user"}}),
    ("GET", "/v1/projects/{p}/subject-export", {"params": {"subject": "alpha user"}}),
    ("GET", "/v1/projects/{p}/changes", {}),
    ("GET", "/v1/projects/{p}/predicates", {}),
    ("GET", "/v1/projects/{p}/redaction-rules", {}),
    ("GET", "/v1/projects/{p}/conflicts", {}),
    ("GET", "/v1/projects/{p}/conflicts/{c}", {}),
    ("GET", "/v1/projects/{p}/conflict-policy", {}),
    ("GET", "/v1/projects/{p}/cardinality/suggestions", {}),
    ("GET", "/v1/projects/{p}/cardinality/changes", {}),
    ("GET", "/v1/projects/{p}/extraction-schema", {}),
    ("GET", "/v1/projects/{p}/extraction-schema/versions", {}),
    ("GET", "/v1/projects/{p}/episodes/{ep}/extraction", {}),
    ("GET", "/v1/projects/{p}/extraction-rejections", {"params": {"reason": "parse_failure"}}),
    ("POST", "/v1/projects/{p}/search", {"json": {"query": "alpha secret plan"}}),
    ("POST", "/v1/projects/{p}/context", {"json": {"query": "alpha secret plan"}}),
    ("GET", "/v1/projects/{p}/graph/neighbors", {"params": {"entity": "alpha user"}}),
    ("GET", "/v1/projects/{p}/entities", {}),
    ("GET", "/v1/projects/{p}/communities", {}),
    ("GET", "/v1/projects/{p}/webhooks", {}),
    ("GET", "/v1/projects/{p}/webhooks/{e}/deliveries", {}),
]
WRITES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "POST",
        "/v1/projects/{p}/facts",
        {"json": {"facts": [{"subject": "x", "predicate": "y", "object": "z"}]}},
    ),
    (
        "POST",
        "/v1/projects/{p}/memory",
        {"json": {"session": "intruder", "messages": [{"role": "user", "content": "hi"}]}},
    ),
    (
        "POST",
        "/v1/projects/{p}/memory/attachments",
        {
            "data": {"message": json.dumps({"session": "intruder", "content": "hi"})},
            "files": [("file", ("x.txt", b"intruder file", "text/plain"))],
        },
    ),
    ("PUT", "/v1/projects/{p}/predicates/{pred}", {"json": {"cardinality": "one"}}),
    ("PUT", "/v1/projects/{p}/redaction-rules/{det}", {"json": {"action": "mask"}}),
    ("DELETE", "/v1/projects/{p}/redaction-rules/{det}", {}),
    ("POST", "/v1/projects/{p}/conflicts/{c}/resolve", {"json": {"resolution": "keep_both"}}),
    ("POST", "/v1/projects/{p}/facts/{f}/review", {"json": {"standing": "confirmed"}}),
    ("PUT", "/v1/projects/{p}/conflict-policy", {"json": {"learn_threshold": 0.8}}),
    ("PUT", "/v1/projects/{p}/extraction-schema", {"json": {"labels": [{"name": "x"}]}}),
    ("PUT", "/v1/projects/{p}/model-budget", {"json": {"tokens": 1000}}),
    ("POST", "/v1/projects/{p}/cardinality/changes/{ch}/undo", {}),
    ("POST", "/v1/projects/{p}/entities", {"json": {"name": "x", "aliases": ["x corp"]}}),
    (
        "POST",
        "/v1/projects/{p}/entities/merge",
        {"json": {"keep": "alpha user", "absorb": "alpha user"}},
    ),
    ("POST", "/v1/projects/{p}/entities/split", {"json": {"name": "x corp"}}),  # an alias above
    ("POST", "/v1/projects/{p}/api-keys", {"json": {"name": "x", "permissions": ["project:read"]}}),
    ("POST", "/v1/projects/{p}/facts/{f}/retract", {"json": {"reason": "x"}}),
    ("DELETE", "/v1/projects/{p}/api-keys/{k}", {}),
    ("DELETE", "/v1/projects/{p}/memory", {"params": {"session": "{s}"}}),
    ("DELETE", "/v1/projects/{p}/memory", {"params": {"subject": "alpha user"}}),
    ("DELETE", "/v1/projects/{p}/memory", {}),
    ("POST", "/v1/projects/{p}/webhooks", {"json": {"url": "https://hooks.example.com/x"}}),
    ("PATCH", "/v1/projects/{p}/webhooks/{e}", {"json": {"url": "https://hooks.example.com/y"}}),
    ("POST", "/v1/projects/{p}/webhooks/{e}/rotate", {}),
    ("DELETE", "/v1/projects/{p}/webhooks/{e}", {}),
    ("POST", "/v1/projects/{p}/communities/refresh", {}),
    ("PUT", "/v1/projects/{p}/retention", {"json": {"retention_seconds": 3600}}),
    ("DELETE", "/v1/projects/{p}", {}),  # last: the controls below run in this order
    # A's ids under B's own project: still not found.
    ("POST", "/v1/projects/{bp}/facts/{f}/retract", {}),
    ("GET", "/v1/projects/{bp}/facts/{f}/history", {}),
    ("DELETE", "/v1/projects/{bp}/api-keys/{k}", {}),
    ("GET", "/v1/projects/{bp}/sessions/{s}/messages", {}),
    ("GET", "/v1/projects/{bp}/attachments/{a}", {}),
    ("GET", "/v1/projects/{bp}/attachments/{a}/content", {}),
    ("DELETE", "/v1/projects/{bp}/memory", {"params": {"session": "{s}"}}),
    ("GET", "/v1/projects/{bp}/webhooks/{e}/deliveries", {}),
    ("PATCH", "/v1/projects/{bp}/webhooks/{e}", {"json": {"enabled": True}}),
    ("POST", "/v1/projects/{bp}/webhooks/{e}/rotate", {}),
    ("DELETE", "/v1/projects/{bp}/webhooks/{e}", {}),
    ("GET", "/v1/projects/{bp}/conflicts/{c}", {}),
    ("GET", "/v1/projects/{bp}/episodes/{ep}/extraction", {}),
    ("POST", "/v1/projects/{bp}/conflicts/{c}/resolve", {"json": {"resolution": "keep_both"}}),
    ("POST", "/v1/projects/{bp}/facts/{f}/review", {"json": {"standing": "confirmed"}}),
    ("POST", "/v1/projects/{bp}/cardinality/changes/{ch}/undo", {}),
]


def a_state(w: World) -> dict[str, Any]:
    """Everything of A's, read through SQL in A's scope."""
    return {
        "facts": w.a.rows(
            "select fact_id, invalid_at from memory.facts_at(%s) order by fact_id", (w.a.project,)
        ),
        "episodes": w.a.rows("select episode_id from memory.episodes order by 1"),
        "attachments": w.a.rows("select attachment_id from memory.attachments order by 1"),
        "keys": w.a.rows(
            "select key_id, revoked_at from memory_http.list_api_keys(%s) order by 1",
            (w.a.project,),
        ),
        "predicates": w.a.rows("select * from memory.predicates_of(%s)", (w.a.project,)),
        "redaction_rules": w.a.rows("select * from memory.redaction_rules_of(%s)", (w.a.project,)),
        "projects": w.a.rows("select project_id, name, retention from memory.projects order by 1"),
        "conflicts": w.a.rows(
            "select conflict_id, status, resolution from memory.conflicts order by 1"
        ),
        "policy": w.a.rows("select memory.conflict_policy(%s)", (w.a.project,)),
        "reviews": w.a.rows("select review_id from memory.fact_reviews order by 1"),
        "predicate_changes": w.a.rows("select change_id from memory.predicate_changes order by 1"),
        "extraction_schemas": w.a.rows(
            "select project_id, version from memory.extraction_schemas order by 1, 2"
        ),
        "webhooks": w.a.rows(
            "select e.*, t.* from memory.webhook_endpoints e "
            "left join lateral memory_worker.webhook_target(e.endpoint_id) t on true "
            "where e.project_id = %s order by e.endpoint_id",
            (w.a.project,),
        ),
    }


def _fill(kw: dict[str, Any], w: World) -> dict[str, Any]:
    params = kw.get("params")
    if params:
        kw = {**kw, "params": {k: v.format(s=w.session) for k, v in params.items()}}
    return kw


@pytest.mark.parametrize(("method", "path", "kw"), READS, ids=[f"{m} {p}" for m, p, _ in READS])
def test_other_org_reads_are_not_found(
    world: World, method: str, path: str, kw: dict[str, Any]
) -> None:
    denied = call(world, world.b.token, method, path, **kw)
    assert denied.status_code == 404, denied.text
    assert denied.json()["error"]["code"] == "not_found"
    assert "alpha" not in denied.text
    assert_same_as_random(world, method, path, kw)
    allowed = call(world, world.a.token, method, path, **kw)  # positive control
    assert allowed.status_code == 200, allowed.text


def test_other_org_writes_are_not_found_and_change_nothing(world: World) -> None:
    before = a_state(world)
    for method, path, kw in WRITES:
        response = call(world, world.b.token, method, path, **_fill(kw, world))
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["error"]["code"] == "not_found"
        assert_same_as_random(world, method, path, kw)
    assert a_state(world) == before
    # Positive controls on a copy of the world's shape: A's own key can do each write.
    with world.a.client(world.base) as ca:
        project = ca.create_project(f"control-{uuid.uuid4().hex[:6]}").project_id
        facts = seed(ca, project, "alpha")
        key = ca.create_api_key(project, "spare", ["project:read"]).key_id
        endpoint = disabled_endpoint(ca, project)
        conflict, change = inbox(ca, project)
        said = [{"role": "user", "content": "hi"}]
        episode = ca.ingest(project, "alpha chat", said).episode_ids[0]
    own = World(
        world.base,
        Tenant(world.a.app_dsn, world.a.org, project, world.a.key_id, world.a.token),
        world.b,
        facts[0],
        "alpha chat",
        key,
        world.http,
        endpoint,
        conflict,
        change,
        episode,
    )
    for method, path, kw in WRITES:
        if "{bp}" in path:
            continue
        response = call(own, world.a.token, method, path, **_fill(kw, own))
        assert response.status_code in (200, 201), (method, path, response.text)


def test_other_org_sees_nothing_in_its_own_project(world: World) -> None:
    with world.b.client(world.base) as cb:
        found = cb.search(world.b.project, "alpha secret words plan corp", k=50)
        assert all("alpha" not in (r.text or "") for r in found.results)
        assert found.results  # positive control: B finds its own
        facts = cb.list_facts(world.b.project, limit=1000).facts
        assert facts and all(f.subject.startswith("bravo") for f in facts)
        names = [e.name for e in cb.entities(world.b.project, limit=1000).entities]
        assert names and not any(n.startswith("alpha") for n in names)
        assert cb.timeline(world.b.project, "alpha user").facts == []
        context = cb.context(world.b.project, "alpha secret words")
        assert "alpha" not in context.text


def test_other_org_never_sees_ones_org_or_projects(world: World) -> None:
    a, b = world.a, world.b
    with a.client(world.base) as ca:
        extra = ca.create_project(f"hidden-{uuid.uuid4().hex[:6]}").project_id
        # Positive control: A's key sees its own org and projects.
        assert ca.get_org().org_id == a.org
        assert {a.project, extra} <= {p.project_id for p in ca.list_projects().projects}
    with b.client(world.base) as cb:
        assert cb.get_org().org_id == b.org
        seen = cb.list_projects().projects
        assert seen and all(p.org_id == b.org for p in seen)
        assert not {a.project, extra} & {p.project_id for p in seen}
    for path in ("/v1/org", "/v1/projects"):
        raw = call(world, b.token, "GET", path)
        assert raw.status_code == 200, raw.text
        assert str(a.org) not in raw.text and str(a.project) not in raw.text
        assert "tenant A" not in raw.text and str(extra) not in raw.text


def test_non_manage_key_sees_only_its_project(world: World) -> None:
    a = world.a
    with a.client(world.base) as ca:
        other = ca.create_project(f"sibling-{uuid.uuid4().hex[:6]}")
        assert len(ca.list_projects().projects) >= 2  # positive control: manage sees all
    for permissions in (["project:read"], ["project:write", "configuration:write"]):
        with Client(world.base, a.key(permissions)) as narrow:
            assert [p.project_id for p in narrow.list_projects().projects] == [a.project]
            assert narrow.get_org().org_id == a.org
        with Client(world.base, a.key(permissions, other.project_id)) as narrow:
            assert narrow.list_projects().projects == [other]
    for path in ("/v1/org", "/v1/projects"):
        assert call(world, "cmk_nope", "GET", path).json() == UNAUTHORIZED
        assert call(world, "cmk_nope", "GET", path).status_code == 401


def test_forbidden_only_inside_ones_own_org(world: World) -> None:
    a = world.a
    reader = a.key(["project:read"])
    writer = a.key(["project:write"])
    configurer = a.key(["configuration:read"])
    with a.client(world.base) as root:
        other = root.create_project(f"other-{uuid.uuid4().hex[:6]}").project_id
    cases: list[tuple[str, str, str, dict[str, Any]]] = [
        (reader, "POST", "/v1/projects/{p}/facts", {"json": {"facts": []}}),
        (reader, "DELETE", "/v1/projects/{p}/memory", {}),
        (reader, "PUT", "/v1/projects/{p}/predicates/plan", {"json": {"cardinality": "one"}}),
        (reader, "POST", "/v1/projects/{p}/entities", {"json": {"name": "x"}}),
        (reader, "POST", "/v1/projects/{p}/entities/merge", {"json": {"keep": "x", "absorb": "y"}}),
        (reader, "POST", "/v1/projects/{p}/entities/split", {"json": {"name": "x"}}),
        (reader, "GET", "/v1/projects/{p}/api-keys", {}),
        (reader, "POST", "/v1/projects", {"json": {"name": "nope"}}),
        (writer, "GET", "/v1/projects/{p}/facts", {}),
        (configurer, "PUT", "/v1/projects/{p}/predicates/plan", {"json": {"cardinality": "one"}}),
        # Review is its own permission: a writing key does not imply it.
        (writer, "POST", "/v1/projects/{p}/facts/{f}/review", {"json": {"standing": "confirmed"}}),
        (
            writer,
            "POST",
            "/v1/projects/{p}/conflicts/{c}/resolve",
            {"json": {"resolution": "keep_both"}},
        ),
        (reader, "GET", f"/v1/projects/{other}/facts", {}),  # another project of the org
    ]
    for token, method, path, kw in cases:
        response = call(world, token, method, path, **kw)
        assert response.status_code == 403, (method, path, response.text)
        assert response.json()["error"]["code"] == "forbidden"
    # Positive controls.
    assert call(world, reader, "GET", "/v1/projects/{p}/facts").status_code == 200
    assert call(world, configurer, "GET", "/v1/projects/{p}/predicates").status_code == 200
    # Another org's project stays 404 for a key lacking the permission too.
    assert (
        call(world, reader, "POST", "/v1/projects/{bp}/facts", json={"facts": []}).status_code
        == 404
    )


def test_revoked_key_is_unauthorized(world: World) -> None:
    token = world.a.key(["project:read"])
    assert call(world, token, "GET", "/v1/projects/{p}").status_code == 200
    key_id = uuid.UUID(token.split("_")[1])
    with world.a.client(world.base) as root:
        root.revoke_api_key(world.a.project, key_id)
    response = call(world, token, "GET", "/v1/projects/{p}")
    assert response.status_code == 401 and response.json() == UNAUTHORIZED


def _malformed(w: World) -> list[str]:
    token = w.a.token
    key_hex, secret = token.split("_")[1], token.split("_")[2]
    flipped = secret[:-1] + ("0" if secret[-1] != "0" else "1")
    return [
        "x",
        "cmk_",
        "cmk__",
        token.upper(),
        token + "0",
        token[:-1],
        f"cmk_{key_hex}_{flipped}",  # right key, wrong secret
        f"cmk_{uuid.uuid4().hex}_{secret}",  # unknown key, A's secret
        f"cmk_{key_hex}_{'0' * 64}",
        f"cmk_{key_hex[:-1]}g_{secret}",
        "cmk_" + "0" * 32 + "_" + "0" * 64,
        "' or 1=1 --",
        f"cmk_{key_hex}_{'é' * 64}",
        "A" * 10000,
        w.b.token.replace("cmk_", "cmk-"),
    ]


def test_malformed_tokens_are_unauthorized_without_detail(world: World) -> None:
    for token in _malformed(world):
        response = call(world, token, "GET", "/v1/projects/{p}")
        assert response.status_code == 401, token
        assert response.json() == UNAUTHORIZED, token
    for headers in (
        {},
        {"Authorization": f"Basic {world.a.token}"},
        {"Authorization": "Bearer"},
        {"Authorization": world.a.token},
    ):
        response = world.http.get(f"{world.base}/v1/projects/{world.a.project}", headers=headers)
        assert response.status_code == 401 and response.json() == UNAUTHORIZED
    # Unauthenticated callers learn nothing about ids either: same answer for any id.
    for project in (world.a.project, uuid.uuid4()):
        response = world.http.get(
            f"{world.base}/v1/projects/{project}/facts", headers={"Authorization": "Bearer nope"}
        )
        assert response.json() == UNAUTHORIZED


def test_pooled_connections_never_carry_an_org(world: World) -> None:
    """Requests of A, B and bad tokens interleave over a pool of two connections; each
    answer holds only its own tenant's data."""
    tenants = {"alpha": world.a, "bravo": world.b}

    def check(tag: str) -> None:
        t = tenants[tag]
        if tag == "alpha" and random.random() < 0.2:
            bad = call(world, "cmk_nope", "GET", "/v1/projects/{p}/facts")
            assert bad.status_code == 401
        facts = world.http.get(
            f"{world.base}/v1/projects/{t.project}/facts",
            headers={"Authorization": f"Bearer {t.token}"},
        )
        assert facts.status_code == 200
        subjects = {f["subject"] for f in facts.json()["facts"]}
        assert subjects and all(s.startswith(tag) for s in subjects), subjects
        found = world.http.post(
            f"{world.base}/v1/projects/{t.project}/search",
            json={"query": "alpha bravo secret words plan"},
            headers={"Authorization": f"Bearer {t.token}"},
        )
        texts = [r["text"] for r in found.json()["results"]]
        assert texts and all(tag in x for x in texts), texts

    for i in range(40):  # sequential: strictly alternating on the same connections
        check("alpha" if i % 2 else "bravo")

    errors: list[BaseException] = []

    def worker(tag: str) -> None:
        try:
            for _ in range(15):
                check(tag)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(tag,)) for tag in ("alpha", "bravo") * 4]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors[0]


def test_sql_api_refuses_without_an_authorized_key(world: World) -> None:
    """The audited write functions check the transaction's key themselves, so a route
    that forgot memory_http.authorize would be refused, not run unscoped."""
    with psycopg.connect(world.a.app_dsn) as conn:
        with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification):
            conn.execute("select memory_http.wipe(%s)", (world.a.project,))
        conn.rollback()
        # Scoped to the org by use_org (not by a key): still refused.
        conn.execute("select memory.use_org(%s)", (world.a.org,))
        with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification):
            conn.execute("select memory_http.assert_facts(%s, '[]')", (world.a.project,))
        conn.rollback()
        # A's key cannot act on B's project even when called directly.
        conn.execute(
            "select memory_http.authorize(%s, 'project:write', %s)",
            (world.a.token, world.a.project),
        )
        with pytest.raises(psycopg.errors.NoDataFound):
            conn.execute("select memory_http.wipe(%s)", (world.b.project,))
        conn.rollback()
        # A failed authentication leaves no org scope behind.
        conn.execute("select memory_http.authenticate(%s)", (world.a.token,))
        row = conn.execute("select * from memory_http.authenticate('cmk_bad')").fetchone()
        assert row == (None, None, None, None)
        scope = conn.execute("select memory_internal.current_org()").fetchone()
        assert scope == (None,)


def _shape(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def test_every_route_with_a_path_id_has_a_case() -> None:
    """Every route of the app with an id in its path is in READS or WRITES with A's
    project (so a new route without a cross-tenant case fails here). The console's pages
    (/console, a session cookie instead of a bearer key) have theirs in test_console.py."""
    routes = {
        (method, _shape(c.path))
        for c in iter_route_contexts(app.routes)
        if "{" in c.path and not c.path.startswith("/console")
        for method in c.methods or ()
        if method != "HEAD"
    }
    assert len(routes) >= 20, routes  # the enumeration itself works
    covered = {(m, _shape(p)) for m, p, _ in READS + WRITES if p.startswith("/v1/projects/{p}")}
    missing = sorted(routes - covered)
    assert not missing, f"routes with a path id and no cross-tenant case: {missing}"
