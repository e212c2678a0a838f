"""Subject export (a data-subject access request) over a real `chronomem serve`, through
the client: every version of the subject's facts with their windows and events, the
messages that are their sources or name it (and not the others), its entity, aliases and
edges; scoped to the tenant (another org's subject or project is not found); and the CLI,
as the owner, prints the same document."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_server import Tenant, api_server, make_tenant

from chronomem.client import AsyncClient, ChronomemError, Client
from chronomem_client.models import ExportedFact, SubjectExport

T_JAN = "2024-01-01T00:00:00Z"
T_MAR = "2024-03-01T00:00:00Z"


@pytest.fixture(scope="module")
def base(app_dsn: str) -> Iterator[str]:
    with api_server(app_dsn) as url:
        yield url


@pytest.fixture(scope="module")
def tenants(app_dsn: str) -> tuple[Tenant, Tenant]:
    return make_tenant(app_dsn, "export org A"), make_tenant(app_dsn, "export org B")


@pytest.fixture(scope="module")
def world(base: str, tenants: tuple[Tenant, Tenant]) -> dict[str, Any]:
    """Org A's project: Ann's plan pro superseded by enterprise, her home retracted, her
    employer (an edge), Ann likes tea drawn from a message that does not name her, Ben
    knows Ann, the alias Annie and Cat met Annie; messages that name her and one that
    does not. Org B's project: Bob alone."""
    a, b = tenants
    with a.client(base) as api:
        p = a.project
        api.declare_predicate(p, "plan", "one")
        chat = api.ingest(
            p,
            "chat",
            [
                {"role": "user", "content": "Ann's plan is pro", "occurred_at": "2024-01-02Z"},
                {"role": "user", "content": "Joanna likes tea", "occurred_at": "2024-01-03Z"},
                {"role": "assistant", "content": "ANNIE said hi", "occurred_at": "2024-01-04Z"},
            ],
        )
        api.ingest(p, "other", [{"role": "user", "content": "Nothing about anyone here"}])
        tea_episode = chat.episode_ids[1]
        written = api.assert_facts(
            p,
            [
                {"subject": "Ann", "predicate": "plan", "object": "pro", "valid_from": T_JAN},
                {"subject": "Ann", "predicate": "plan", "object": "enterprise",
                 "valid_from": T_MAR},
                {"subject": "Ann", "predicate": "lives in", "object": "Paris", "valid_from": T_JAN},
                {"subject": "Ann", "predicate": "works at", "object": "Acme",
                 "object_type": "entity", "valid_from": T_JAN},
                {"subject": "Ann", "predicate": "likes", "object": "tea",
                 "source_episode_id": str(tea_episode)},
                {"subject": "Ben", "predicate": "knows", "object": "Ann",
                 "object_type": "entity", "valid_from": T_JAN},
                {"subject": "Dan", "predicate": "likes", "object": "Zed", "object_type": "entity"},
                {"subject": "AC/DC", "predicate": "plays", "object": "rock"},
            ],
        )  # fmt: skip
        assert [r.status for r in written.results] == ["inserted"] * 8
        ids = [r.fact_id for r in written.results if r.fact_id is not None]
        api.retract_fact(p, ids[2], "never lived there")
        api.upsert_entity(p, "Ann", aliases=["Annie"])
        api.assert_facts(
            p, [{"subject": "Cat", "predicate": "met", "object": "Annie", "valid_from": T_JAN}]
        )
    with b.client(base) as api:
        api.assert_facts(b.project, [{"subject": "Bob", "predicate": "likes", "object": "tea"}])
    return {"pro": ids[0], "enterprise": ids[1], "paris": ids[2], "tea_episode": tea_episode}


def _fact(export: SubjectExport, content: str) -> ExportedFact:
    (fact,) = [f for f in export.facts if f.content == content]
    return fact


def _contents(document: Any) -> dict[str, Any]:
    """The document as the model reads it (the API writes instants and numbers its own
    way, the CLI as PostgreSQL does), without the instant of the export."""
    return SubjectExport.model_validate(document).model_dump(exclude={"exported_at"})


def test_every_version_with_windows_and_events(
    base: str, tenants: tuple[Tenant, Tenant], world: dict[str, Any]
) -> None:
    a, _ = tenants
    with a.client(base) as api:
        export = api.export_subject(a.project, "Ann")
        assert api.export_subject(a.project, "annie").facts == export.facts  # by an alias
    assert (export.project_id, export.subject) == (a.project, "Ann")
    assert (export.entity.name, export.entity.aliases) == ("Ann", ["Annie"])
    # Every version naming Ann, the closed and the retracted ones too, as subject first;
    # Dan's fact and AC/DC's are not hers.
    assert [f.content for f in export.facts] == [
        "Ann likes tea", "Ann lives in Paris", "Ann plan pro", "Ann plan enterprise",
        "Ann works at Acme", "Ben knows Ann", "Cat met Annie",
    ]  # fmt: skip
    assert [f.named_as for f in export.facts] == ["subject"] * 5 + ["object"] * 2
    pro, enterprise = _fact(export, "Ann plan pro"), _fact(export, "Ann plan enterprise")
    assert (pro.fact_id, pro.status, pro.valid_to) == (world["pro"], "ended", enterprise.valid_from)
    assert (enterprise.status, enterprise.valid_to) == ("current", None)
    assert enterprise.invalid_at is None
    assert [e.event_type for e in pro.events] == ["asserted", "superseded"]
    assert pro.events[1].new_fact_id == enterprise.fact_id
    assert pro.events[1].new_valid_until == enterprise.valid_from
    paris = _fact(export, "Ann lives in Paris")
    assert (paris.fact_id, paris.status) == (world["paris"], "retracted")
    assert paris.invalid_at is not None and paris.invalid_at >= paris.recorded_at
    assert [(e.event_type, e.reason) for e in paris.events] == [
        ("asserted", None), ("retracted", "never lived there")
    ]  # fmt: skip
    assert _fact(export, "Ann likes tea").source_episode_id == world["tea_episode"]
    # Edges touching her: she works at Acme, Ben knows her, Cat met her (by the alias).
    assert sorted((e.source, e.relation, e.target) for e in export.edges) == [
        ("Ann", "works at", "Acme"), ("Ben", "knows", "Ann"), ("Cat", "met", "Ann")
    ]  # fmt: skip


def test_the_messages_that_name_her_or_are_sources(
    base: str, tenants: tuple[Tenant, Tenant], world: dict[str, Any]
) -> None:
    a, _ = tenants
    with a.client(base) as api:
        export = api.export_subject(a.project, "Ann")
    # "Ann's" and "ANNIE" name her as whole words; "Joanna likes tea" does not, but it is
    # the source of one of her facts; "Nothing about anyone here" is neither.
    assert [(m.session, m.seq, m.content, m.is_source, m.mentions) for m in export.episodes] == [
        ("chat", 1, "Ann's plan is pro", False, True),
        ("chat", 2, "Joanna likes tea", True, False),
        ("chat", 3, "ANNIE said hi", False, True),
    ]
    assert export.episodes[1].episode_id == world["tea_episode"]


def test_a_name_that_is_no_path_segment(
    base: str, tenants: tuple[Tenant, Tenant], world: dict[str, Any]
) -> None:
    a, _ = tenants
    with a.client(base) as api:
        export = api.export_subject(a.project, "AC/DC")
    assert [f.content for f in export.facts] == ["AC/DC plays rock"]


def test_scoped_to_the_tenant(
    base: str, tenants: tuple[Tenant, Tenant], world: dict[str, Any]
) -> None:
    a, b = tenants
    with b.client(base) as api:
        # B's own project holds no Ann: not found, while A's key finds A's (above).
        with pytest.raises(ChronomemError) as missing:
            api.export_subject(b.project, "Ann")
        assert (missing.value.status, missing.value.code) == (404, "not_found")
        assert missing.value.message == f'subject "Ann" not found in project {b.project}'
        # Control: B's own subject is there.
        assert [f.content for f in api.export_subject(b.project, "Bob").facts] == ["Bob likes tea"]
        # A's project, with B's key: not found, as on every route.
        with pytest.raises(ChronomemError) as elsewhere:
            api.export_subject(a.project, "Ann")
        assert (elsewhere.value.status, elsewhere.value.code) == (404, "not_found")
        assert "Ann" not in elsewhere.value.message
    # In A's org: a key without project:read is refused; one with it reads.
    with Client(base, a.key(["configuration:read"])) as api:
        with pytest.raises(ChronomemError) as refused:
            api.export_subject(a.project, "Ann")
        assert refused.value.status == 403
    with Client(base, a.key(["project:read"])) as api:
        assert api.export_subject(a.project, "Ann").entity.name == "Ann"


def test_the_cli_prints_the_same_document(
    base: str,
    tenants: tuple[Tenant, Tenant],
    world: dict[str, Any],
    owner_dsn: str,
    tmp_path: Path,
) -> None:
    a, b = tenants
    served = httpx.get(
        f"{base}/v1/projects/{a.project}/subject-export",
        params={"subject": "Ann"},
        headers={"Authorization": f"Bearer {a.token}"},
    )
    assert served.status_code == 200
    # The raw answer is the model's (nothing the model drops or adds).
    document = served.json()
    assert SubjectExport.model_validate(document).model_dump(mode="json") == document

    printed = _cli(owner_dsn, "--project", str(a.project), "--subject", "Ann")
    assert printed.returncode == 0, printed.stderr
    assert _contents(json.loads(printed.stdout)) == _contents(document)
    out = tmp_path / "ann.json"
    written = _cli(owner_dsn, "--project", str(a.project), "--subject", "Ann", "--out", str(out))
    assert written.returncode == 0 and written.stdout == "", written.stderr
    assert _contents(json.loads(out.read_text())) == _contents(document)
    # The owner finds B's project in B's org too (control for the org search).
    bob = _cli(owner_dsn, "--project", str(b.project), "--subject", "Bob")
    assert bob.returncode == 0 and json.loads(bob.stdout)["entity"]["name"] == "Bob"

    unknown = _cli(owner_dsn, "--project", str(uuid.uuid4()), "--subject", "Ann")
    assert unknown.returncode == 1 and "not found in any org" in unknown.stderr
    nobody = _cli(owner_dsn, "--project", str(a.project), "--subject", "Nobody")
    assert nobody.returncode == 1
    assert f'subject "Nobody" not found in project {a.project}' in nobody.stderr


def test_the_async_client_gets_the_same(
    base: str, tenants: tuple[Tenant, Tenant], world: dict[str, Any]
) -> None:
    a, _ = tenants

    async def export() -> SubjectExport:
        async with AsyncClient(base, a.token) as api:
            return await api.export_subject(a.project, "Ann")

    with a.client(base) as api:
        sync = api.export_subject(a.project, "Ann")
    assert asyncio.run(export()).model_dump(exclude={"exported_at"}) == sync.model_dump(
        exclude={"exported_at"}
    )


def _cli(owner_dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("chronomem")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "chronomem"]
    return subprocess.run(
        [*cli, "export-subject", "--dsn", owner_dsn, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
