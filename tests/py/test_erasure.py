"""Erasure you can prove: memory.wipe's receipt and memory.verify_erased.

A project is filled through the paths users and the worker write by (ingest with an
idempotency key, facts asserted and retracted with a reason, an alias, an extraction
answer with a note, communities, a webhook endpoint whose deliveries queue bodies), each
carrying a planted name. Before a wipe, verify_erased (as the owner) finds the name in
every store it lives in (the positive control); after the wipe, nowhere, while a second
name written outside the wiped scope is still found. The receipt counts what went from
each store. memory_internal.data_stores() must list every table of the chronomem
schemas: a table added without deciding how it is erased fails the catalog test, and
verify_erased refuses to prove anything while one exists."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

SCHEMAS = ("memory", "memory_internal", "memory_http", "memory_worker")


@pytest.fixture
def app(app_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(app_dsn, row_factory=dict_row, autocommit=True) as c:
        yield c


@pytest.fixture
def owner(owner_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(owner_dsn, row_factory=dict_row) as c:
        yield c
        c.rollback()


class Tenant:
    """One org and project, written through the app role (each call its own
    transaction, scoped to the org)."""

    def __init__(self, app: psycopg.Connection[Any], name: str) -> None:
        self.app = app
        row = app.execute("select memory.create_org(%s) as id", (name,)).fetchone()
        assert row is not None
        self.org = row["id"]
        self.project = self.one("select memory.create_project(%s, 'erasure') as r", self.org)

    def one(self, query: str, *args: Any) -> Any:
        with self.app.transaction():
            self.app.execute("select memory.use_org(%s)", (self.org,))
            row = self.app.execute(query, args).fetchone()
        assert row is not None
        return row["r"]

    def ingest(self, session: str, *texts: str, key: str | None = None) -> list[str]:
        messages = Jsonb([{"role": "user", "content": t} for t in texts])
        r = self.one(
            "select memory.ingest(%s, %s, %s, %s) as r", self.project, session, messages, key
        )
        ids: list[str] = r["episode_ids"]
        return ids

    def facts(self, *facts: dict[str, Any]) -> list[str]:
        r = self.one("select memory.assert_facts(%s, %s) as r", self.project, Jsonb(list(facts)))
        return [x["fact_id"] for x in r["results"]]

    def wipe(self, session: str | None = None, subject: str | None = None) -> dict[str, Any]:
        r: dict[str, Any] = self.one(
            "select memory.wipe(%s, %s, %s) as r", self.project, session, subject
        )
        return r


def fill(t: Tenant, name: str) -> None:
    """Write `name` into every store a user or the worker can reach: the session
    chat-<first name> holds the episodes naming it; the facts about it come from the
    worker's answer for one of those episodes and from the API."""
    first, last = name.split()
    t.one("select memory.create_webhook(%s, 'https://hooks.example.com/chronomem') as r", t.project)
    episodes = t.ingest(
        f"chat-{first}",
        f"{name} moved to Oslo last spring.",
        f"{first} says the rent is high.",
        key=f"batch-{first}-1",
    )
    # The worker's answer for the first episode: an entity with an alias, a fact, a note,
    # and a fact it rejects.
    report = t.one(
        "select memory_worker.apply_extraction(%s, %s) as r",
        episodes[0],
        Jsonb(
            {
                "entities": [{"name": name, "type": "person", "aliases": [f"{first} Q"]}],
                "facts": [
                    {"subject": name, "predicate": "lives_in", "object": "Oslo", "confidence": 0.9},
                    # Below the floor: a rejection that names the subject.
                    {"subject": name, "predicate": "likes", "object": "rain", "confidence": 0.1},
                ],
                "contradictions": [],
                "notes": [{"kind": "summary", "subject": name, "content": f"{name} moved."}],
            }
        ),
    )
    assert not report.get("failed_sections"), report
    wrong = t.facts({"subject": name, "predicate": "works_at", "object": "Globex"})
    t.one(
        "select memory.retract_fact(%s, %s, %s) as r",
        t.project,
        wrong[0],
        f"{last} said it was wrong",
    )
    t.facts({"subject": "Bob", "predicate": "knows", "object": name})
    t.one("select memory.refresh_communities(%s) as r", t.project)


def found(owner: psycopg.Connection[Any], t: Tenant, *strings: str) -> dict[str, set[str]]:
    """verify_erased as the owner: the stores holding each string."""
    owner.execute("select memory.use_org(%s)", (t.org,))
    rows = owner.execute(
        "select store, string, rows_found from memory.verify_erased(%s, %s)",
        (t.project, list(strings)),
    ).fetchall()
    owner.rollback()
    out: dict[str, set[str]] = {s: set() for s in strings}
    for r in rows:
        assert r["rows_found"] > 0
        out[r["string"]].add(r["store"])
    return out


NAME = "Zephyrine Quillfeather"
OTHER = "Bartholomew"  # written outside every wiped scope: still found afterwards
# Where fill() puts the name: every store that holds content but the embeddings (numbers,
# no text to find; the receipt counts them) and the working sets of a community run
# (emptied when it ends); its lexeme counts are still pending, not folded in.
PENDING = "memory_internal.episode_term_df_pending"
HOLDING = {
    "memory.episodes",
    "memory.sessions",
    "memory.facts",
    "memory.fact_events",
    "memory.tombstones",
    "memory.entities",
    "memory.entity_aliases",
    "memory.notes",
    "memory.extraction_rejections",
    "memory.jobs",
    "memory_internal.episode_terms",
    PENDING,
    "memory_internal.fact_terms",
    "memory_internal.entity_name_tokens",
    "memory_internal.ingest_requests",
}


def stores(owner: psycopg.Connection[Any], holds: str | None = None) -> set[str]:
    rows = owner.execute(
        "select store from memory_internal.data_stores() where %s::text is null or holds = %s",
        (holds, holds),
    ).fetchall()
    owner.rollback()
    return {r["store"] for r in rows}


def planted(app: psycopg.Connection[Any]) -> Tenant:
    t = Tenant(app, f"erasure {uuid.uuid4()}")
    fill(t, NAME)
    t.ingest("chat-other", f"{OTHER} drinks tea every morning.")
    t.facts({"subject": OTHER, "predicate": "drinks", "object": "tea"})
    return t


def in_stores(owner: psycopg.Connection[Any], t: Tenant) -> tuple[set[str], set[str]]:
    """The stores holding either part of NAME, and those holding OTHER (its pending
    lexeme counts named as the counts they are folded into: any write may fold them)."""
    first, last = NAME.split()
    f = found(owner, t, first, last, OTHER)
    other = {"memory_internal.episode_term_df" if s == PENDING else s for s in f[OTHER]}
    return f[first] | f[last], other


def test_data_stores_list_every_table(owner: psycopg.Connection[Any]) -> None:
    """Every table of the chronomem schemas is listed once with what it holds; a table
    created without a line there shows up in the catalog query and makes verify_erased
    refuse, naming it (checked inside a transaction that is rolled back)."""
    catalog = (
        "select c.oid::regclass::text as name from pg_class c"
        " join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname = any (%s) and c.relkind in ('r', 'p') and not c.relispartition"
    )
    owner.execute("set local search_path = pg_catalog")  # regclass text schema-qualified
    tables = {r["name"] for r in owner.execute(catalog, (list(SCHEMAS),)).fetchall()}
    listed = owner.execute("select store, holds from memory_internal.data_stores()").fetchall()
    owner.rollback()
    assert len(listed) == len({r["store"] for r in listed}), "a store listed twice"
    assert {r["holds"] for r in listed} == {"content", "settings", "counts"}
    assert tables == {r["store"] for r in listed}
    assert {"memory.episodes", "memory_internal.api_keys"} <= tables  # positive control

    org = owner.execute("select memory.create_org('catalog') as id").fetchone()
    assert org is not None
    owner.execute("select memory.use_org(%s)", (org["id"],))
    assert owner.execute("select * from memory.verify_erased(%s, %s)", (uuid.uuid4(), ["x"]))
    owner.execute("create table memory.unlisted_store (org_id uuid, content text)")
    tables = {r["name"] for r in owner.execute(catalog, (list(SCHEMAS),)).fetchall()}
    assert "memory.unlisted_store" in tables
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="unlisted_store"):
        owner.execute("select * from memory.verify_erased(%s, %s)", (uuid.uuid4(), ["x"]))
    owner.rollback()


def test_project_wipe_leaves_nothing_and_counts_every_store(
    app: psycopg.Connection[Any], owner: psycopg.Connection[Any]
) -> None:
    t = planted(app)
    holding, other = in_stores(owner, t)
    assert holding >= HOLDING, HOLDING - holding  # the positive control
    assert other >= {"memory.episodes", "memory.facts", "memory.entities"}
    assert not holding & stores(owner, "counts")

    receipt = t.wipe()
    assert in_stores(owner, t) == (set(), set())
    assert set(receipt["stores"]) == stores(owner, "content")
    gone = {k for k, v in receipt["stores"].items() if v["deleted"] > 0}
    assert gone >= HOLDING - {"memory.jobs"}, HOLDING - gone
    assert receipt["stores"]["memory.jobs"]["updated"] > 0  # bodies dropped, jobs skipped
    assert receipt["stores"]["memory.episodes"]["deleted"] == receipt["episodes"] == 3
    assert receipt["stores"]["memory.facts"]["deleted"] == receipt["facts"]

    # The audit row: the receipt's counts, nothing of the content.
    owner.execute("select memory.use_org(%s)", (t.org,))
    audit = owner.execute(
        "select a::text as row, counts from memory.audit_log a"
        " where project_id = %s and action = 'wipe'",
        (t.project,),
    ).fetchone()
    owner.rollback()
    assert audit is not None and audit["counts"]["stores"] == receipt["stores"]
    assert "Zephyrine" not in audit["row"] and "Quillfeather" not in audit["row"]


def test_subject_then_session_wipe(
    app: psycopg.Connection[Any], owner: psycopg.Connection[Any]
) -> None:
    """A subject wipe takes the name out of everything but the conversation that
    mentions it (episodes and their postings, the session, its idempotency record: a
    session wipe's scope); the session wipe then takes the rest. OTHER, outside both
    scopes, stays found in its stores throughout."""
    t = planted(app)
    before, other = in_stores(owner, t)
    receipt = t.wipe(subject=NAME)
    after, other_after = in_stores(owner, t)
    conversation = {
        "memory.episodes",
        "memory.sessions",
        "memory_internal.episode_terms",
        "memory_internal.episode_term_df_pending",
        "memory_internal.episode_term_df",
        "memory_internal.ingest_requests",
    }
    assert after and after <= conversation, after - conversation
    assert before - conversation - after  # positive control: the rest held it before
    assert other_after == other
    for store in (
        "memory.entities",
        "memory.entity_aliases",
        "memory.notes",
        "memory.facts",
        "memory.extraction_rejections",
    ):
        assert receipt["stores"][store]["deleted"] > 0, store

    receipt = t.wipe(session=f"chat-{NAME.split()[0]}")
    assert in_stores(owner, t) == (set(), other)
    assert receipt["stores"]["memory.episodes"]["deleted"] == receipt["episodes"] == 2
    assert receipt["stores"]["memory.sessions"]["deleted"] == 1
    assert receipt["stores"]["memory_internal.ingest_requests"]["deleted"] == 1


def test_session_wipe_takes_what_the_session_wrote(
    app: psycopg.Connection[Any], owner: psycopg.Connection[Any]
) -> None:
    """What the worker drew from the session's episodes goes with it (facts, the note);
    facts asserted through the API about the same name, and the entity they name,
    stay until a subject wipe: a session wipe forgets a conversation, not a person."""
    t = planted(app)
    receipt = t.wipe(session=f"chat-{NAME.split()[0]}")
    after, other = in_stores(owner, t)
    assert "memory.episodes" not in after and "memory.notes" not in after
    assert "memory.sessions" not in after and "memory_internal.ingest_requests" not in after
    assert {"memory.facts", "memory.entities"} <= after  # the API's facts stay
    assert "memory.episodes" in other  # positive control: another session stays
    assert receipt["stores"]["memory.notes"]["deleted"] == 1
    assert receipt["stores"]["memory.facts"]["deleted"] == receipt["facts"] == 1


def test_delete_project_leaves_nothing(
    app: psycopg.Connection[Any], owner: psycopg.Connection[Any]
) -> None:
    """verify_erased works once the project row is gone; the receipt covers settings."""
    t = planted(app)
    result = t.one("select memory.delete_project(%s) as r", t.project)
    assert in_stores(owner, t) == (set(), set())
    assert set(result["stores"]) == stores(owner, "content") | stores(owner, "settings")
    assert result["stores"]["memory.webhook_endpoints"]["deleted"] == 1
    assert result["stores"]["memory.projects"]["deleted"] == 1
    assert result["stores"]["memory.episodes"]["deleted"] == 3


def test_verify_erased_is_for_the_owner_only(
    app: psycopg.Connection[Any], analyst_dsn: str, owner: psycopg.Connection[Any]
) -> None:
    t = planted(app)
    assert found(owner, t, OTHER)[OTHER]  # positive control: the owner can
    with psycopg.connect(analyst_dsn) as analyst:
        for conn in (app, analyst):
            denied = pytest.raises(psycopg.errors.InsufficientPrivilege, match="verify_erased")
            with denied, conn.transaction():
                conn.execute("select memory.use_org(%s)", (t.org,))
                conn.execute("select * from memory.verify_erased(%s, %s)", (t.project, [OTHER]))


def test_verify_erased_bad_input(owner: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="org scope"):
        owner.execute("select * from memory.verify_erased(%s, %s)", (uuid.uuid4(), ["x"]))
    owner.rollback()
    org = owner.execute("select memory.create_org('bad input') as id").fetchone()
    assert org is not None
    owner.execute("select memory.use_org(%s)", (org["id"],))
    for strings in ([], ["", "  "], None):
        refused = pytest.raises(psycopg.errors.InvalidParameterValue, match="non-empty string")
        with refused, owner.transaction():
            owner.execute("select * from memory.verify_erased(%s, %s)", (uuid.uuid4(), strings))
    owner.rollback()


class NoEmbedder:
    """The purge handler embeds nothing; build_handlers wants an embedder."""

    name = "none"
    dim = 384

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("the purge job embeds nothing")


def age(owner: psycopg.Connection[Any], t: Tenant, session: str, by: str) -> None:
    """Make a session's episodes look stored `by` ago (the passage of time)."""
    owner.execute("select memory.use_org(%s)", (t.org,))
    owner.execute(
        "update memory.episodes e set created_at = e.created_at - %s::interval"
        " from memory.sessions s where s.org_id = e.org_id and s.session_id = e.session_id"
        " and s.project_id = %s and s.external_id = %s",
        (by, t.project, session),
    )
    owner.commit()


def test_retention_purges_old_episodes_and_what_derives_from_them(
    app: psycopg.Connection[Any], owner: psycopg.Connection[Any], app_dsn: str
) -> None:
    """The periodic purge job (the worker's own handler) erases episodes stored longer
    ago than the project's retention, with the facts the worker drew from them, as a
    wipe of scope expired: receipt, audit row; newer episodes and facts asserted
    otherwise stay, and so does a project without retention (positive controls)."""
    from workers.handlers import build_handlers
    from workers.jobs import Job

    t = planted(app)
    kept = planted(app)  # no retention: the same age, nothing erased
    first = NAME.split()[0]
    for tenant in (t, kept):
        age(owner, tenant, f"chat-{first}", "40 days")
    assert t.one("select memory.purge_expired(%s) as r", t.project) is None  # no retention

    assert t.one("select memory.set_retention(%s, '30 days') as r", t.project) == {
        "project_id": str(t.project),
        "retention_seconds": 30 * 86400,
    }
    purge = build_handlers(None, NoEmbedder(), 0.5)["purge"]
    results = {}
    with psycopg.connect(app_dsn) as worker:  # tuple rows, as the worker's own
        for tenant in (t, kept):
            with worker.transaction():
                worker.execute("select memory.use_org(%s)", (tenant.org,))
                job = Job(tenant.org, 0, None, "purge", {}, 0, 5)
                results[tenant.org] = purge(worker, job)
    assert results[t.org]["episodes_expired"] == {str(t.project): "2"}
    assert results[kept.org]["episodes_expired"] == {}

    after, other = in_stores(owner, t)
    assert not after & {"memory.episodes", "memory.notes", "memory_internal.episode_terms"}
    assert "memory.facts" in after  # the API's facts about the name stay
    assert "memory.episodes" in other  # the newer session stays
    assert "memory.episodes" in in_stores(owner, kept)[0]  # no retention: kept
    owner.execute("select memory.use_org(%s)", (t.org,))
    audit = owner.execute(
        "select actor, counts from memory.audit_log"
        " where project_id = %s and action = 'wipe' and resource = 'expired'",
        (t.project,),
    ).fetchall()
    sessions = owner.execute(
        "select external_id from memory.sessions where project_id = %s order by 1", (t.project,)
    ).fetchall()
    owner.rollback()
    assert len(audit) == 1 and audit[0]["actor"] == "retention"
    assert audit[0]["counts"]["stores"]["memory.episodes"]["deleted"] == 2
    assert audit[0]["counts"]["facts"] == 1  # the worker's fact from the first episode
    # The session whose episodes expired stays: its conversation may go on.
    assert sorted(r["external_id"] for r in sessions) == sorted(["chat-other", f"chat-{first}"])
    # Nothing older is left: the next run erases nothing and writes no audit row.
    assert t.one("select memory.purge_expired(%s) as r", t.project) is None


def test_retention_bad_input(app: psycopg.Connection[Any]) -> None:
    t = Tenant(app, f"retention {uuid.uuid4()}")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="at least 1 hour"):
        t.one("select memory.set_retention(%s, '5 minutes') as r", t.project)
    assert t.one("select memory.set_retention(%s, null) as r", t.project) == {
        "project_id": str(t.project),
        "retention_seconds": None,
    }


@pytest.fixture(scope="module")
def api(app_dsn: str) -> Iterator[str]:
    from api_server import api_server

    with api_server(app_dsn) as url:
        yield url


def test_retention_and_receipt_over_http(api: str, app_dsn: str) -> None:
    """PUT …/retention needs configuration:write (a writing key is refused, a
    configuration key is not); a period under an hour is a 422 naming the field; the
    wipe's answer carries the receipt."""
    import httpx
    from api_server import make_tenant

    from chronomem.client import ChronomemError

    tenant = make_tenant(app_dsn, f"retention http {uuid.uuid4()}")
    writer = tenant.client(api, tenant.key(["project:write"]))
    configurer = tenant.client(api, tenant.key(["configuration:write"]))
    with pytest.raises(ChronomemError) as refused:
        writer.set_retention(tenant.project, 86400)
    assert refused.value.status == 403
    set_ = configurer.set_retention(tenant.project, 30 * 86400)
    assert (set_.project_id, set_.retention_seconds) == (tenant.project, 30 * 86400)
    assert configurer.set_retention(tenant.project, None).retention_seconds is None

    bad = httpx.put(
        f"{api}/v1/projects/{tenant.project}/retention",
        json={"retention_seconds": 60},
        headers={"Authorization": f"Bearer {tenant.token}"},
    )
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "retention_seconds"

    writer.ingest(tenant.project, "s1", [{"role": "user", "content": "Ottoline rows"}])
    wiped = writer.wipe(tenant.project, session="s1")
    assert wiped.stores is not None
    assert wiped.stores["memory.episodes"].deleted == 1
    assert wiped.stores["memory.sessions"].deleted == 1
