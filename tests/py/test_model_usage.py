"""Model usage and budgets over HTTP against a real `chronomem serve`, through the client:
calls recorded with memory_worker.record_model_call show in GET .../usage (per job kind
and model, filtered by since/until) and in /metrics as totals; GET/PUT .../model-budget,
its permission (project:manage to set, a reading key is refused) and bad input as 422
naming the field; a reached budget shows in the backlog as enrich paused; another org's
project is a 404. The remote embedder records its requests with the tokens the scripted
endpoint reported; a local embedder records nothing."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import openai
import psycopg
import pytest
from api_server import Tenant, api_server, make_tenant
from nested_plans import nested_plans
from pgvector.psycopg import register_vector
from scripted_openai import ScriptedOpenAI, vector_for

from chronomem.client import ChronomemError, Client
from workers.embedding import OpenAIEmbedder, embed_rows
from workers.plpy import PsycopgPlpy


@pytest.fixture(scope="module")
def base(app_dsn: str) -> Iterator[str]:
    with api_server(app_dsn) as url:
        yield url


@pytest.fixture(scope="module")
def tenant(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "usage")


@pytest.fixture(scope="module")
def stranger(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "usage stranger")


@pytest.fixture
def api(base: str, tenant: Tenant) -> Iterator[Client]:
    with tenant.client(base) as client:
        yield client


@pytest.fixture
def project(api: Client) -> uuid.UUID:
    return api.create_project(f"u-{uuid.uuid4().hex[:8]}").project_id


def record(
    tenant: Tenant,
    project: uuid.UUID,
    *calls: tuple[str, str, int, int, float, str],
    operation: str = "chat",
) -> None:
    """Record (job_kind, model, tokens_in, tokens_out, latency_ms, outcome) calls as the
    worker does: in the org's scope, as the app role."""
    with psycopg.connect(tenant.app_dsn) as conn:
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        for kind, model, tokens_in, tokens_out, latency, outcome in calls:
            conn.execute(
                "select memory_worker.record_model_call("
                "%s, %s, null, null, %s, %s, %s, %s, %s, %s)",
                (project, kind, model, operation, tokens_in, tokens_out, latency, outcome),
            )


def test_usage_per_job_kind_and_model(api: Client, tenant: Tenant, project: uuid.UUID) -> None:
    before = datetime.now(UTC)
    record(
        tenant,
        project,
        ("enrich", "scripted", 120, 30, 40.0, "ok"),
        ("enrich", "scripted", 80, 0, 60.0, "timeout"),
        ("communities", "scripted", 10, 5, 20.0, "ok"),
    )
    usage = api.model_usage(project)
    rows = {(u.job_kind, u.model): u for u in usage.usage}
    assert set(rows) == {("communities", "scripted"), ("enrich", "scripted")}
    enrich = rows[("enrich", "scripted")]
    assert (enrich.calls, enrich.tokens_in, enrich.tokens_out, enrich.errors) == (2, 200, 30, 1)
    assert (enrich.latency_ms_total, enrich.latency_ms_avg) == (100.0, 50.0)
    assert 40.0 <= enrich.latency_ms_p95 <= 60.0 and enrich.operation == "chat"
    # since/until bound the calls; a window after them holds none, one around them all.
    later = datetime.now(UTC) + timedelta(hours=1)
    assert api.model_usage(project, since=later).usage == []
    assert len(api.model_usage(project, since=before, until=later).usage) == 2
    assert api.model_usage(project, until=before).usage == []
    # Control: another project of the org has none of them.
    other = api.create_project(f"u-{uuid.uuid4().hex[:8]}").project_id
    assert api.model_usage(other).usage == []


def test_metrics_show_model_totals(api: Client, tenant: Tenant, project: uuid.UUID) -> None:
    def value(text: str, name: str) -> float:
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
        return float(m.group(1)) if m else 0.0

    tokens_in = 'chronomem_model_tokens_total{direction="in",job_kind="enrich"}'
    tokens_out = 'chronomem_model_tokens_total{direction="out",job_kind="enrich"}'
    calls = 'chronomem_model_calls_total{job_kind="enrich",outcome="rate_limited"}'
    latency = 'chronomem_model_latency_seconds_total{job_kind="enrich"}'
    text = api.metrics()
    start = {n: value(text, n) for n in (tokens_in, tokens_out, calls, latency)}
    record(tenant, project, ("enrich", "m", 7, 3, 500.0, "rate_limited"))
    text = api.metrics()
    assert value(text, tokens_in) - start[tokens_in] == 7
    assert value(text, tokens_out) - start[tokens_out] == 3
    assert value(text, calls) - start[calls] == 1
    assert value(text, latency) - start[latency] == pytest.approx(0.5)
    # Totals across orgs: no org or project id is a label.
    assert str(tenant.org) not in text and str(project) not in text


def test_budget_set_read_and_backlog(api: Client, tenant: Tenant, project: uuid.UUID) -> None:
    none = api.model_budget(project)
    assert (none.tokens, none.period, none.paused) == (None, None, False)
    budget = api.set_model_budget(project, 100, "day")
    assert (budget.tokens, budget.period, budget.used, budget.paused) == (100, "day", 0, False)
    assert budget.period_start is not None and budget.period_end is not None
    assert budget.period_end - budget.period_start == timedelta(days=1)
    assert api.backlog(project).kinds["enrich"].paused is None
    record(tenant, project, ("enrich", "m", 90, 20, 1.0, "ok"))
    budget = api.model_budget(project)
    assert (budget.used, budget.paused) == (110, True)
    assert api.backlog(project).kinds["enrich"].paused == "budget"
    assert api.backlog(project).kinds["embed"].paused is None
    raised = api.set_model_budget(project, 1000, "month")
    assert (raised.period, raised.paused) == ("month", False)
    assert api.backlog(project).kinds["enrich"].paused is None
    removed = api.set_model_budget(project, None)
    assert (removed.tokens, removed.paused) == (None, False)


def test_budget_permission_and_bad_input(
    base: str, api: Client, tenant: Tenant, project: uuid.UUID
) -> None:
    reader = tenant.key(["project:read", "configuration:read"], project)
    with tenant.client(base, reader) as client:
        assert client.model_budget(project).tokens is None
        assert client.model_usage(project).usage == []
        with pytest.raises(ChronomemError) as err:
            client.set_model_budget(project, 10)
        assert err.value.status == 403
    writer = tenant.key(["project:write"], project)
    with tenant.client(base, writer) as client, pytest.raises(ChronomemError) as err:
        client.model_usage(project)
    assert err.value.status == 403
    url = f"{base}/v1/projects/{project}/model-budget"
    headers = {"Authorization": f"Bearer {tenant.token}"}
    for body, field in (
        ({"tokens": -1, "period": "day"}, "tokens"),
        ({"tokens": 10, "period": "week"}, "period"),
        ({"tokens": "many"}, "tokens"),
    ):
        r = httpx.put(url, json=body, headers=headers)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["field"] == field, r.text
    r = httpx.get(f"{base}/v1/projects/{project}/usage?since=yesterday", headers=headers)
    assert r.status_code == 422 and r.json()["error"]["field"] == "since", r.text
    assert api.model_budget(project).tokens is None  # nothing was written


def test_another_org_gets_404(
    base: str, stranger: Tenant, tenant: Tenant, project: uuid.UUID
) -> None:
    record(tenant, project, ("enrich", "m", 1, 1, 1.0, "ok"))
    with stranger.client(base) as client:
        for call in (
            lambda: client.model_usage(project),
            lambda: client.model_budget(project),
            lambda: client.set_model_budget(project, 1),
        ):
            with pytest.raises(ChronomemError) as err:
                call()
            assert err.value.status == 404
        # Control: its own project answers.
        assert client.model_usage(stranger.project).usage == []


class FixedEmbedder:
    """A local embedder (no endpoint, no tokens): what the local models are to embed_rows."""

    name = "local-fixed"
    dim = 384

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [vector_for(t, self.dim) for t in texts]

    def load(self) -> float:
        return 0.0


def test_remote_embeddings_record_usage_local_ones_do_not(
    api: Client, tenant: Tenant, project: uuid.UUID
) -> None:
    api.ingest(project, "s", [{"role": "user", "content": f"message {i}"} for i in range(3)])
    with ScriptedOpenAI(dim=384).running() as server, psycopg.connect(tenant.app_dsn) as conn:
        register_vector(conn)
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        ids = [
            str(r[0])
            for r in conn.execute(
                "select episode_id from memory.episodes where project_id = %s", (project,)
            ).fetchall()
        ]
        assert len(ids) == 3
        plpy = PsycopgPlpy(conn)
        embed_rows(plpy, str(project), "episode", ids, FixedEmbedder())
        assert api_usage_rows(conn, project) == []
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        embedder = OpenAIEmbedder(client, "scripted-embed", 384)
        result = embed_rows(plpy, str(project), "episode", ids, embedder, job_id=42)
        assert result["embedded"] == 3
        rows = api_usage_rows(conn, project)
        conn.commit()
    # One request (three inputs, one batch); the scripted endpoint reports 1 prompt token.
    assert rows == [("embed", "scripted-embed", "embeddings", 1, 1, 0, 0, 42)]
    usage = api.model_usage(project).usage
    assert [(u.job_kind, u.operation, u.calls, u.tokens_in) for u in usage] == [
        ("embed", "embeddings", 1, 1)
    ]


def api_usage_rows(conn: psycopg.Connection[Any], project: uuid.UUID) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in conn.execute(
            "select job_kind, model, operation, 1, tokens_in, tokens_out,"
            " case when outcome = 'ok' then 0 else 1 end, job_id"
            " from memory.model_calls where project_id = %s order by call_id",
            (project,),
        ).fetchall()
    ]


def test_claim_plan_without_paused_projects_has_no_budget_filter(
    admin_dsn: str, tenant: Tenant
) -> None:
    """claim_jobs is the hot path: with no project paused, the budget condition folds
    away (a custom plan), so the read of ready jobs (memory_internal.ready_jobs) plans as
    it did without budgets; with one paused, the filter names the paused projects."""

    def claim_plan(conn: psycopg.Connection[Any]) -> str:
        with nested_plans(conn) as plans:
            conn.execute("select * from memory_worker.claim_jobs('plan-test', array['enrich'], 5)")
        ready = [p for p in plans if "x.status = 'queued'" in p and "limit p_limit" in p]
        assert ready, plans
        # The plan's lines, not the statement's text above them, without index names
        # (memory.jobs' indexes by project are named after the column).
        return re.sub(r"\w+_idx\b", "<index>", ready[0].split("limit p_limit", 1)[1])

    with psycopg.connect(admin_dsn) as conn, conn.transaction(force_rollback=True):
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        project = conn.execute(
            "select memory.create_project(%s, %s)", (tenant.org, f"plan-{uuid.uuid4().hex[:6]}")
        ).fetchone()
        assert project is not None
        conn.execute(
            "insert into memory.jobs (org_id, project_id, kind) select %s, %s, 'enrich'"
            " from generate_series(1, 20)",
            (tenant.org, project[0]),
        )
        conn.execute("delete from memory.model_budgets")  # none paused, in this transaction
        plain = claim_plan(conn)
        assert "project_id" not in plain and "cardinality" not in plain, plain
        conn.execute(
            "insert into memory.model_budgets (org_id, project_id, tokens, period,"
            " paused_period_start) values (%s, %s, 0, 'day',"
            " memory_internal.model_period_start('day', clock_timestamp()))",
            (tenant.org, project[0]),
        )
        paused = claim_plan(conn)
        assert "project_id" in paused, paused
