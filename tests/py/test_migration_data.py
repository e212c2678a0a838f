"""Revisions that convert stored rows, run against rows stored at the revision before them.

Each test builds its own database (bootstrapped as `chronomem up` does), migrates it to the
revision before the one under test, stores rows the way that revision's code did, then
migrates to head and reads what became of them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from chronomem.bootstrap import bootstrap
from chronomem.dsn import with_params
from chronomem.migrate import migrate, upgrade

DB = "chronomem_migration_data_test"

# The vocabulary before revision 0023, and since.
TYPES_0005 = ["episode.enriched", "fact.contradicted", "fact.retracted", "fact.superseded",
              "memory.wiped"]  # fmt: skip
TYPES_0023 = sorted([*TYPES_0005, "fact.expired", "fact.restored"])


@pytest.fixture
def server_admin(admin_dsn: str) -> Iterator[str]:
    admin = with_params(admin_dsn, dbname="postgres")
    yield admin
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(DB)))


def at_revision(server_admin: str, revision: str) -> tuple[str, str]:
    """A new database migrated to `revision`: (owner DSN, superuser DSN)."""
    with psycopg.connect(server_admin, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(DB)))
    owner = bootstrap(server_admin, DB)
    upgrade(owner, revision)
    return owner, with_params(server_admin, dbname=DB)


def test_0024_every_type_lists_become_the_wildcard(server_admin: str) -> None:
    owner, admin = at_revision(server_admin, "0023")
    org, project = uuid.uuid4(), uuid.uuid4()
    stored: dict[str, list[str]] = {
        "five": TYPES_0005,  # "no filter" before 0023
        "seven": TYPES_0023,  # "no filter" since
        "narrow": ["fact.retracted", "fact.superseded"],
        "six": sorted([*TYPES_0005, "fact.expired"]),  # chosen one by one: kept
    }
    # The superuser writes past row-level security, as the revision's own code wrote.
    with psycopg.connect(admin) as conn:
        conn.execute("insert into memory.orgs (org_id, name) values (%s, 'o')", (org,))
        conn.execute(
            "insert into memory.projects (org_id, project_id, name) values (%s, %s, 'p')",
            (org, project),
        )
        for name, types in stored.items():
            conn.execute(
                "insert into memory.webhook_endpoints (org_id, project_id, url, event_types) "
                "values (%s, %s, %s, %s)",
                (org, project, f"https://example.com/{name}", types),
            )
    migrate(owner)
    with psycopg.connect(admin) as conn:
        rows: dict[str, Any] = dict(
            conn.execute(
                "select substr(url, 21), event_types from memory.webhook_endpoints"
            ).fetchall()
        )
        assert rows == {
            "five": ["*"],
            "seven": ["*"],
            "narrow": ["fact.retracted", "fact.superseded"],
            "six": stored["six"],
        }
        # The wildcard is the only entry it may be.
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(
                "update memory.webhook_endpoints set event_types = '{*,memory.wiped}' "
                "where url like '%%/narrow'"
            )


def test_0026_fact_embeddings_move_to_their_own_table(server_admin: str) -> None:
    owner, admin = at_revision(server_admin, "0025")
    orgs = {"a": uuid.uuid4(), "b": uuid.uuid4()}
    projects = {"a": uuid.uuid4(), "b": uuid.uuid4()}
    facts = {"a1": uuid.uuid4(), "a2": uuid.uuid4(), "b1": uuid.uuid4()}
    vectors = {"a1": "[" + ",".join(["1"] + ["0"] * 383) + "]",
               "b1": "[" + ",".join(["0", "1"] + ["0"] * 382) + "]"}  # fmt: skip
    # The superuser writes past row-level security and, with the triggers off, without
    # the functions of that revision, as its code stored them: a1 and b1 embedded.
    with psycopg.connect(admin) as conn:
        conn.execute("set session_replication_role = replica")
        for k in orgs:
            conn.execute(
                "insert into memory.orgs (org_id, name) values (%s, %s)", (orgs[k], f"org {k}")
            )
            conn.execute(
                "insert into memory.projects (org_id, project_id, name) values (%s, %s, 'p')",
                (orgs[k], projects[k]),
            )
        for name, fact in facts.items():
            k = name[0]
            subject = conn.execute(
                "insert into memory.entities (org_id, project_id, name, normalized_name) "
                "values (%s, %s, %s, %s) returning entity_id",
                (orgs[k], projects[k], f"s {name}", f"s {name}"),
            ).fetchone()[0]  # type: ignore[index]
            conn.execute(
                "insert into memory.facts (org_id, project_id, fact_id, subject_id, predicate, "
                "predicate_label, object_literal, object_key, identity_object, content, "
                "content_key, source, valid_from, valid_range, recorded_at, range_changed_at, "
                "embedding) "
                "values (%s, %s, %s, %s, 'likes', 'likes', 'tea', 'tea', 'tea', 'likes tea', "
                "'likes tea', 'api', '2020-01-01Z', tstzrange('2020-01-01Z', null), "
                "now() - interval '1 day', now() - interval '1 day', %s::vector)",
                (orgs[k], projects[k], fact, subject, vectors.get(name)),
            )
    migrate(owner)
    with psycopg.connect(admin) as conn:
        moved = conn.execute(
            "select org_id, project_id, fact_id, embedding::text from memory.fact_embeddings"
        ).fetchall()
        assert sorted(moved) == sorted(
            (orgs[n[0]], projects[n[0]], facts[n], vectors[n]) for n in ("a1", "b1")
        )
        assert conn.execute(
            "select count(*) from pg_attribute where attrelid = 'memory.facts'::regclass "
            "and attname = 'embedding' and not attisdropped"
        ).fetchone() == (0,)
        hnsw = conn.execute(
            "select indexrelid::regclass::text from pg_index i join pg_class c "
            "on c.oid = i.indexrelid join pg_am a on a.oid = c.relam "
            "where a.amname = 'hnsw' and i.indrelid in "
            "('memory.facts'::regclass, 'memory.fact_embeddings'::regclass)"
        ).fetchall()
        assert hnsw == [("memory.fact_embeddings_embedding_idx",)]
        # The vector leg finds the moved vector (as the app, in its org) ...
        conn.execute("set role chronomem_app")
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (orgs["a"],))
            found = conn.execute(
                "select fact_id from memory_internal.search_fact_vector(%s, %s::vector, "
                "now(), now(), 5)",
                (projects["a"], vectors["a1"]),
            ).fetchall()
        assert found == [(facts["a1"],)]
        # ... and a wipe takes it away with its fact.
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (orgs["a"],))
            conn.execute("select memory.wipe(%s)", (projects["a"],))
            assert conn.execute("select count(*) from memory.fact_embeddings").fetchone() == (0,)
