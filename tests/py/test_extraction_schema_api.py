"""Extraction schemas, episode enrichment and rejections over HTTP against a real
`chronomem serve` process, through the client: a schema stored, versioned and read back,
its cardinalities declared on the project; every invalid document a 422 naming its path;
an episode's labels, fields and rejections after the worker's answer is applied (through
SQL, as the worker does); the rejections page by reason and cursor; search and context
filtered by labels and fields beside the unfiltered control; the permissions each route
needs; the rejection counters in /metrics; and another org's project as 404 like a
random one."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from api_server import Tenant, api_server, make_tenant
from psycopg.types.json import Jsonb

from chronomem.client import ChronomemError, Client

SCHEMA: dict[str, Any] = {
    "entity_types": [{"name": "person"}, {"name": "company"}],
    "predicates": [
        {"name": "works_at", "description": "Employer", "cardinality": "one",
         "object_type": "entity"},
        {"name": "born_on", "object_type": "date"},
    ],
    "labels": [{"name": "billing"}, {"name": "support"}],
    "fields": {"type": "object", "properties": {"priority": {"type": "integer"}}},
    "allow_other_predicates": False,
}  # fmt: skip


@pytest.fixture(scope="module")
def base(app_dsn: str) -> Iterator[str]:
    with api_server(app_dsn) as url:
        yield url


@pytest.fixture(scope="module")
def tenant(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "extraction schema")


@pytest.fixture
def api(base: str, tenant: Tenant) -> Iterator[Client]:
    with tenant.client(base) as client:
        yield client


@pytest.fixture
def project(api: Client) -> uuid.UUID:
    return api.create_project(f"x-{uuid.uuid4().hex[:8]}").project_id


def apply(tenant: Tenant, episode: uuid.UUID, payload: dict[str, Any]) -> dict[str, Any]:
    """The worker's step: memory_worker.apply_extraction as the app role in the org."""
    with psycopg.connect(tenant.app_dsn) as conn:
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        row = conn.execute(
            "select memory_worker.apply_extraction(%s, %s, 0.5, 6, %s)",
            (episode, Jsonb(payload), Jsonb({"prompt_hash": "f00d", "model": "tiny"})),
        ).fetchone()
    assert row is not None
    report: dict[str, Any] = row[0]
    return report


def test_schema_round_trip(api: Client, project: uuid.UUID) -> None:
    with pytest.raises(ChronomemError) as err:
        api.extraction_schema(project)
    assert err.value.status == 404

    first = api.set_extraction_schema(project, SCHEMA)
    assert (first.version, first.created) == (1, True)
    assert first.document.allow_other_entity_types is True  # the default, filled in
    assert [p.name for p in first.document.predicates] == ["works_at", "born_on"]
    again = api.set_extraction_schema(project, SCHEMA)
    assert (again.version, again.created) == (1, False)  # the same document: no version
    # What the schema declares one is the project's cardinality.
    assert [(p.predicate, p.cardinality) for p in api.list_predicates(project).predicates] == [
        ("works at", "one")
    ]

    second = api.set_extraction_schema(project, {**SCHEMA, "labels": []})
    assert second.version == 2
    assert api.extraction_schema(project).version == 2
    assert api.extraction_schema(project, version=1).document == first.document
    assert [v.version for v in api.extraction_schema_versions(project).versions] == [2, 1]
    assert api.extraction_schema_versions(project).versions[1].document_hash == (
        first.document_hash
    )


@pytest.mark.parametrize(
    ("document", "field", "message"),
    [
        ({"predicates": [{"name": "a"}, {"name": "b", "cardinality": "x"}]},
         "predicates[1].cardinality", "must be one or many"),
        ({"predicates": [{"name": "a", "object_type": "time"}]},
         "predicates[0].object_type", "entity, literal, date or number"),
        ({"entity_types": [{"name": "Bad Name"}]}, "entity_types[0].name", "snake_case"),
        ({"labels": [{"name": "a"}, {"name": "a"}]}, "labels[1].name", "declared twice"),
        ({"labels": [{"name": "a", "colour": "red"}]}, "labels[0].colour", "not a known key"),
        ({"fields": {"type": "string"}}, "fields", "of type object"),
        ({"fields": {"type": "object", "properties": {"p": {"type": "date"}}}},
         "fields.properties.p.type", "JSON Schema type"),
        ({"fields": {"type": "object", "required": ["q"]}}, "fields.required", "names of"),
        ({"allow_other_predicates": "yes"}, "allow_other_predicates", "true or false"),
        ({"predicate": []}, "predicate", "not a key of an extraction schema"),
    ],
)  # fmt: skip
def test_invalid_documents_are_422_naming_the_path(
    base: str, tenant: Tenant, project: uuid.UUID, document: Any, field: str, message: str
) -> None:
    response = httpx.put(
        f"{base}/v1/projects/{project}/extraction-schema",
        json=document,
        headers={"Authorization": f"Bearer {tenant.token}"},
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field and message in error["message"], error
    # Nothing was stored (the positive control: a valid document is).
    versions = httpx.get(
        f"{base}/v1/projects/{project}/extraction-schema/versions",
        headers={"Authorization": f"Bearer {tenant.token}"},
    )
    assert versions.json() == {"versions": []}


def test_a_body_that_is_not_an_object_is_422(base: str, tenant: Tenant, project: uuid.UUID) -> None:
    response = httpx.put(
        f"{base}/v1/projects/{project}/extraction-schema",
        json=[1],
        headers={"Authorization": f"Bearer {tenant.token}"},
    )
    assert response.status_code == 422, response.text


def test_enrichment_rejections_and_filters(
    api: Client, tenant: Tenant, project: uuid.UUID, base: str
) -> None:
    api.set_extraction_schema(project, SCHEMA)
    billing = api.ingest(
        project, "chat", [{"role": "user", "content": "Ann from Acme asks about her invoice."}]
    ).episode_ids[0]
    other = api.ingest(
        project, "desk", [{"role": "user", "content": "Bo has a question about an invoice."}]
    ).episode_ids[0]
    report = apply(
        tenant,
        billing,
        {
            "entities": [{"name": "Ann", "type": "person"}, {"name": "Rex", "type": "dog"}],
            "facts": [
                {"subject": "Ann", "predicate": "works_at", "object": "Acme", "confidence": 0.9},
                {"subject": "Ann", "predicate": "likes", "object": "tea"},
                {"subject": "Ann", "predicate": "born_on", "object": "last week"},
                {"subject": "Ann", "predicate": "born_on", "object": "1990-05-01",
                 "confidence": 0.2},
            ],
            "classification": ["billing", "sales"],
            "fields": {"priority": 1},
        },
    )  # fmt: skip
    assert report["failed_sections"] == [] and report["facts"]["inserted"] == 1
    assert report["rejected"] == {
        "low_confidence": 1,
        "schema_violation": 2,
        "unknown_predicate": 1,
    }
    apply(tenant, other, {"classification": ["support"], "fields": {"priority": 3}})

    got = api.episode_extraction(project, billing)
    assert (got.extracted, got.labels, got.fields) == (True, ["billing"], {"priority": 1})
    assert (got.schema_version, got.prompt_hash, got.model, got.calls) == (1, "f00d", "tiny", 1)
    assert sorted((r.section, r.reason) for r in got.rejections) == [
        ("classification", "schema_violation"),
        ("facts", "low_confidence"),
        ("facts", "schema_violation"),
        ("facts", "unknown_predicate"),
    ]  # the entity of an undeclared type is allowed: allow_other_entity_types
    never = api.ingest(project, "chat", [{"role": "user", "content": "hi"}]).episode_ids[0]
    assert api.episode_extraction(project, never).extracted is False
    with pytest.raises(ChronomemError) as err:
        api.episode_extraction(project, uuid.uuid4())
    assert err.value.status == 404

    # The page: by reason, and by cursor.
    page = api.extraction_rejections(project, reason="schema_violation")
    assert {r.reason for r in page.rejections} == {"schema_violation"}
    assert len(page.rejections) == 2 and page.next_cursor is None  # a fact and a label
    first = api.extraction_rejections(project, limit=2)
    assert len(first.rejections) == 2 and first.next_cursor is not None
    rest = api.extraction_rejections(project, limit=2, cursor=first.next_cursor)
    assert len(rest.rejections) == 2
    assert {r.rejection_id for r in first.rejections}.isdisjoint(
        r.rejection_id for r in rest.rejections
    )
    for params, field in (({"reason": "bogus"}, "reason"), ({"limit": 0}, "limit")):
        response = httpx.get(
            f"{base}/v1/projects/{project}/extraction-rejections",
            params=params,
            headers={"Authorization": f"Bearer {tenant.token}"},
        )
        assert response.status_code == 422 and response.json()["error"]["field"] == field

    # Search and context: the labels (all of them) and the fields filter episodes and the
    # facts drawn from them; unfiltered, both episodes come back (the control).
    legs = ["episode_fulltext", "fact_fulltext"]
    every = api.search(project, "invoice Acme", legs=legs)
    assert {h.id for h in every.results} >= {billing, other}
    only = api.search(project, "invoice Acme", legs=legs, labels=["billing"])
    assert {(h.kind, h.id) for h in only.results if h.kind == "episode"} == {("episode", billing)}
    assert [h.predicate for h in only.results if h.kind == "fact"] == ["works_at"]
    assert api.search(project, "invoice", legs=legs, labels=["billing", "support"]).results == []
    by_field = api.search(project, "invoice", legs=legs, fields={"priority": 3})
    assert [h.id for h in by_field.results] == [other]
    context = api.context(project, "invoice", labels=["support"])
    assert [e.id for e in context.episodes] == [other]

    # One series per reason under one name (all orgs together), not a name per reason.
    metrics = httpx.get(f"{base}/metrics").text
    found = re.search(
        r'^chronomem_extraction_rejected_total\{reason="unknown_predicate"\} (\S+)$',
        metrics,
        re.MULTILINE,
    )
    assert found and float(found.group(1)) >= 1, metrics
    assert "chronomem_extraction_rejected_unknown_predicate" not in metrics


def test_permissions(base: str, tenant: Tenant, api: Client, project: uuid.UUID) -> None:
    api.set_extraction_schema(project, SCHEMA)
    reader = tenant.key(["project:read"], project)
    configurer = tenant.key(["configuration:read"], project)
    with Client(base, reader) as c:
        for call in (
            lambda: c.extraction_schema(project),
            lambda: c.set_extraction_schema(project, SCHEMA),
        ):
            with pytest.raises(ChronomemError) as err:
                call()
            assert err.value.status == 403
        assert c.extraction_rejections(project).rejections == []  # project:read suffices
    with Client(base, configurer) as c:
        assert c.extraction_schema(project).version == 1
        with pytest.raises(ChronomemError) as err:
            c.set_extraction_schema(project, {"labels": []})
        assert err.value.status == 403


def test_another_orgs_project_is_not_found(
    base: str, app_dsn: str, api: Client, project: uuid.UUID
) -> None:
    api.set_extraction_schema(project, SCHEMA)
    stranger = make_tenant(app_dsn, "extraction stranger")
    with Client(base, stranger.token) as c:
        answers = []
        for target in (project, uuid.uuid4()):
            with pytest.raises(ChronomemError) as err:
                c.extraction_schema(target)
            answers.append((err.value.status, err.value.message.replace(str(target), "<p>")))
        assert answers[0] == answers[1] and answers[0][0] == 404
