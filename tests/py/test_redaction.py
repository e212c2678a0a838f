"""Redaction before storage, over HTTP and through the worker's write-back.

A project's rules round-trip through PUT/GET/DELETE /v1/projects/{id}/redaction-rules
and the client; bad rules are a 422 naming the field. An ingest the policy refuses is a
422 naming the detector and the message (never the value) and stores nothing: the owner's
memory.verify_erased finds the value in no store, where the same ingest into a project
without a policy (the positive control) leaves it in several. A masked ingest stores the
token, reports the counts, and /metrics counts them. The worker's answer
(memory_worker.apply_extraction: entities, aliases, facts, notes) is redacted before it is
stored. Another org can neither read nor set the rules (404), where the owner's key can.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from api_server import Tenant, api_server, make_tenant
from psycopg.types.json import Jsonb

from chronomem.client import ChronomemError, Client


@pytest.fixture(scope="module")
def base(app_dsn: str) -> Iterator[str]:
    with api_server(app_dsn) as url:
        yield url


@pytest.fixture(scope="module")
def tenant(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "redaction A")


@pytest.fixture(scope="module")
def other(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "redaction B")


@pytest.fixture
def api(base: str, tenant: Tenant) -> Iterator[Client]:
    with tenant.client(base) as client:
        yield client


@pytest.fixture
def project(api: Client) -> uuid.UUID:
    return api.create_project(f"r-{uuid.uuid4().hex[:8]}").project_id


def residue(owner_dsn: str, org: uuid.UUID, project: uuid.UUID, strings: list[str]) -> set[str]:
    """The stores where a row of the project holds one of the strings (as the owner)."""
    with psycopg.connect(owner_dsn) as conn:
        conn.execute("select memory.use_org(%s)", (org,))
        rows = conn.execute(
            "select store from memory.verify_erased(%s, %s)", (project, strings)
        ).fetchall()
    return {r[0] for r in rows}


def test_rules_round_trip(api: Client, project: uuid.UUID) -> None:
    rule = api.set_redaction_rule(project, "email", "hash")
    assert (rule.detector, rule.action, rule.pattern) == ("email", "hash", None)
    api.set_redaction_rule(project, "custom:ticket", "mask", r"TCK-[0-9]{6}")
    api.set_redaction_rule(project, "email", "mask")  # replaces the first
    rules = api.list_redaction_rules(project).rules
    assert [(r.detector, r.action, r.pattern) for r in rules] == [
        ("email", "mask", None),
        ("custom:ticket", "mask", "TCK-[0-9]{6}"),
    ]
    deleted = api.delete_redaction_rule(project, "custom:ticket")
    assert deleted.deleted and deleted.detector == "custom:ticket"
    assert not api.delete_redaction_rule(project, "custom:ticket").deleted
    assert [r.detector for r in api.list_redaction_rules(project).rules] == ["email"]


@pytest.mark.parametrize(
    ("detector", "action", "pattern", "field"),
    [
        ("passport", "mask", None, "detector"),
        ("email", "scramble", None, "action"),
        ("custom:ticket", "mask", "TCK-([0-9]", "pattern"),
        ("custom:ticket", "mask", None, "pattern"),
        ("email", "mask", ".+@.+", "pattern"),
    ],
)
def test_bad_rules_are_refused_naming_the_field(
    api: Client, project: uuid.UUID, detector: str, action: str, pattern: str | None, field: str
) -> None:
    with pytest.raises(ChronomemError) as err:
        api.set_redaction_rule(project, detector, action, pattern)
    assert (err.value.status, err.value.field) == (422, field)
    assert api.list_redaction_rules(project).rules == []


def test_a_refused_ingest_stores_nothing(
    api: Client, tenant: Tenant, owner_dsn: str, project: uuid.UUID
) -> None:
    secret = "123-45-6789"
    marker = f"Zebulon{uuid.uuid4().hex[:6]}"
    messages = [
        {"role": "user", "content": f"{marker} says hello"},
        {"role": "user", "content": f"{marker}'s ssn is {secret}"},
    ]
    api.set_redaction_rule(project, "ssn", "refuse")
    with pytest.raises(ChronomemError) as err:
        api.ingest(project, "s1", messages)
    assert err.value.status == 422
    assert "ssn" in err.value.message and "message 1" in err.value.message
    assert secret not in err.value.message and marker not in err.value.message
    assert residue(owner_dsn, tenant.org, project, [secret, marker]) == set()
    assert api.sessions(project).sessions == []

    # Positive control: a project without a policy keeps both in several stores.
    control = api.create_project(f"control-{uuid.uuid4().hex[:8]}").project_id
    api.ingest(control, "s1", messages)
    found = residue(owner_dsn, tenant.org, control, [secret, marker])
    assert {"memory.episodes", "memory_internal.episode_terms"} <= found


def test_a_masked_ingest_is_counted_per_message_and_in_metrics(
    api: Client, tenant: Tenant, owner_dsn: str, project: uuid.UUID
) -> None:
    address = f"ada.{uuid.uuid4().hex[:6]}@example.com"
    api.set_redaction_rule(project, "email", "mask")
    api.set_redaction_rule(project, "card", "drop")
    result = api.ingest(
        project,
        "s1",
        [
            {"role": "user", "content": f"write to {address}", "metadata": {"from": address}},
            {"role": "user", "content": "card 4111 1111 1111 1111"},
            {"role": "user", "content": "near miss 4111 1111 1111 1112"},
        ],
    )
    assert result.dropped == [1] and len(result.episode_ids) == 2
    assert result.redactions == {"email": 2, "card": 1}
    page = api.session_messages(project, "s1")
    assert [m.content for m in page.messages] == [
        "write to [EMAIL]",
        "near miss 4111 1111 1111 1112",
    ]
    assert residue(owner_dsn, tenant.org, project, [address]) == set()
    rows = tenant.rows(
        "select redactions from memory.episodes where project_id = %s order by seq", (project,)
    )
    assert [r["redactions"] for r in rows] == [{"email": 2}, None]

    text = api.metrics()

    def value(name: str) -> float:
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
        assert m, f"{name} missing from /metrics"
        return float(m.group(1))

    assert value("chronomem_redactions_email_total") >= 2
    assert value("chronomem_redactions_card_total") >= 1


def test_hashed_values_match_themselves_across_messages(api: Client, project: uuid.UUID) -> None:
    api.set_redaction_rule(project, "email", "hash")
    api.ingest(project, "s1", [{"role": "user", "content": "I am ada@example.com"}])
    api.ingest(project, "s2", [{"role": "user", "content": "Ada@Example.com, cc bob@example.com"}])
    first = api.session_messages(project, "s1").messages[0].content
    second = api.session_messages(project, "s2").messages[0].content
    token = re.fullmatch(r"I am (\[EMAIL:[0-9a-f]{12}\])", first)
    assert token, first
    assert second.startswith(token.group(1) + ", cc [EMAIL:")
    assert not second.endswith(token.group(1))


def test_session_ids_and_metadata_are_redacted(
    api: Client, tenant: Tenant, owner_dsn: str, project: uuid.UUID
) -> None:
    """A session's id and metadata are stored too: a hashed address in the id still
    names one session (the same address writes to it again), the metadata's address
    is masked, and a drop rule matching a session id refuses the ingest (a session
    cannot be left out) with nothing stored."""
    address = f"eve.{uuid.uuid4().hex[:6]}@example.com"
    api.set_redaction_rule(project, "email", "hash")
    api.set_redaction_rule(project, "phone", "mask")
    message = [{"role": "user", "content": "hello"}]
    api.ingest(project, f"chat {address}", message, session_metadata={"phone": "+44 20 7946 0958"})
    api.ingest(project, f"chat {address.upper()}", [{"role": "user", "content": "again"}])
    sessions = api.sessions(project).sessions
    assert len(sessions) == 1 and re.fullmatch(r"chat \[EMAIL:[0-9a-f]{12}\]", sessions[0].session)
    assert sessions[0].last_seq == 2
    rows = tenant.rows("select metadata from memory.sessions where project_id = %s", (project,))
    assert rows == [{"metadata": {"phone": "[PHONE]"}}]
    # The number as sent and as digits: a 4-digit probe also matches ids and hashes
    # (every row holds the org's and project's UUIDs), and so fails by chance.
    assert residue(owner_dsn, tenant.org, project, [address, "7946 0958", "2079460958"]) == set()

    api.set_redaction_rule(project, "email", "drop")
    with pytest.raises(ChronomemError) as err:
        api.ingest(project, f"chat {address}", message)
    assert err.value.status == 422 and "session" in err.value.message
    assert address not in err.value.message
    assert len(api.sessions(project).sessions) == 1  # nothing new stored
    # Positive control: the same id is stored as written where no rule applies.
    control = api.create_project(f"control-{uuid.uuid4().hex[:8]}").project_id
    api.ingest(control, f"chat {address}", message)
    assert api.sessions(control).sessions[0].session == f"chat {address}"


def test_worker_output_is_redacted(
    api: Client, tenant: Tenant, owner_dsn: str, project: uuid.UUID
) -> None:
    api.set_redaction_rule(project, "email", "mask")
    api.set_redaction_rule(project, "phone", "hash")
    episode = api.ingest(project, "s1", [{"role": "user", "content": "hello"}]).episode_ids[0]
    payload: dict[str, Any] = {
        "entities": [
            {
                "name": "quux.wexler@plughmail.net",
                "summary": "call +1 (555) 010-4477",
                "aliases": ["Carol K zorblat@plughmail.net"],
            }
        ],
        "facts": [
            {
                "subject": "Carol",
                "predicate": "phone",
                "object": "+1 (555) 010-4477",
                "content": "Carol's number is +1 (555) 010-4477",
                "confidence": 0.9,
            }
        ],
        "notes": [{"kind": "preference", "content": "prefers mail to quux.wexler@plughmail.net"}],
    }

    def apply(episode: uuid.UUID) -> dict[str, Any]:
        report: dict[str, Any] = tenant.rows(
            "select memory_worker.apply_extraction(%s, %s::jsonb) as r", (episode, Jsonb(payload))
        )[0]["r"]
        assert report["failed_sections"] == [], report
        assert report["facts"]["inserted"] == 1
        return report

    apply(episode)
    strings = ["quux.wexler@plughmail.net", "zorblat@plughmail.net", "plughmail", "010-4477"]
    assert residue(owner_dsn, tenant.org, project, strings) == set()
    # Positive control: without a policy the same answer leaves them in its stores.
    control = api.create_project(f"control-{uuid.uuid4().hex[:8]}").project_id
    apply(api.ingest(control, "s1", [{"role": "user", "content": "hello"}]).episode_ids[0])
    found = residue(owner_dsn, tenant.org, control, strings)
    assert {"memory.entities", "memory.entity_aliases", "memory.facts", "memory.notes"} <= found
    facts = api.list_facts(project).facts
    assert len(facts) == 1
    assert re.fullmatch(r"\[PHONE:[0-9a-f]{12}\]", facts[0].object)


def test_another_org_cannot_read_or_set_the_rules(
    base: str, api: Client, other: Tenant, project: uuid.UUID
) -> None:
    api.set_redaction_rule(project, "email", "refuse")
    with other.client(base) as intruder:
        for attempt in (
            lambda: intruder.list_redaction_rules(project),
            lambda: intruder.set_redaction_rule(project, "email", "mask"),
            lambda: intruder.delete_redaction_rule(project, "email"),
        ):
            with pytest.raises(ChronomemError) as err:
                attempt()
            assert err.value.status == 404
    # Control: the owner's key reads them, unchanged.
    assert [(r.detector, r.action) for r in api.list_redaction_rules(project).rules] == [
        ("email", "refuse")
    ]
