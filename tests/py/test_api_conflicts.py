"""The conflict inbox, review and learned cardinality over HTTP against a real `chronomem
serve` process, through the client: a conflict opened by POST facts (two objects at once
for an undeclared predicate), listed, inspected and resolved by keep_both, supersede and
retract, each checked through GET facts at several `as_of` and `known_at`; the review
permission (a writing key is refused, a reviewer's is not); standing in history and
timelines; a rejected fact gone from search beside an identical one (the control); the
conflict policy; suggestions; undoing a predicate change; another org's ids as 404 like
random ones; bad input as 422 naming the field; list_conflicts through the MCP client."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import httpx2
import pytest
from api_server import Tenant, api_server, make_tenant
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from chronomem.client import ChronomemError, Client
from chronomem_client.models import AssertResult

JAN, MAR, MAY = "2024-01-01T00:00:00Z", "2024-03-01T00:00:00Z", "2024-05-01T00:00:00Z"
FEB, APR, JUN = "2024-02-01T00:00:00Z", "2024-04-01T00:00:00Z", "2024-06-01T00:00:00Z"


@pytest.fixture(scope="module")
def base(app_dsn: str) -> Iterator[str]:
    with api_server(app_dsn) as url:
        yield url


@pytest.fixture(scope="module")
def tenant(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "conflicts")


@pytest.fixture(scope="module")
def stranger(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "conflicts stranger")


@pytest.fixture
def api(base: str, tenant: Tenant) -> Iterator[Client]:
    with tenant.client(base) as client:
        yield client


@pytest.fixture
def project(api: Client) -> uuid.UUID:
    return api.create_project(f"c-{uuid.uuid4().hex[:8]}").project_id


def lives(obj: str, valid_from: str, subject: str = "ann") -> dict[str, Any]:
    # "lives in" is declared nowhere: its cardinality is unknown.
    return {"subject": subject, "predicate": "lives in", "object": obj, "valid_from": valid_from}


def inserted(result: AssertResult) -> uuid.UUID:
    outcome = result.results[0]
    assert outcome.status == "inserted" and outcome.fact_id, result
    return outcome.fact_id


def instant() -> datetime:
    """A record-time instant strictly between the writes before and after it."""
    time.sleep(0.02)
    now = datetime.now(UTC)
    time.sleep(0.02)
    return now


def objects(api: Client, project: uuid.UUID, **at: Any) -> list[str]:
    page = api.list_facts(project, subject="ann", predicate="lives in", **at)
    return sorted(f.object for f in page.facts)


def opened(api: Client, project: uuid.UUID) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    """Ann lives in Paris from January and in Rome from March, both open: one conflict.
    Returns (the conflict, Paris's fact, Rome's fact)."""
    paris = api.assert_facts(project, [lives("paris", JAN)])
    assert paris.conflicts is None and paris.held is None  # nothing to disagree with yet
    rome = api.assert_facts(project, [lives("rome", MAR)])
    assert rome.results[0].status == "inserted", rome  # both stand
    assert rome.conflicts and len(rome.conflicts) == 1, rome
    return rome.conflicts[0], inserted(paris), inserted(rome)


def member_of(api: Client, project: uuid.UUID, conflict: uuid.UUID, fact: uuid.UUID) -> uuid.UUID:
    members = api.get_conflict(project, conflict).members
    return next(m.member_id for m in members if m.fact_id == fact)


# -- the inbox ------------------------------------------------------------------------
def test_a_write_opens_one_conflict_that_is_listed_and_inspected(
    api: Client, project: uuid.UUID
) -> None:
    conflict, paris, rome = opened(api, project)
    assert objects(api, project) == ["paris", "rome"]  # both stand while it is open

    listed = api.list_conflicts(project).conflicts
    assert [c.conflict_id for c in listed] == [conflict]
    row = listed[0]
    assert (row.subject, row.predicate, row.status, row.cause, row.members) == (
        "ann",
        "lives in",
        "open",
        "unknown_cardinality",
        2,
    )
    assert row.resolution is None and row.resolved_at is None

    # A third object joins the same set: still one conflict, now of three.
    berlin = api.assert_facts(project, [lives("berlin", MAY)])
    assert berlin.conflicts == [conflict]
    listed = api.list_conflicts(project).conflicts
    assert [(c.conflict_id, c.members) for c in listed] == [(conflict, 3)]

    got = api.get_conflict(project, conflict)
    assert (got.conflict_id, got.status, got.cause) == (conflict, "open", "unknown_cardinality")
    by_fact = {m.fact_id: m for m in got.members}
    assert set(by_fact) == {paris, rome, inserted(berlin)}
    assert by_fact[paris].object == "paris" and by_fact[paris].current
    assert all(m.standing == "unreviewed" and m.outcome is None for m in got.members)
    assert got.events[0].event_type == "opened"

    # Filters: another status, another predicate; a declared predicate opens none.
    assert api.list_conflicts(project, status="resolved").conflicts == []
    assert [c.conflict_id for c in api.list_conflicts(project, status="all").conflicts] == [
        conflict
    ]
    assert api.list_conflicts(project, predicate="likes").conflicts == []
    api.declare_predicate(project, "likes", "many")
    likes = api.assert_facts(
        project,
        [
            {"subject": "ann", "predicate": "likes", "object": "tea"},
            {"subject": "ann", "predicate": "likes", "object": "jazz"},
        ],
    )
    assert likes.inserted == 2 and not likes.conflicts
    assert len(api.list_conflicts(project).conflicts) == 1


def test_pages_of_conflicts(api: Client, project: uuid.UUID) -> None:
    made = []
    for subject in ("ann", "ben", "cat"):
        api.assert_facts(project, [lives("paris", JAN, subject)])
        made.append(api.assert_facts(project, [lives("rome", MAR, subject)]).conflicts)
        time.sleep(0.01)  # distinct opened_at
    newest_first = [c[0] for c in reversed(made) if c]
    first = api.list_conflicts(project, limit=2)
    assert [c.conflict_id for c in first.conflicts] == newest_first[:2]
    assert first.next_before is not None
    rest = api.list_conflicts(project, limit=2, before=first.next_before)
    assert [c.conflict_id for c in rest.conflicts] == newest_first[2:]
    # Conflicts one transaction opened share opened_at: the cursor's id keeps the page
    # boundary between them (opened_at alone would skip the third).
    batch = api.assert_facts(
        project,
        [lives(city, month, subject) for subject in ("dan", "eve", "fay")
         for city, month in (("paris", JAN), ("rome", MAR))],
    )  # fmt: skip
    assert len(batch.conflicts or []) == 3
    seen: list[uuid.UUID] = []
    page = api.list_conflicts(project, limit=2)
    while True:
        seen += [c.conflict_id for c in page.conflicts]
        if page.next_before is None:
            break
        page = api.list_conflicts(
            project, limit=2, before=page.next_before, before_id=page.next_before_id
        )
    assert sorted(seen) == sorted(set(seen)) and set(batch.conflicts or []) <= set(seen)
    assert len(seen) == 6


# -- resolutions ----------------------------------------------------------------------
def test_keep_both(api: Client, project: uuid.UUID) -> None:
    conflict, _paris, _rome = opened(api, project)
    resolved = api.resolve_conflict(project, conflict, "keep_both", reason="two homes")
    assert (resolved.status, resolved.resolution) == ("resolved", "kept")
    assert resolved.closed == [] and resolved.retracted == []
    assert objects(api, project) == ["paris", "rome"]
    assert objects(api, project, as_of=FEB) == ["paris"]
    got = api.get_conflict(project, conflict)
    assert got.status == "resolved" and got.reason == "two homes"
    assert {m.outcome for m in got.members} == {"kept"}
    assert [e.event_type for e in got.events][-1] == "resolved"
    assert api.list_conflicts(project).conflicts == []
    # The predicate is many for Ann now: her next object opens nothing; Ben's still does.
    assert not api.assert_facts(project, [lives("oslo", MAY)]).conflicts
    api.assert_facts(project, [lives("paris", JAN, "ben")])
    assert api.assert_facts(project, [lives("rome", MAR, "ben")]).conflicts


def test_supersede_from_the_winners_start_and_from_an_instant(
    api: Client, project: uuid.UUID
) -> None:
    conflict, paris, rome = opened(api, project)
    before = instant()
    resolved = api.resolve_conflict(
        project, conflict, "supersede", member=member_of(api, project, conflict, rome)
    )
    assert (resolved.status, resolved.resolution) == ("resolved", "superseded")
    assert resolved.closed == [paris]
    # Rome wins from its own start (March): Paris held until then.
    assert objects(api, project, as_of=FEB) == ["paris"]
    assert objects(api, project, as_of=APR) == ["rome"]
    assert objects(api, project) == ["rome"]
    # As the store believed before the resolution: both, in April.
    assert objects(api, project, as_of=APR, known_at=before) == ["paris", "rome"]
    outcomes = {m.fact_id: m.outcome for m in api.get_conflict(project, conflict).members}
    assert outcomes == {paris: "lost", rome: "won"}

    # From an instant: Ben's Rome wins from May, so Paris holds beside it until then.
    other, ben_paris, ben_rome = opened_for(api, project, "ben")
    resolved = api.resolve_conflict(
        project, other, "supersede", member=member_of(api, project, other, ben_rome), at=MAY
    )
    assert resolved.closed == [ben_paris]
    ben = {f.object for f in api.list_facts(project, subject="ben", as_of=FEB).facts}
    assert ben == {"paris"}
    ben = {f.object for f in api.list_facts(project, subject="ben", as_of=APR).facts}
    assert ben == {"paris", "rome"}
    ben = {f.object for f in api.list_facts(project, subject="ben", as_of=JUN).facts}
    assert ben == {"rome"}


def opened_for(
    api: Client, project: uuid.UUID, subject: str
) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    paris = inserted(api.assert_facts(project, [lives("paris", JAN, subject)]))
    rome = api.assert_facts(project, [lives("rome", MAR, subject)])
    assert rome.conflicts
    return rome.conflicts[0], paris, inserted(rome)


def test_retract_one(api: Client, project: uuid.UUID) -> None:
    conflict, _paris, rome = opened(api, project)
    before = instant()
    resolved = api.resolve_conflict(
        project, conflict, "retract", member=member_of(api, project, conflict, rome)
    )
    assert (resolved.resolution, resolved.retracted) == ("retracted", [rome])
    # Rome never held: Paris alone, at every instant.
    for as_of in (FEB, APR, None):
        assert objects(api, project, as_of=as_of) == ["paris"]
    assert objects(api, project, as_of=APR, known_at=before) == ["paris", "rome"]
    events = [e.event_type for e in api.fact_history(project, rome).events]
    assert "retracted" in events
    # Resolved once: a second resolution is refused and changes nothing.
    with pytest.raises(ChronomemError) as err:
        api.resolve_conflict(project, conflict, "keep_both")
    assert (err.value.status, err.value.field) == (409, "conflict_id"), err.value
    assert objects(api, project) == ["paris"]


# -- review and standing --------------------------------------------------------------
def test_review_needs_memory_review_which_a_writer_lacks(
    api: Client, base: str, tenant: Tenant, project: uuid.UUID
) -> None:
    conflict, paris, rome = opened(api, project)
    writer = tenant.key(["project:read", "project:write"], project)
    reviewer = tenant.key(["project:read", "memory:review"], project)
    with Client(base, writer) as w:
        for attempt in (
            lambda: w.review_fact(project, paris, "confirmed"),
            lambda: w.resolve_conflict(project, conflict, "keep_both"),
        ):
            with pytest.raises(ChronomemError) as err:
                attempt()
            assert err.value.status == 403 and "memory:review" in err.value.message
        assert w.list_conflicts(project).conflicts  # control: the writer reads it
    history = api.fact_history(project, paris).events
    assert {e.standing for e in history} == {"unreviewed"}  # the refusal changed nothing

    with Client(base, reviewer) as r:
        before = instant()
        reviewed = r.review_fact(project, paris, "confirmed", reason="checked the lease")
        assert (reviewed.fact_id, reviewed.standing, reviewed.previous) == (
            paris,
            "confirmed",
            "unreviewed",
        )
        assert r.resolve_conflict(project, conflict, "keep_both").status == "resolved"
    assert {e.standing for e in api.fact_history(project, paris).events} == {"confirmed"}
    timeline = {f.fact_id: f.standing for f in api.timeline(project, "ann", "lives in").facts}
    assert timeline == {paris: "confirmed", rome: "unreviewed"}
    # Standing is bitemporal: as the store believed before the review, unreviewed.
    hits = api.search(project, "ann lives in paris", known_at=before, legs=["fact_fulltext"])
    assert {h.id: h.standing for h in hits.results if h.id == paris} == {paris: "unreviewed"}


def test_a_rejected_fact_never_appears_and_a_confirmed_one_ranks_first(
    api: Client, project: uuid.UUID
) -> None:
    same = "Ann drinks green tea every morning before work"
    facts = [
        {"subject": s, "predicate": "drinks", "object": "green tea", "content": same}
        for s in ("ann", "ann smith", "ann jones")
    ]
    first, second, third = (r.fact_id for r in api.assert_facts(project, facts).results)
    assert first and second and third

    def found(**kw: Any) -> list[uuid.UUID]:
        hits = api.search(project, "green tea every morning", legs=["fact_fulltext"], **kw)
        return [h.id for h in hits.results if h.kind == "fact"]

    assert set(found()) == {first, second, third}  # each has every chance to appear
    before = instant()
    assert api.review_fact(project, second, "rejected").standing == "rejected"
    assert set(found()) == {first, third}  # control: its twins still appear
    assert set(found(known_at=before)) == {first, second, third}
    assert second not in [f.fact_id for f in api.list_facts(project).facts]

    # Equal relevance (the same score): the confirmed one ranks above the unreviewed ones.
    tied = api.search(project, "green tea every morning", legs=["fact_fulltext"]).results
    assert len({h.score for h in tied}) == 1, tied
    last = tied[-1].id
    api.review_fact(project, last, "confirmed")
    hits = api.search(project, "green tea every morning", legs=["fact_fulltext"]).results
    assert next((h.id, h.standing) for h in hits) == (last, "confirmed")


# -- policy, suggestions, changes -----------------------------------------------------
def test_conflict_policy_round_trip(
    api: Client, base: str, tenant: Tenant, project: uuid.UUID
) -> None:
    default = api.conflict_policy(project)
    assert default.model_dump() == {
        "contradictions": "close",
        "protect_confirmed": False,
        "learn_cardinality": False,
        "learn_threshold": pytest.approx(0.9),
        "learn_min_evidence": 5,
    }
    changed = api.set_conflict_policy(
        project, contradictions="conflict", protect_confirmed=True, learn_threshold=0.75
    )
    assert (changed.contradictions, changed.protect_confirmed) == ("conflict", True)
    assert changed.learn_threshold == pytest.approx(0.75)
    assert (changed.learn_cardinality, changed.learn_min_evidence) == (False, 5)  # kept
    assert api.conflict_policy(project) == changed
    writer = tenant.key(["project:read", "project:write", "configuration:read"], project)
    with Client(base, writer) as w:
        assert w.conflict_policy(project) == changed
        with pytest.raises(ChronomemError) as err:
            w.set_conflict_policy(project, learn_cardinality=True)
        assert err.value.status == 403
    assert api.conflict_policy(project) == changed


def test_suggestions_a_learned_cardinality_and_its_undoing(api: Client, project: uuid.UUID) -> None:
    # "lives in" moves from one city to the next for three subjects; "speaks" holds two
    # languages at once for three more (each an open conflict).
    facts = []
    for subject in ("ann", "ben", "cat"):
        facts += [{**lives("paris", JAN, subject), "valid_to": MAR}, lives("rome", MAR, subject)]
    for subject in ("dan", "eve", "fay"):
        facts += [
            {"subject": subject, "predicate": "speaks", "object": lang, "valid_from": JAN}
            for lang in ("french", "german")
        ]
    assert len(api.assert_facts(project, facts).conflicts or ()) == 3
    rows = {s.predicate: s for s in api.suggest_cardinality(project).suggestions}
    lived, spoken = rows["lives in"], rows["speaks"]
    assert (lived.declared, lived.subjects, lived.sequential_subjects) == ("unknown", 3, 3)
    assert lived.suggestion is None  # 3 cases, under the default bar of 5
    assert lived.confidence == pytest.approx(1.0)
    assert (spoken.concurrent_subjects, spoken.open, spoken.suggestion) == (3, 3, None)
    api.set_conflict_policy(project, learn_min_evidence=3)
    rows = {s.predicate: s for s in api.suggest_cardinality(project).suggestions}
    assert rows["lives in"].suggestion == "one"
    assert rows["lives in"].evidence["one_votes"] == 3

    # Learning on: Gus's two cities, settled by superseding, make "lives in" one.
    api.set_conflict_policy(project, learn_cardinality=True)
    conflict, _, rome = opened_for(api, project, "gus")
    api.resolve_conflict(
        project, conflict, "supersede", member=member_of(api, project, conflict, rome)
    )
    assert [(p.predicate, p.cardinality) for p in api.list_predicates(project).predicates] == [
        ("lives in", "one")
    ]
    (learned,) = api.predicate_changes(project).changes
    assert (learned.predicate, learned.old_cardinality, learned.new_cardinality) == (
        "lives in",
        "unknown",
        "one",
    )
    assert learned.cause == "learned" and learned.evidence and learned.evidence["subjects"] == 4
    undone = api.undo_predicate_change(project, learned.change_id)
    assert (undone.predicate, undone.cardinality, undone.undoes) == (
        "lives in",
        "unknown",
        learned.change_id,
    )
    assert api.list_predicates(project).predicates == []
    latest = api.predicate_changes(project, limit=1).changes
    assert [(c.cause, c.undoes, c.new_cardinality) for c in latest] == [
        ("undone", learned.change_id, "unknown")
    ]
    # A change that is not the latest of its predicate cannot be undone.
    with pytest.raises(ChronomemError) as err:
        api.undo_predicate_change(project, learned.change_id)
    assert (err.value.status, err.value.field) == (422, "change_id")
    # Declared by hand, and undeclared again with unknown.
    assert api.declare_predicate(project, "speaks", "many").cardinality == "many"
    assert api.list_conflicts(project, predicate="speaks").conflicts == []  # declared_many
    assert api.declare_predicate(project, "speaks", "unknown").cardinality == "unknown"
    assert api.list_predicates(project).predicates == []
    causes = [(c.predicate, c.cause) for c in api.predicate_changes(project).changes]
    assert causes[:2] == [("speaks", "declared"), ("speaks", "declared")]


# -- tenancy and bad input ------------------------------------------------------------
def test_another_orgs_conflict_is_not_found_like_a_random_id(
    api: Client, base: str, stranger: Tenant, project: uuid.UUID
) -> None:
    conflict, paris, _ = opened(api, project)
    theirs = stranger.project
    auth = {"Authorization": f"Bearer {stranger.token}"}
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/v1/projects/{p}/conflicts/{c}", {}),
        ("POST", "/v1/projects/{p}/conflicts/{c}/resolve", {"json": {"resolution": "keep_both"}}),
        ("POST", "/v1/projects/{p}/facts/{f}/review", {"json": {"standing": "confirmed"}}),
    ]
    with httpx.Client(base_url=base, headers=auth, timeout=30) as http:
        for method, path, kw in requests:
            for p in (project, theirs):  # A's project, and A's ids under B's own
                real = http.request(method, path.format(p=p, c=conflict, f=paris), **kw)
                fake = http.request(method, path.format(p=p, c=uuid.uuid4(), f=uuid.uuid4()), **kw)
                assert real.status_code == 404, (method, path, real.text)
                assert masked(real.text) == masked(fake.text), (method, path)
    # Positive control: the owner reads and settles it.
    assert api.get_conflict(project, conflict).status == "open"
    assert api.resolve_conflict(project, conflict, "keep_both").status == "resolved"


UUID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def masked(text: str) -> str:
    """An answer with its ids masked: A's and random ones read the same."""
    return UUID_TEXT.sub("<id>", text)


@pytest.mark.parametrize(
    ("method", "path", "kw", "field"),
    [
        ("GET", "conflicts", {"params": {"status": "closed"}}, "status"),
        ("GET", "conflicts", {"params": {"limit": 0}}, "limit"),
        ("GET", "conflicts", {"params": {"before": "yesterday"}}, "before"),
        ("GET", "conflicts/not-a-uuid", {}, "conflict_id"),
        ("POST", "conflicts/{c}/resolve", {"json": {"resolution": "merge"}}, "resolution"),
        ("POST", "conflicts/{c}/resolve", {"json": {}}, "resolution"),
        (
            "POST",
            "conflicts/{c}/resolve",
            {"json": {"resolution": "supersede", "member_id": "x"}},
            "member_id",
        ),
        (
            "POST",
            "conflicts/{c}/resolve",
            {"json": {"resolution": "supersede", "at": "soon"}},
            "at",
        ),
        (
            "POST",
            "conflicts/{c}/resolve",
            {"json": {"resolution": "keep_both", "winner": "x"}},
            "winner",
        ),
        ("POST", "facts/{f}/review", {"json": {"standing": "approved"}}, "standing"),
        ("POST", "facts/{f}/review", {"json": {"standing": "confirmed", "reason": 3}}, "reason"),
        ("PUT", "conflict-policy", {"json": {"contradictions": "ignore"}}, "contradictions"),
        ("PUT", "conflict-policy", {"json": {"protect_confirmed": "yes"}}, "protect_confirmed"),
        ("PUT", "conflict-policy", {"json": {"learn_threshold": 0.2}}, "learn_threshold"),
        ("PUT", "conflict-policy", {"json": {"learn_min_evidence": 1}}, "learn_min_evidence"),
        ("PUT", "conflict-policy", {"json": {"learn_min_evidence": 2.5}}, "learn_min_evidence"),
        ("GET", "cardinality/changes", {"params": {"limit": 1001}}, "limit"),
        ("POST", "cardinality/changes/abc/undo", {}, "change_id"),
        ("PUT", "predicates/plan", {"json": {"cardinality": "several"}}, "cardinality"),
    ],
)
def test_bad_input_is_422_naming_the_field(
    base: str, tenant: Tenant, method: str, path: str, kw: dict[str, Any], field: str
) -> None:
    url = f"{base}/v1/projects/{tenant.project}/" + path.format(c=uuid.uuid4(), f=uuid.uuid4())
    r = httpx.request(method, url, headers={"Authorization": f"Bearer {tenant.token}"}, **kw)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field, r.text


def test_resolutions_the_database_refuses_are_422(api: Client, project: uuid.UUID) -> None:
    conflict, _paris, _ = opened(api, project)
    for resolution in ("supersede", "retract"):  # each needs a member
        with pytest.raises(ChronomemError) as err:
            api.resolve_conflict(project, conflict, resolution)
        assert err.value.status == 422 and err.value.field == "member_id", err.value
    with pytest.raises(ChronomemError) as err:  # a member of no conflict of this one's
        api.resolve_conflict(project, conflict, "retract", member=uuid.uuid4())
    assert err.value.status in (404, 422), err.value
    assert api.get_conflict(project, conflict).status == "open"  # nothing changed


# -- MCP ------------------------------------------------------------------------------
def test_list_conflicts_through_mcp(
    base: str, api: Client, tenant: Tenant, stranger: Tenant, project: uuid.UUID
) -> None:
    conflict, paris, rome = opened(api, project)
    p = str(project)

    async def tool(token: str, name: str, args: dict[str, Any]) -> tuple[bool, Any]:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            McpClient(streamable_http_client(f"{base}/mcp", http_client=http)) as mcp,
        ):
            result = await mcp.call_tool(name, args)
        text = result.content[0].text  # type: ignore[union-attr]
        return result.is_error, text if result.is_error else json.loads(text)

    async def run() -> None:
        error, listed = await tool(tenant.token, "list_conflicts", {"project_id": p})
        assert not error and [c["conflict_id"] for c in listed["conflicts"]] == [str(conflict)]
        error, got = await tool(
            tenant.token, "get_conflict", {"project_id": p, "conflict_id": str(conflict)}
        )
        assert not error and {m["fact_id"] for m in got["members"]} == {str(paris), str(rome)}
        writer = tenant.key(["project:read", "project:write"], project)
        error, text = await tool(
            writer,
            "resolve_conflict",
            {"project_id": p, "conflict_id": str(conflict), "resolution": "keep_both"},
        )
        assert error and "forbidden" in text and "memory:review" in text
        error, reviewed = await tool(
            tenant.token,
            "review_fact",
            {"project_id": p, "fact_id": str(paris), "standing": "confirmed"},
        )
        assert not error and reviewed["standing"] == "confirmed"
        error, resolved = await tool(
            tenant.token,
            "resolve_conflict",
            {"project_id": p, "conflict_id": str(conflict), "resolution": "keep_both"},
        )
        assert not error and resolved["resolution"] == "kept"
        error, listed = await tool(tenant.token, "list_conflicts", {"project_id": p})
        assert not error and listed["conflicts"] == []
        error, text = await tool(stranger.token, "list_conflicts", {"project_id": p})
        assert error and "not_found" in text

    asyncio.run(run())
