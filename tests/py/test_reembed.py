"""`chronomem reembed`: another dimension, vectors cleared, every row queued again, and
a worker with the old model refused; then back to 384 for the other tests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import psycopg
import pytest
from scripted_openai import ScriptedOpenAI

from workers.embedding import OpenAIEmbedder
from workers.handlers import build_handlers
from workers.main import WorkerConfigError, preflight
from workers.runner import Worker


def _reembed(owner_dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("chronomem")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "chronomem"]
    return subprocess.run(
        [*cli, "reembed", "--dsn", owner_dsn, *args], capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def restore_384(owner_dsn: str) -> Iterator[None]:
    yield
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        conn.execute("select memory.reembed(384)")


def test_reembed_to_8_dimensions(
    owner_dsn: str, app_dsn: str, admin_dsn: str, restore_384: None
) -> None:
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        org = conn.execute("select memory.create_org('reembed')").fetchone()[0]  # type: ignore[index]
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (org,))
            project = conn.execute(  # type: ignore[index]
                "select memory.create_project(%s, 'p')", (org,)
            ).fetchone()[0]
            conn.execute(
                "select memory.ingest(%s, 's', %s::jsonb)",
                (project, json.dumps([{"role": "user", "content": "one"}])),
            )
            conn.execute(
                "select memory.assert_facts(%s, %s::jsonb)",
                (project, json.dumps([{"subject": "ann", "predicate": "likes", "object": "tea"}])),
            )
            stored = conn.execute(  # type: ignore[index]
                "select memory_worker.store_embeddings('fact', array_agg(fact_id), "
                "array_fill(array_fill(0.5, array[384])::vector, array[count(*)::int])) "
                "from memory.facts_at(%s)",
                (project,),
            ).fetchone()[0]
            assert stored == 1  # control: a 384-dimension vector the reembed must clear

    result = _reembed(owner_dsn, "--dim", "8", "--model", "tiny-8")
    assert result.returncode == 0, result.stderr
    with psycopg.connect(app_dsn) as conn:
        conn.execute("select memory.use_org(%s)", (org,))
        assert conn.execute("select count(*) from memory.fact_embeddings").fetchone() == (0,)
    report = json.loads(result.stdout.splitlines()[0])
    assert report["dim"] == 8 and report["model"] == "tiny-8"
    with psycopg.connect(app_dsn) as conn:
        # What a worker's preflight reads: the installation's dimension and model.
        described = conn.execute("select memory.embedding_dim(), memory.embedding_model()")
        assert described.fetchone() == (8, "tiny-8")

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        # Only this test's jobs: the others' orgs were queued too.
        conn.execute(
            "update memory.jobs set status = 'done', locked_by = null, locked_until = null "
            "where org_id <> %s and status in ('queued', 'running', 'waiting')",
            (org,),
        )
        conn.execute("update memory.job_schedules set next_run_at = now() + interval '1 day'")
        queued = conn.execute(
            "select payload ->> 'kind', count(*) from memory.jobs where org_id = %s "
            "and kind = 'embed' and status = 'queued' group by 1 order by 1",
            (org,),
        ).fetchall()
        # One job per kind from the triggers, one more per kind from reembed.
        assert queued == [("entity", 2), ("episode", 2), ("fact", 2)]

    with ScriptedOpenAI(dim=8).running() as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        old = OpenAIEmbedder(client, "scripted-embed", 384)
        with pytest.raises(WorkerConfigError, match="reembed --dim 384"):
            preflight(app_dsn, None, old)
        other = OpenAIEmbedder(client, "other-8", 8)
        with pytest.raises(WorkerConfigError, match="come from tiny-8"):
            preflight(app_dsn, None, other)
        tiny = OpenAIEmbedder(client, "tiny-8", 8)
        preflight(app_dsn, None, tiny)
        handlers = build_handlers(None, tiny, 0.5)
        assert Worker(app_dsn, {"embed": handlers["embed"]}).drain(timeout=30)

    with psycopg.connect(app_dsn) as conn:
        conn.execute("select memory.use_org(%s)", (org,))
        dims = conn.execute(
            "select 'episode', vector_dims(embedding) from memory.episodes union all "
            "select 'entity', vector_dims(embedding) from memory.entities union all "
            "select 'fact', vector_dims(e.embedding) from memory_internal.fact_versions(%s) v "
            "join memory.fact_embeddings e using (org_id, fact_id) "
            "order by 1",
            (project,),
        ).fetchall()
        assert dims == [("entity", 8), ("episode", 8), ("fact", 8)]
    with psycopg.connect(app_dsn) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("select memory.reembed(8)")  # owner only
