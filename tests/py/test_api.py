"""The HTTP API over a real `chronomem serve` process on loopback, through the client:
every route's happy path, supersession and as-of reads, wipe (checked by a fresh
connection), audit rows, /metrics, /readyz, the async client, the OpenAPI document and
the `create-key` bootstrap."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from api_server import Tenant, api_server, make_tenant
from scripted_openai import ScriptedOpenAI

from chronomem.client import AsyncClient, ChronomemError, Client

T_JAN = "2024-01-01T00:00:00Z"
T_FEB = "2024-02-01T00:00:00Z"
T_MAR = "2024-03-01T00:00:00Z"


@pytest.fixture(scope="module")
def base(app_dsn: str) -> Iterator[str]:
    with api_server(app_dsn) as url:
        yield url


@pytest.fixture(scope="module")
def tenant(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "api happy paths")


@pytest.fixture
def api(base: str, tenant: Tenant) -> Iterator[Client]:
    with tenant.client(base) as client:
        yield client


@pytest.fixture
def project(api: Client) -> uuid.UUID:
    """A fresh project per test (made through POST /v1/projects)."""
    return api.create_project(f"p-{uuid.uuid4().hex[:8]}").project_id


def plan(obj: str, valid_from: str, subject: str = "user 42") -> dict[str, Any]:
    return {"subject": subject, "predicate": "plan", "object": obj, "valid_from": valid_from}


def audit_rows(admin_dsn: str, project: uuid.UUID) -> list[tuple[str, str, str, dict[str, Any]]]:
    # A fresh superuser connection: reads past row-level security, sees only committed rows.
    with psycopg.connect(admin_dsn) as conn:
        return conn.execute(  # type: ignore[return-value]
            "select action, resource, actor, counts from memory.audit_log "
            "where project_id = %s order by audit_id",
            (project,),
        ).fetchall()


# -- projects and keys ----------------------------------------------------------------
def test_projects_and_keys(api: Client, base: str, tenant: Tenant) -> None:
    made = api.create_project("projects and keys")
    assert made.org_id == tenant.org and made.name == "projects and keys"
    assert api.get_project(made.project_id) == made

    key = api.create_api_key(made.project_id, "reader", ["project:read"])
    assert re.fullmatch(r"cmk_[0-9a-f]{32}_[0-9a-f]{64}", key.token)
    assert key.token.startswith(key.prefix) and key.permissions == ["project:read"]
    listed = api.list_api_keys(made.project_id).api_keys
    assert [k.key_id for k in listed] == [key.key_id]
    assert listed[0].revoked_at is None and listed[0].created_by == f"api_key:{tenant.key_id}"
    # The secret is shown once: no listing carries it.
    raw = httpx.get(
        f"{base}/v1/projects/{made.project_id}/api-keys",
        headers={"Authorization": f"Bearer {tenant.token}"},
    ).text
    assert key.token not in raw and key.token[-64:] not in raw

    with Client(base, key.token) as reader:
        assert reader.get_project(made.project_id).project_id == made.project_id
        assert api.list_api_keys(made.project_id).api_keys[0].last_used_at is not None
        revoked = api.revoke_api_key(made.project_id, key.key_id)
        assert revoked.status == "revoked"
        with pytest.raises(ChronomemError) as err:
            reader.get_project(made.project_id)
        assert err.value.status == 401
    assert api.revoke_api_key(made.project_id, key.key_id).status == "already_revoked"
    assert api.list_api_keys(made.project_id).api_keys[0].revoked_at == revoked.revoked_at


def test_org_and_visible_projects(api: Client, base: str, tenant: Tenant) -> None:
    org = api.get_org()
    assert (org.org_id, org.name) == (tenant.org, "api happy paths")
    made = api.create_project(f"listed-{uuid.uuid4().hex[:8]}")
    listed = api.list_projects().projects
    ids = [p.project_id for p in listed]
    # A project:manage key sees every project of its org, oldest first.
    assert tenant.project in ids and made.project_id in ids
    assert made in listed and all(p.org_id == tenant.org for p in listed)
    assert [p.created_at for p in listed] == sorted(p.created_at for p in listed)
    # Any other key sees only its own project, and its org.
    narrow = tenant.key(["configuration:read"], made.project_id)
    with Client(base, narrow) as other:
        assert other.list_projects().projects == [made]
        assert other.get_org() == org


def test_deleting_a_project(api: Client, base: str, tenant: Tenant) -> None:
    made = api.create_project(f"doomed-{uuid.uuid4().hex[:8]}").project_id
    api.assert_facts(made, [plan("pro", T_JAN)])
    reader = api.create_api_key(made, "reader", ["project:read"]).token
    writer = tenant.key(["project:read", "project:write"], made)
    with Client(base, writer) as w:
        with pytest.raises(ChronomemError) as err:
            w.delete_project(made)
        assert err.value.status == 403 and "project:manage" in str(err.value)
        assert w.list_facts(made).facts  # control: refused, nothing deleted

    gone = api.delete_project(made)
    assert gone.project_id == made and gone.deleted
    assert (gone.wiped.scope, gone.wiped.facts, gone.api_keys) == ("project", 1, 2)
    with pytest.raises(ChronomemError) as err:
        api.get_project(made)
    assert err.value.status == 404
    with pytest.raises(ChronomemError) as err:
        api.delete_project(made)
    assert err.value.status == 404
    assert made not in [p.project_id for p in api.list_projects().projects]
    with Client(base, reader) as r:  # its key went with it
        with pytest.raises(ChronomemError) as err:
            r.get_project(made)
        assert err.value.status == 401
    assert api.get_project(tenant.project).project_id == tenant.project  # control


# -- webhooks -------------------------------------------------------------------------
def test_webhooks_through_the_client(api: Client, project: uuid.UUID) -> None:
    types = {t.event_type for t in api.webhook_event_types().event_types}
    assert {"fact.superseded", "memory.wiped"} <= types
    made = api.create_webhook(project, "https://example.com/hook", ["fact.superseded"])
    assert made.secret.startswith("whsec_") and made.project_id == project
    assert made.event_types == ["fact.superseded"] and made.enabled
    listed = api.list_webhooks(project).webhooks
    assert [w.endpoint_id for w in listed] == [made.endpoint_id]
    updated = api.update_webhook(project, made.endpoint_id, enabled=False)
    assert not updated.enabled and updated.url == made.url  # the rest kept
    updated = api.update_webhook(
        project, made.endpoint_id, url="https://example.com/other", event_types=types
    )
    assert updated.url == "https://example.com/other" and set(updated.event_types) == types
    assert not updated.enabled
    rotated = api.rotate_webhook_secret(project, made.endpoint_id)
    assert rotated.secret.startswith("whsec_") and rotated.secret != made.secret
    page = api.webhook_deliveries(project, made.endpoint_id, limit=10)
    assert page.deliveries == [] and page.next_cursor is None
    deleted = api.delete_webhook(project, made.endpoint_id)
    assert (deleted.endpoint_id, deleted.deleted) == (made.endpoint_id, True)
    assert api.list_webhooks(project).webhooks == []
    with pytest.raises(ChronomemError) as err:
        api.update_webhook(project, made.endpoint_id, enabled=True)
    assert err.value.status == 404


# -- facts ----------------------------------------------------------------------------
def test_supersession_and_as_of_reads(api: Client, project: uuid.UUID) -> None:
    assert api.declare_predicate(project, "plan", "one").cardinality == "one"
    assert [p.predicate for p in api.list_predicates(project).predicates] == ["plan"]

    first = api.assert_facts(project, [plan("pro", T_JAN)])
    assert (first.inserted, first.superseded_count) == (1, 0)
    pro = first.results[0].fact_id
    believed_pro = api.list_facts(project).known_at  # an instant after the first batch

    second = api.assert_facts(project, [plan("enterprise", T_MAR)])
    assert (second.inserted, second.superseded_count) == (1, 1)
    enterprise = second.results[0].fact_id
    assert second.results[0].superseded == [pro]
    assert [(p.old_fact_id, p.new_fact_id) for p in second.superseded_pairs] == [(pro, enterprise)]

    now = api.list_facts(project)
    assert [(f.object, f.valid_until) for f in now.facts] == [("enterprise", None)]
    then = api.list_facts(project, as_of=T_FEB).facts
    assert [(f.fact_id, f.valid_until) for f in then] == [(pro, datetime(2024, 3, 1, tzinfo=UTC))]
    # What the store believed before the second batch: pro, still open.
    before = api.list_facts(project, known_at=believed_pro).facts
    assert [(f.object, f.valid_until) for f in before] == [("pro", None)]
    # Zone-less instants are UTC: the three spellings are one instant.
    for spelling in ("2024-02-01T00:00:00", "2024-02-01T01:00:00+01:00", T_FEB):
        page = api.list_facts(project, as_of=spelling)
        assert page.as_of == datetime(2024, 2, 1, tzinfo=UTC)
        assert [f.fact_id for f in page.facts] == [pro]

    retry = api.assert_facts(project, [plan("enterprise", T_MAR)])
    assert (retry.inserted, retry.skipped) == (0, 1)

    retracted = api.retract_fact(project, enterprise, "entered by mistake")
    assert retracted.status == "retracted" and retracted.restored == [pro]
    assert [f.object for f in api.list_facts(project).facts] == ["pro"]
    assert api.retract_fact(project, enterprise).status == "already_retracted"
    refused = api.assert_facts(project, [plan("enterprise", T_MAR)])
    assert refused.refused == 1 and refused.results[0].status == "refused"
    assert refused.results[0].retracted_fact_id == enterprise
    again = api.assert_facts(project, [plan("enterprise", T_MAR)], override_tombstones=True)
    assert again.inserted == 1

    history = api.fact_history(project, pro)
    kinds = [e.event_type for e in history.events]
    assert kinds[0] == "asserted" and "superseded" in kinds and "retracted" in kinds
    assert all(e.occurred_at.tzinfo is not None for e in history.events)
    timeline = api.timeline(project, "user 42", predicate="plan")
    assert {f.status for f in timeline.facts} >= {"retracted", "ended", "current"}
    assert [f.object for f in timeline.facts if f.status == "current"] == ["enterprise"]
    assert api.timeline(project, "nobody").facts == []

    # What changed, in record time: everything since the start of this test, then
    # only what came after the retraction (the override's assertion), page by page.
    changes = api.changes(project)
    kinds = [(c.event_type, c.object) for c in changes.changes]
    assert kinds[:2] == [("asserted", "pro"), ("superseded", "pro")], kinds
    assert ("retracted", "enterprise") in kinds and ("restored", "pro") in kinds, kinds
    assert changes.next_cursor is None and changes.since is None
    retracted_at = next(c.occurred_at for c in changes.changes if c.event_type == "retracted")
    after = api.changes(project, since=retracted_at).changes
    assert [c.event_type for c in after] == ["superseded", "asserted"], after
    assert [c.occurred_at > retracted_at for c in after] == [True, True]
    paged, cursor = [], None
    while True:
        page = api.changes(project, cursor=cursor, limit=2)
        paged += [c.event_id for c in page.changes]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert paged == [c.event_id for c in changes.changes]
    with pytest.raises(ChronomemError) as bad:
        api.changes(project, cursor="not a cursor")
    assert (bad.value.status, bad.value.field) == (422, "cursor")


def test_assert_reports_bad_facts_without_losing_the_batch(api: Client, project: uuid.UUID) -> None:
    result = api.assert_facts(
        project,
        [
            plan("pro", T_JAN),
            {"subject": "user 42", "predicate": "plan", "object": "x", "valid_from": "soon"},
            {"subject": "user 44", "predicate": "", "object": "x"},
            {"subject": 42, "predicate": "plan", "object": "x"},
            plan("basic", T_JAN, subject="user 43"),
        ],
    )
    assert (result.inserted, result.invalid) == (2, 3)
    statuses = ["inserted", "invalid", "invalid", "invalid", "inserted"]
    assert [r.status for r in result.results] == statuses
    fields = [r.error.field if r.error else None for r in result.results]
    assert fields == [None, "valid_from", "predicate", "subject", None]


def test_fact_pages_follow_the_cursor(api: Client, project: uuid.UUID) -> None:
    facts = [
        {"subject": f"user {i % 3}", "predicate": "likes", "object": f"thing {i}"}
        for i in range(25)
    ]
    assert api.assert_facts(project, facts).inserted == 25
    seen: list[uuid.UUID] = []
    cursor = None
    pages = 0
    while True:
        page = api.list_facts(project, cursor=cursor, limit=10)
        pages += 1
        seen += [f.fact_id for f in page.facts]
        if page.next_cursor is None:
            break
        assert len(page.facts) == 10 and page.next_cursor == page.facts[-1].fact_id
        cursor = page.next_cursor
    assert pages == 3 and len(seen) == 25 and seen == sorted(seen, key=str)
    assert len(set(seen)) == 25
    mine = api.list_facts(project, subject="USER 1", predicate="Likes", limit=1000).facts
    assert len(mine) == 8 and {f.subject for f in mine} == {"user 1"}
    assert api.list_facts(project, subject="nobody").facts == []


# -- memory ---------------------------------------------------------------------------
def test_ingest_is_idempotent_and_sessions_page(api: Client, project: uuid.UUID) -> None:
    messages = [
        {"role": "user", "content": "I moved to Berlin", "occurred_at": "2024-05-01T10:00:00"},
        {"role": "assistant", "content": "Noted: Berlin.", "metadata": {"source": "test"}},
    ]
    first = api.ingest(project, "chat 1", messages, idempotency_key="req-1")
    assert not first.replayed and len(first.episode_ids) == 2
    again = api.ingest(project, "chat 1", messages, idempotency_key="req-1")
    assert again.replayed and again.episode_ids == first.episode_ids
    with pytest.raises(ChronomemError) as err:
        api.ingest(project, "chat 1", messages[:1], idempotency_key="req-1")
    assert (err.value.status, err.value.code, err.value.field) == (
        409,
        "conflict",
        "Idempotency-Key",
    )
    third = api.ingest(project, "chat 1", [{"role": "user", "content": "And now Paris."}])

    page = api.session_messages(project, "chat 1", limit=2)
    assert [m.seq for m in page.messages] == [1, 2] and page.next_cursor == 2
    assert page.messages[0].occurred_at == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert page.messages[1].metadata == {"source": "test"}
    rest = api.session_messages(project, "chat 1", after=page.next_cursor)
    assert [m.episode_id for m in rest.messages] == third.episode_ids
    assert rest.next_cursor is None
    with pytest.raises(ChronomemError) as missing:
        api.session_messages(project, "no such chat")
    assert missing.value.status == 404

    api.ingest(project, "chat 0", [{"role": "user", "content": "hi"}])
    listed = api.sessions(project, limit=1)
    assert [(x.session, x.last_seq) for x in listed.sessions] == [("chat 0", 1)]
    after = api.sessions(project, cursor=listed.next_cursor)
    assert [(x.session, x.last_seq) for x in after.sessions] == [("chat 1", 3)]
    assert after.next_cursor is None and after.sessions[0].session_id == page.session_id

    # No worker runs here: the four messages wait for extraction, the three ingest
    # calls' embeddings too (the replay queued nothing).
    backlog = api.backlog(project)
    assert not backlog.caught_up
    assert (backlog.kinds["enrich"].queued, backlog.kinds["embed"].queued) == (4, 3)
    assert backlog.kinds["enrich"].oldest_queued_at is not None


def test_session_ids_with_slashes_read_back(api: Client, project: uuid.UUID) -> None:
    """A session id is any text: one with slashes and a percent sign reads back by
    the id it was written under (the path segment is the rest of the path up to
    /messages), and a prefix of it is another session (positive control)."""
    name = "crew/research 100%/agent"
    api.ingest(project, name, [{"role": "user", "content": "slashes are fine"}])
    page = api.session_messages(project, name)
    assert [m.content for m in page.messages] == ["slashes are fine"]
    with pytest.raises(ChronomemError) as prefix:
        api.session_messages(project, "crew/research 100%")
    assert prefix.value.status == 404


# -- retrieval and graph --------------------------------------------------------------
def test_search_and_context_at_an_instant(api: Client, project: uuid.UUID) -> None:
    api.declare_predicate(project, "plan", "one")
    api.assert_facts(project, [plan("pro", T_JAN), plan("enterprise", T_MAR)])
    api.ingest(project, "s", [{"role": "user", "content": "My plan is enterprise now"}])

    now = api.search(project, "what plan does user 42 have", k=5)
    assert not now.degraded and "fact_fulltext" in now.legs
    assert "episode_vector" not in now.legs  # no embedder configured, none sent
    objects = [r.object for r in now.results if r.kind == "fact"]
    assert objects == ["enterprise"]
    # Plain reciprocal rank fusion: each result scores the sum of 1/(60 + rank) over
    # the legs that found it.
    rrf = api.search(project, "what plan does user 42 have", k=5, fusion="rrf")
    assert [r.object for r in rrf.results if r.kind == "fact"] == ["enterprise"]
    assert all(
        abs(r.score - sum(1 / (60 + rank) for rank in r.ranks.values())) < 1e-6 for r in rrf.results
    )
    assert any(
        abs(r.score - sum(1 / (60 + q) for q in r.ranks.values())) > 1e-6 for r in now.results
    )
    then = api.search(project, "what plan does user 42 have", as_of=T_FEB)
    assert [r.object for r in then.results if r.kind == "fact"] == ["pro"]
    assert then.at == datetime(2024, 2, 1, tzinfo=UTC)

    # A client's own query vector runs the vector legs.
    dim = 384
    vector = api.search(project, "plan", query_embedding=[1.0] + [0.0] * (dim - 1))
    assert {"episode_vector", "fact_vector"} <= set(vector.legs)

    ctx = api.context(project, "what plan does user 42 have", as_of=T_FEB)
    assert "pro" in ctx.text and "enterprise" not in ctx.text
    assert ctx.tokens > 0 and [f.object for f in ctx.facts] == ["pro"]


def test_graph_entities_and_communities(api: Client, project: uuid.UUID, tenant: Tenant) -> None:
    def edge(s: str, p: str, o: str, since: str) -> dict[str, Any]:
        return {
            "subject": s,
            "predicate": p,
            "object": o,
            "object_type": "entity",
            "valid_from": since,
        }

    api.assert_facts(
        project,
        [
            edge("alice", "works at", "acme", "2024-01-01"),
            edge("acme", "located in", "berlin", "2024-06-01"),
            edge("bob", "knows", "carol", "2024-01-01"),
        ],
    )
    one = api.neighbors(project, "Alice")
    assert one.entity.name == "alice" and one.depth == 1
    assert [(n.name, n.depth) for n in one.nodes] == [("alice", 0), ("acme", 1)]
    assert [e.relation for e in one.edges] == ["works at"]
    two = api.neighbors(project, "alice", depth=2)
    assert [n.name for n in two.nodes] == ["alice", "acme", "berlin"] and not two.truncated
    capped = api.neighbors(project, "alice", depth=2, limit=2)
    assert ([n.name for n in capped.nodes], capped.truncated) == (["alice", "acme"], True)
    assert [e.relation for e in capped.edges] == ["works at"]  # none to berlin, left out
    early = api.neighbors(project, "alice", depth=2, as_of="2024-03-01")
    assert [n.name for n in early.nodes] == ["alice", "acme"]
    with pytest.raises(ChronomemError) as err:
        api.neighbors(project, "nobody")
    assert err.value.status == 404

    first = api.entities(project, limit=3)
    assert [e.name for e in first.entities] == ["acme", "alice", "berlin"]
    rest = api.entities(project, cursor=first.next_cursor)
    assert [e.name for e in rest.entities] == ["bob", "carol"] and rest.next_cursor is None

    never = api.communities(project)
    assert never.communities == [] and never.computed_at is None
    made = api.refresh_communities(project)
    assert made.computed and (made.communities, made.members, made.edges) == (2, 5, 3)
    again = api.refresh_communities(project)  # the graph has not changed: the same run
    assert not again.computed and again.computed_at == made.computed_at
    assert (again.communities, again.members, again.edges) == (2, 5, 3)
    listed = api.communities(project)
    groups = listed.communities
    assert listed.computed_at is not None
    assert all(c.computed_at == listed.computed_at for c in groups)
    assert sorted(sorted(m.name for m in c.members) for c in groups) == [
        ["acme", "alice", "berlin"],
        ["bob", "carol"],
    ]
    assert groups[0].size == 3 and listed.next_cursor is None
    # A page at a time, members capped.
    page = api.communities(project, limit=1, members=1)
    assert [(c.size, len(c.members), c.more) for c in page.communities] == [(3, 1, 2)]
    last = api.communities(project, limit=1, cursor=page.next_cursor)
    assert [c.community_id for c in last.communities] == [groups[1].community_id]
    assert last.next_cursor is None
    with pytest.raises(ChronomemError) as err:
        api.communities(project, cursor="nonsense")
    assert err.value.status == 422 and "cursor" in str(err.value)
    # The context's last section: the community of the entities it names (Bob and
    # Carol's is not named); before the computation, none.
    ctx = api.context(project, "where does alice work")
    assert [(c.label, c.members, c.more) for c in ctx.communities] == [
        (groups[0].label, ["acme", "alice", "berlin"], 0)
    ]
    assert ctx.text.endswith(f"- {groups[0].label} (3 members): acme, alice, berlin")
    assert api.context(project, "where does alice work", as_of="2024-07-01").communities == []


def test_an_entity_and_its_aliases_take_over_the_plain_names_of_it(
    api: Client, project: uuid.UUID, admin_dsn: str
) -> None:
    """POST /entities: the facts stored with "ACME Corp" as a plain name become Acme's
    (object, edge) when Acme is created with that alias; the explicit literal stays."""
    api.assert_facts(
        project,
        [
            {"subject": "bob", "predicate": "works at", "object": "ACME Corp",
             "valid_from": T_JAN},
            {"subject": "dee", "predicate": "mentions", "object": "ACME Corp",
             "object_type": "literal", "valid_from": T_JAN},
        ],
    )  # fmt: skip
    before = {f.subject: (f.object, f.object_entity_id) for f in api.list_facts(project).facts}
    assert before == {"bob": ("ACME Corp", None), "dee": ("ACME Corp", None)}

    acme = api.upsert_entity(project, "Acme", entity_type="org", aliases=["ACME Corp"])
    assert (acme.name, acme.entity_type, acme.aliases) == ("Acme", "org", ["ACME Corp"])
    after = {f.subject: (f.object, f.object_entity_id) for f in api.list_facts(project).facts}
    assert after == {"bob": ("Acme", acme.entity_id), "dee": ("ACME Corp", None)}
    assert [e.relation for e in api.neighbors(project, "acme corp").edges] == ["works at"]

    # Again, by an alias and with a summary: the same entity, its type kept.
    again = api.upsert_entity(project, "acme corp", summary="a company")
    assert (again.entity_id, again.entity_type, again.summary) == (
        acme.entity_id,
        "org",
        "a company",
    )
    assert audit_rows(admin_dsn, project)[-1][:2] == ("entity.upsert", f"entity:{acme.entity_id}")

    # Bad input names its field and writes nothing.
    api.upsert_entity(project, "Globex")
    for name, aliases, status, field in [
        ("Acme", ["Globex"], 409, "aliases"),  # an entity's own name
        ("  ", [], 422, "name"),
        ("x" * 501, [], 422, "name"),
        ("Initech", ["!!"], 422, "aliases"),
    ]:
        with pytest.raises(ChronomemError) as err:
            api.upsert_entity(project, name, aliases=aliases)
        assert (err.value.status, err.value.field) == (status, field), err.value
    assert [e.name for e in api.entities(project).entities] == ["Acme", "bob", "dee", "Globex"]


def test_merging_two_entities_that_are_one(api: Client, project: uuid.UUID, admin_dsn: str) -> None:
    """POST /entities/merge: Mel's fact and edge become Melanie's and Mel an alias of her;
    the answer counts what moved, the audit row has the counts. Unknown names are a 404
    naming the field, too long a name a 422; neither writes anything."""
    api.assert_facts(
        project,
        [
            {"subject": "Mel", "predicate": "works at", "object": "Globex",
             "object_type": "entity", "valid_from": T_JAN},
            {"subject": "Melanie", "predicate": "likes", "object": "tea", "valid_from": T_JAN},
        ],
    )  # fmt: skip
    preview = api.merge_entities(project, "Melanie", "Mel", dry_run=True)
    assert (preview.dry_run, preview.entity.aliases, preview.facts_rekeyed) == (True, [], 1)
    assert {f.subject for f in api.list_facts(project).facts} == {"Mel", "Melanie"}
    merged = api.merge_entities(project, "Melanie", "Mel")
    assert (merged.entity.name, merged.entity.aliases, merged.merged) == ("Melanie", ["Mel"], True)
    assert (merged.facts_rekeyed, merged.facts_superseded, merged.edges_repointed) == (1, 0, 1)
    facts = {(f.subject, f.predicate, f.object) for f in api.list_facts(project).facts}
    assert {("Melanie", "works at", "Globex"), ("Melanie", "likes", "tea")} <= facts
    assert not {f for f in facts if f[0] == "Mel"}
    assert [e.relation for e in api.neighbors(project, "mel").edges] == ["works at"]
    merges = [row[:2] for row in audit_rows(admin_dsn, project) if row[0] == "entity.merge"]
    assert merges == [("entity.merge", f"entity:{merged.entity.entity_id}")]  # not the dry run
    again = api.merge_entities(project, "mel", "MELANIE")
    assert (again.merged, again.facts_rekeyed) == (False, 0)

    # And undone: Mel is an entity of its own again, with its fact and edge.
    preview = api.split_entity(project, "Mel", dry_run=True)
    assert (preview.dry_run, preview.entity, preview.facts_moved) == (True, None, 1)
    split = api.split_entity(project, "Mel")
    assert (split.entity and split.entity.name, split.split_from) == (
        "Mel",
        merged.entity.entity_id,
    )
    facts = {(f.subject, f.predicate, f.object) for f in api.list_facts(project).facts}
    assert {("Mel", "works at", "Globex"), ("Melanie", "likes", "tea")} <= facts
    assert [row[0] for row in audit_rows(admin_dsn, project)][-1] == "entity.split"
    for name, status in [("Melanie", 422), ("Nobody", 404), ("x" * 501, 422)]:
        with pytest.raises(ChronomemError) as err:
            api.split_entity(project, name)
        assert (err.value.status, err.value.field) == (status, "name"), err.value

    names = sorted(e.name for e in api.entities(project).entities)
    for keep, absorb, status, field in [
        ("Nobody", "Melanie", 404, "keep"),
        ("Melanie", "Nobody", 404, "absorb"),
        ("x" * 501, "Melanie", 422, "keep"),
        ("Melanie", "x" * 501, 422, "absorb"),
    ]:
        with pytest.raises(ChronomemError) as err:
            api.merge_entities(project, keep, absorb)
        assert (err.value.status, err.value.field) == (status, field), err.value
    assert sorted(e.name for e in api.entities(project).entities) == names


# -- wipe -----------------------------------------------------------------------------
def test_wipe_is_verified_by_a_fresh_connection(
    api: Client, project: uuid.UUID, admin_dsn: str
) -> None:
    api.ingest(project, "keep", [{"role": "user", "content": "keep me"}])
    api.ingest(project, "drop", [{"role": "user", "content": "secret drop me"}])
    facts = api.assert_facts(project, [plan("pro", T_JAN), plan("pro", T_JAN, subject="user 43")])
    believed = api.list_facts(project).known_at

    by_session = api.wipe(project, session="drop")
    assert by_session.scope == "session" and by_session.episodes == 1
    assert api.session_messages(project, "keep").messages
    by_subject = api.wipe(project, subject="user 43")
    assert (by_subject.scope, by_subject.facts) == ("subject", 1)
    assert [f.subject for f in api.list_facts(project).facts] == ["user 42"]

    wiped = api.wipe(project)
    assert wiped.scope == "project" and wiped.facts == 1 and wiped.episodes == 1

    with psycopg.connect(admin_dsn) as conn:
        for table in ("facts", "episodes", "sessions", "entities", "edges", "fact_events"):
            n = conn.execute(
                f"select count(*) from memory.{table} where project_id = %s", (project,)
            ).fetchone()
            assert n == (0,), table
        gone = conn.execute(
            "select count(*) from memory.facts_at(%s, %s, %s)", (project, T_FEB, believed)
        ).fetchone()
        assert gone == (0,)
        audit = conn.execute(
            "select resource, counts::text from memory.audit_log "
            "where project_id = %s and action = 'wipe' order by audit_id",
            (project,),
        ).fetchall()
    assert [r[0] for r in audit] == ["session", "subject", "project"]
    assert all("secret" not in r[1] and "user 4" not in r[1] for r in audit)
    assert api.list_facts(project, as_of=T_FEB, known_at=believed).facts == []
    assert facts.inserted == 2


# -- audit ----------------------------------------------------------------------------
def test_every_mutating_request_writes_one_audit_row(
    api: Client, tenant: Tenant, admin_dsn: str
) -> None:
    project = api.create_project(f"audited-{uuid.uuid4().hex[:6]}").project_id
    actor = f"api_key:{tenant.key_id}"
    expected = [("project.create", f"project:{project}")]
    assert [(a, r) for a, r, _, _ in audit_rows(admin_dsn, project)] == expected

    steps: list[tuple[str, Any]] = [
        ("predicate.declare", lambda: api.declare_predicate(project, "plan", "one")),
        ("facts.assert", lambda: api.assert_facts(project, [plan("pro", T_JAN)])),
        ("memory.ingest", lambda: api.ingest(project, "s", [{"role": "user", "content": "hi"}])),
        ("api_key.create", lambda: api.create_api_key(project, "k", ["project:read"])),
        ("entity.upsert", lambda: api.upsert_entity(project, "Acme", aliases=["ACME Corp"])),
        ("communities.refresh", lambda: api.refresh_communities(project)),
    ]
    for action, step in steps:
        before = len(audit_rows(admin_dsn, project))
        step()
        rows = audit_rows(admin_dsn, project)
        assert len(rows) == before + 1 and rows[-1][0] == action and rows[-1][2] == actor
    key = api.list_api_keys(project).api_keys[0].key_id
    fact = api.list_facts(project).facts[0].fact_id
    for action, step in [
        ("api_key.revoke", lambda: api.revoke_api_key(project, key)),
        ("retract_fact", lambda: api.retract_fact(project, fact, "test")),
        ("wipe", lambda: api.wipe(project)),
    ]:
        before = len(audit_rows(admin_dsn, project))
        step()
        rows = audit_rows(admin_dsn, project)
        assert len(rows) == before + 1 and rows[-1][0] == action and rows[-1][2] == actor

    # Reads write nothing.
    before = len(audit_rows(admin_dsn, project))
    api.list_facts(project)
    api.search(project, "plan")
    api.list_api_keys(project)
    assert len(audit_rows(admin_dsn, project)) == before
    counts = {a: c for a, _, _, c in audit_rows(admin_dsn, project)}
    assert counts["facts.assert"]["inserted"] == 1 and counts["memory.ingest"]["episodes"] == 1
    # Append-only, even for the app role.
    with psycopg.connect(tenant.app_dsn) as conn:
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("delete from memory.audit_log where project_id = %s", (project,))


# -- operations -----------------------------------------------------------------------
def test_metrics_expose_counters_queue_and_requests(api: Client, project: uuid.UUID) -> None:
    api.declare_predicate(project, "plan", "one")
    result = api.assert_facts(project, [plan("pro", T_JAN), plan("max", T_MAR)])
    api.retract_fact(project, result.results[1].fact_id)
    api.assert_facts(project, [plan("max", T_MAR)])  # refused: retracted claim
    api.ingest(project, "m", [{"role": "user", "content": "hello"}])
    api.search(project, "plan")

    text = api.metrics()

    def value(name: str) -> float:
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
        assert m, f"{name} missing from /metrics"
        return float(m.group(1))

    assert value("chronomem_database_up") == 1
    for counter in ("facts_superseded", "facts_retracted", "facts_refused", "facts_inserted"):
        assert value(f"chronomem_{counter}_total") >= 1
    assert value('chronomem_queue_depth{kind="enrich"}') >= 1
    assert value('chronomem_queue_oldest_age_seconds{kind="enrich"}') >= 0
    assert 'chronomem_queue_dead{kind="embed"}' in text
    assert 'chronomem_queue_jobs{kind="embed",status="queued"}' in text
    route = "/v1/projects/{project_id}/facts"
    assert (
        value(f'chronomem_http_requests_total{{method="POST",route="{route}",status="200"}}') >= 2
    )
    assert (
        f'chronomem_http_request_duration_seconds_bucket{{le="0.5",method="POST",route="{route}"}}'
        in text
    )
    assert value('chronomem_search_duration_seconds_count{endpoint="search"}') >= 1
    assert str(project) not in text  # route templates, not ids


def test_health_and_readiness(base: str, api: Client) -> None:
    assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
    ready = api.ready()
    assert ready.status == "ok" and ready.database == "ok" and ready.revision == ready.head


def test_async_client(base: str, tenant: Tenant, project: uuid.UUID) -> None:
    async def run() -> list[int]:
        async with AsyncClient(base, tenant.token) as client:
            await client.declare_predicate(project, "plan", "one")
            await client.assert_facts(project, [plan("pro", T_JAN)])
            pages = await asyncio.gather(
                *(client.list_facts(project, as_of=T_FEB) for _ in range(8))
            )
            with pytest.raises(ChronomemError):
                await client.get_project(uuid.uuid4())
            assert (await client.get_org()).org_id == tenant.org
            assert project in [p.project_id for p in (await client.list_projects()).projects]
            hook = await client.create_webhook(project, "https://example.com/async")
            assert [w.endpoint_id for w in (await client.list_webhooks(project)).webhooks] == [
                hook.endpoint_id
            ]
            assert (await client.webhook_event_types()).event_types
            await client.update_webhook(project, hook.endpoint_id, enabled=False)
            await client.rotate_webhook_secret(project, hook.endpoint_id)
            await client.webhook_deliveries(project, hook.endpoint_id)
            assert (await client.delete_webhook(project, hook.endpoint_id)).deleted
            return [len(p.facts) for p in pages]

    assert asyncio.run(run()) == [1] * 8


def test_openapi_documents_every_route(base: str) -> None:
    spec = httpx.get(f"{base}/openapi.json").json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    operations = [
        (path, method, op)
        for path, item in spec["paths"].items()
        if path.startswith("/v1/")
        for method, op in item.items()
    ]
    # 20 + 7 webhook operations + GET /v1/org, GET /v1/projects, POST /v1/.../entities,
    # POST /v1/.../entities/merge, POST /v1/.../entities/split, DELETE /v1/projects/{id},
    # POST /v1/.../communities/refresh, GET /v1/.../sessions, GET /v1/.../backlog,
    # GET /v1/.../changes, GET /v1/.../subject-export, PUT, GET and DELETE
    # /v1/.../redaction-rules, 9 of conflicts, review and predicate changes, 5 of the
    # extraction schema and rejections, 3 of attachments, 3 of model usage and budgets
    assert len(operations) == 62
    error_ref = "#/components/schemas/ErrorResponse"
    # The one answer that is not JSON: a stored file's bytes.
    binary = ("/v1/projects/{project_id}/attachments/{attachment_id}/content", "get")
    for path, method, op in operations:
        ok = op["responses"].get("200") or op["responses"].get("201")
        if (path, method) == binary:
            assert ok["content"]["application/octet-stream"]["schema"]["format"] == "binary"
        else:
            assert ok and "$ref" in ok["content"]["application/json"]["schema"], (path, method)
        for status in ("401", "404", "422"):
            schema = op["responses"][status]["content"]["application/json"]["schema"]
            assert schema == {"$ref": error_ref}, (path, method, status)
        assert op.get("security") == [{"HTTPBearer": []}], (path, method)


def test_cli_create_key_bootstraps_an_org(base: str, app_dsn: str) -> None:
    def create_key(org: str) -> tuple[str, str]:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "chronomem",
                "create-key",
                "--org",
                org,
                "--project",
                "cli project",
                "--dsn",
                app_dsn,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout.strip(), done.stderr

    token, info = create_key("cli org")
    assert re.fullmatch(r"cmk_[0-9a-f]{32}_[0-9a-f]{64}", token)
    org = re.search(r"^org\s+(\S+) \(new\)", info, re.MULTILINE)
    project = re.search(r"^project\s+(\S+) \(new\)", info, re.MULTILINE)
    assert org and project
    with Client(base, token) as client:
        assert client.get_project(project.group(1)).name == "cli project"
        # Every permission by default; project:manage covers new projects of the org.
        other = client.create_project("second")
        assert client.list_facts(other.project_id).facts == []
    second, info2 = create_key(org.group(1))
    assert second != token and f"project  {project.group(1)}\n" in info2  # found, not new
    with Client(base, second) as client:
        assert client.get_project(project.group(1)).org_id == uuid.UUID(org.group(1))


def test_timestamps_in_answers_are_utc(base: str, tenant: Tenant, project: uuid.UUID) -> None:
    raw = httpx.get(
        f"{base}/v1/projects/{project}/facts",
        params={"as_of": "2024-02-01T05:00:00+05:00"},
        headers={"Authorization": f"Bearer {tenant.token}"},
    ).json()
    assert raw["as_of"] == "2024-02-01T00:00:00Z"
    assert datetime.fromisoformat(raw["known_at"]) - datetime.now(UTC) < timedelta(minutes=1)


def _query_embedder_env(llm: ScriptedOpenAI) -> dict[str, str]:
    """API settings that embed queries with the scripted server's embeddings."""
    return {
        "CHRONOMEM_API_QUERY_EMBEDDINGS": "auto",
        "CHRONOMEM_EMBEDDING_BASE_URL": llm.base_url,
        "CHRONOMEM_EMBEDDING_MODEL": "scripted-embed",
    }


def test_search_embeds_the_question_without_the_participants_names(
    app_dsn: str, tenant: Tenant
) -> None:
    """The API embeds memory.vector_query_text's text for the vector legs: the question
    without the names of the participants it names (a speaker of the project's turns);
    a name nobody speaks under stays (control), as does a question naming no one."""
    with (
        ScriptedOpenAI(dim=384).running() as llm,
        api_server(tenant.app_dsn, **_query_embedder_env(llm)) as url,
        tenant.client(url) as client,
    ):
        project = client.create_project(f"p-{uuid.uuid4().hex[:8]}").project_id
        turns = [
            {"role": "user", "content": "Zanzibar was lovely", "metadata": {"speaker": "Ann"}},
            {"role": "assistant", "content": "Zanzibar is far", "metadata": {"speaker": "Bob"}},
        ]
        client.ingest(project, "trip", turns)
        for query in (
            "What did Ann think of zanzibar?",
            "What did Carol think of zanzibar?",
            "What was zanzibar like?",
        ):
            legs = client.search(project, query).legs
            assert "episode_vector" in legs, legs
        client.context(project, "What did Bob say about zanzibar?")
    asked = [t for t in llm.embedding_inputs if "zanzibar" in t]
    assert asked == [
        "What did think of zanzibar?",
        "What did Carol think of zanzibar?",
        "What was zanzibar like?",
        "What did say about zanzibar?",
    ]


def test_search_survives_a_failing_vector_query_text(
    admin_dsn: str, app_dsn: str, tenant: Tenant
) -> None:
    """vector_query_text only refines the text to embed: when it fails (here: the app
    role may not execute it), the API embeds the question as it is and the search and
    context still answer, vector legs included. Control: with the grant in place the
    same question is embedded without the participant's name."""
    signature = "memory.vector_query_text(uuid, text, timestamptz, timestamptz)"
    query = "What did Ann think of zanzibar?"
    with (
        ScriptedOpenAI(dim=384).running() as llm,
        api_server(tenant.app_dsn, **_query_embedder_env(llm)) as url,
        tenant.client(url) as client,
    ):
        project = client.create_project(f"p-{uuid.uuid4().hex[:8]}").project_id
        turn = {
            "role": "user",
            "content": "Zanzibar was lovely",
            "metadata": {"speaker": "Ann"},
        }
        client.ingest(project, "trip", [turn])
        assert "episode_vector" in client.search(project, query).legs
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f"revoke execute on function {signature} from chronomem_app")
        try:
            result = client.search(project, query)
            assert "episode_vector" in result.legs, result.legs
            assert any(h.kind == "episode" for h in result.results)
            client.context(project, query)
        finally:
            with psycopg.connect(admin_dsn, autocommit=True) as admin:
                admin.execute(f"grant execute on function {signature} to chronomem_app")
    asked = [t for t in llm.embedding_inputs if "zanzibar" in t]
    assert asked == ["What did think of zanzibar?", query, query]
