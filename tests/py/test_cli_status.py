"""`chronomem status`: what an operator asks first (the schema's revision against the
code's, the embedding columns, the queue per kind), as text or JSON; exit 1 when the
schema is behind the code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg

from chronomem.migrate import head_revision


def _status(owner_dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("chronomem")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "chronomem"]
    return subprocess.run(
        [*cli, "status", "--dsn", owner_dsn, *args], capture_output=True, text=True, timeout=60
    )


def test_status_of_a_migrated_database(owner_dsn: str) -> None:
    result = _status(owner_dsn, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["revision"], report["migrated"]) == (head_revision(), True)
    assert report["embedding"]["dim"] == 384 and report["postgresql"]
    kinds = {
        "communities", "deliver_webhook", "embed", "enrich", "purge", "reconcile_edges",
        "summarize_communities",
    }  # fmt: skip
    assert set(report["jobs"]) == kinds
    assert set(report["jobs"]["enrich"]) == {
        "queued", "running", "waiting", "dead", "done", "oldest_queued_s"
    }  # fmt: skip
    text = _status(owner_dsn)
    assert text.returncode == 0, text.stderr
    assert f"schema revision {head_revision()} (current)" in text.stdout
    assert text.stdout.splitlines()[3].split() == [
        "jobs", "queued", "running", "waiting", "dead", "done", "oldest", "queued"
    ]  # fmt: skip


def test_status_says_when_the_schema_is_behind(owner_dsn: str, admin_dsn: str) -> None:
    head = head_revision()
    assert head is not None
    behind = f"{int(head) - 1:04d}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("update public.alembic_version set version_num = %s", (behind,))
        try:
            result = _status(owner_dsn)
        finally:
            conn.execute("update public.alembic_version set version_num = %s", (head,))
    assert result.returncode == 1
    assert f"schema revision {behind} (behind the code's {head}: run `chronomem migrate`)" in (
        result.stdout
    )
