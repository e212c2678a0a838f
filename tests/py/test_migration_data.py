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
from psycopg.types.json import Jsonb

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


def test_0035_keys_lose_default_ignorables_without_merging_and_instants_are_bounded(
    server_admin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys stored by the normalisation before 0035 that hold default-ignorable code points
    are re-keyed; where a new key would make two rows one, both keep their keys and a
    NOTICE names them. Stored instants outside years 1..9999 do not fail the migration."""
    owner, admin = at_revision(server_admin, "0034")
    org, project = uuid.uuid4(), uuid.uuid4()
    ent: dict[str, uuid.UUID] = {}
    facts: dict[str, uuid.UUID] = {}
    with psycopg.connect(admin) as conn:
        conn.execute("set session_replication_role = replica")
        conn.execute("insert into memory.orgs (org_id, name) values (%s, 'o')", (org,))
        conn.execute(
            "insert into memory.projects (org_id, project_id, name) values (%s, %s, 'p')",
            (org, project),
        )
        # (label, name, key as the old normalize_text stored it)
        for label, name, key in [
            ("jose", "José Alvarez", "josé alvarez"),
            ("jose_zwj", "José\u200d Alvarez", "josé\u200d alvarez"),  # clashes with jose
            ("zoe", "Zoë\u200b", "zoë\u200b"),  # re-keyed to zoë
            ("ana_shy", "Ana\u00adbel", "ana\u00adbel"),  # these two clash with each other
            ("ana_zw", "Ana\u200bbel", "ana\u200bbel"),
        ]:
            ent[label] = conn.execute(
                "insert into memory.entities (org_id, project_id, name, normalized_name) "
                "values (%s, %s, %s, %s) returning entity_id",
                (org, project, name, key),
            ).fetchone()[0]  # type: ignore[index]
        conn.execute(
            "insert into memory.entity_aliases (org_id, project_id, normalized_alias, alias, "
            "entity_id) values (%s, %s, 'mimi\u2060', 'Mimi\u2060', %s)",
            (org, project, ent["zoe"]),
        )
        for label, subject, predicate, obj, since in [
            ("zoe_lives", "zoe", "lives\u200b in", "lisbon\u00ad", "2020-01-01Z"),
            ("tea", "jose", "likes", "tea", "2020-01-01Z"),
            ("tea_zw", "jose", "likes", "tea\u200b", "2021-01-01Z"),  # would overlap tea
        ]:
            facts[label] = conn.execute(
                "insert into memory.facts (org_id, project_id, subject_id, predicate, "
                "predicate_label, object_literal, object_key, identity_object, content, "
                "content_key, source, valid_from, valid_range) "
                "values (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'api', %s, tstzrange(%s, null)) "
                "returning fact_id",
                (org, project, ent[subject], predicate, predicate, obj, obj, obj,
                 f"{subject} {predicate} {obj}", f"{subject} {predicate} {obj}", since, since),
            ).fetchone()[0]  # type: ignore[index]  # fmt: skip
        # An episode of year 10000 (what '9999-12-31T23:59:59-14:00' was stored as).
        session = conn.execute(
            "insert into memory.sessions (org_id, project_id, external_id) "
            "values (%s, %s, 's') returning session_id",
            (org, project),
        ).fetchone()[0]  # type: ignore[index]
        conn.execute(
            "insert into memory.episodes (org_id, project_id, session_id, seq, role, content, "
            "occurred_at) values (%s, %s, %s, 1, 'user', 'hi', '10000-01-01 09:59:59+00')",
            (org, project, session),
        )

    notices: list[str] = []
    connect = psycopg.connect

    def connect_listening(*args: Any, **kwargs: Any) -> Any:
        conn = connect(*args, **kwargs)
        conn.add_notice_handler(lambda d: notices.append(f"{d.severity}: {d.message_primary}"))
        return conn

    monkeypatch.setattr(psycopg, "connect", connect_listening)
    migrate(owner)
    monkeypatch.undo()

    with psycopg.connect(admin) as conn:
        keys: dict[uuid.UUID, str] = dict(
            conn.execute(
                "select entity_id, normalized_name from memory.entities where project_id = %s",
                (project,),
            ).fetchall()
        )
        assert keys == {
            ent["jose"]: "josé alvarez",
            ent["jose_zwj"]: "josé\u200d alvarez",
            ent["zoe"]: "zoë",
            ent["ana_shy"]: "ana\u00adbel",
            ent["ana_zw"]: "ana\u200bbel",
        }
        assert conn.execute("select normalized_alias from memory.entity_aliases").fetchall() == [
            ("mimi",)
        ]
        stored = {
            r[0]: r[1:]
            for r in conn.execute(
                "select fact_id, predicate, object_key, identity_object, content_key "
                "from memory.facts"
            )
        }
        assert stored[facts["zoe_lives"]] == (
            "lives in", "lisbon", "lisbon", "zoe lives in lisbon"
        )  # fmt: skip
        assert stored[facts["tea"]][:3] == ("likes", "tea", "tea")
        assert stored[facts["tea_zw"]][:3] == ("likes", "tea\u200b", "tea\u200b")
        # The new functions resolve the re-keyed name, and the clashing rows stay apart.
        conn.execute("set role chronomem_app")
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (org,))
            found = conn.execute(
                "select memory.upsert_entity(%s, %s), memory.upsert_entity(%s, %s)",
                (project, "ZOË\u200d", project, "Mimi"),
            ).fetchone()
        assert found == (ent["zoe"], ent["zoe"])
        conn.execute("reset role")
        valid: dict[str, bool] = dict(
            conn.execute(
                "select conname, convalidated from pg_constraint "
                "where conname like '%%_years_check'"
            ).fetchall()
        )
        assert valid == {
            "facts_valid_from_years_check": True,
            "facts_asserted_until_years_check": True,
            "facts_valid_range_years_check": True,
            "episodes_occurred_at_years_check": False,
        }
        # Not validated, the constraint still refuses new rows outside years 1..9999.
        with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
            conn.execute(
                "insert into memory.episodes (org_id, project_id, session_id, seq, role, "
                "content, occurred_at) values (%s, %s, %s, 2, 'user', 'x', '0001-12-31 BC')",
                (org, project, session),
            )
    joined = "\n".join(notices)
    assert f"entity {ent['jose_zwj']}" in joined
    assert f"entity {ent['ana_shy']}" in joined and f"entity {ent['ana_zw']}" in joined
    assert f"entity {ent['jose']}" not in joined and f"entity {ent['zoe']}" not in joined
    assert 'predicate "likes"' in joined and "overlap" in joined
    assert "WARNING" in joined and "episodes_occurred_at_years_check" in joined
    assert f"project {project}: 1 rows" in joined


# Old signatures of a database at 0035 (functions/ of that revision created them in
# memory); 0036 drops them, and functions/ creates them in memory_http and memory_worker.
OLD_0035_FUNCTIONS = (
    "memory.authenticate(text)",
    "memory.authorize(text, text, uuid)",
    "memory.api_permissions()",
    "memory.api_search(uuid, text, vector, vector, timestamptz, timestamptz, integer, text[], "
    "text)",
    "memory.claim_jobs(text, text[], integer, interval)",
    "memory.store_embeddings(text, uuid[], vector[])",
)


def test_0036_a_key_stored_at_0035_authenticates_and_reads_after_the_move(
    server_admin: str,
) -> None:
    """A database at 0035, with its functions in memory, an org, a project, an API key
    and memory stored: after migrating, the key authenticates and authorizes through
    memory_http, the reads of memory and the HTTP layer's writes work, the old
    signatures are gone, and a second migrate changes nothing."""
    owner, admin = at_revision(server_admin, "0035")
    org, project, key = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    secret = bytes(range(32))
    token = f"cmk_{key.hex}_{secret.hex()}"
    with psycopg.connect(owner) as conn:
        # Stand-ins for the old functions at their old signatures (their bodies do not
        # matter: nothing calls them after 0036).
        for sig in OLD_0035_FUNCTIONS:
            name, args = sig.split("(", 1)
            conn.execute(f"create function {name}({args} returns void language sql as 'select'")
            conn.execute(f"grant execute on function {sig} to chronomem_app")
    with psycopg.connect(admin) as conn:
        conn.execute("insert into memory.orgs (org_id, name) values (%s, 'o')", (org,))
        conn.execute(
            "insert into memory.projects (org_id, project_id, name) values (%s, %s, 'p')",
            (org, project),
        )
        conn.execute(
            "insert into memory_internal.api_keys (org_id, project_id, key_id, name, prefix, "
            "secret_hash, permissions, created_by) values (%s, %s, %s, 'k', %s, sha256(%s), "
            "array['project:read', 'project:write'], 'test')",
            (org, project, key, token[:16], secret),
        )
        conn.execute(
            "insert into memory.sessions (org_id, project_id, external_id) values (%s, %s, 'chat')",
            (org, project),
        )
        conn.execute(
            "insert into memory.entities (org_id, project_id, name, normalized_name) "
            "values (%s, %s, 'Alice', 'alice')",
            (org, project),
        )
    migrate(owner)
    with psycopg.connect(admin) as conn:
        for sig in OLD_0035_FUNCTIONS:
            assert conn.execute("select to_regprocedure(%s)", (sig,)).fetchone() == (None,), sig
        # The same calls at their new names exist (positive control for the check above).
        for sig in ("memory_http.authenticate(text)", "memory_worker.claim_jobs(text, text[], "
                    "integer, interval)"):  # fmt: skip
            assert conn.execute("select to_regprocedure(%s) is not null", (sig,)).fetchone() == (
                True,
            )
        conn.execute("set role chronomem_app")
        with conn.transaction():
            row = conn.execute(
                "select org_id, project_id, key_id from memory_http.authenticate(%s)", (token,)
            ).fetchone()
            assert row == (org, project, key)
        with conn.transaction():
            conn.execute("select memory_http.authorize(%s, 'project:read', %s)", (token, project))
            sessions = conn.execute("select memory.list_sessions(%s)", (project,)).fetchone()
            assert [s["session"] for s in sessions[0]["sessions"]] == ["chat"]  # type: ignore[index]
            entities = conn.execute("select memory.list_entities(%s)", (project,)).fetchone()
            assert [e["name"] for e in entities[0]["entities"]] == ["Alice"]  # type: ignore[index]
        with conn.transaction():
            conn.execute("select memory_http.authorize(%s, 'project:write', %s)", (token, project))
            conn.execute(
                "select memory_http.assert_facts(%s, %s)",
                (project, Jsonb([{"subject": "Alice", "predicate": "likes", "object": "tea"}])),
            )
        with conn.transaction():
            conn.execute("select memory_http.authorize(%s, 'project:read', %s)", (token, project))
            facts = conn.execute("select memory.list_facts(%s)", (project,)).fetchone()
            assert [(f["subject"], f["object"]) for f in facts[0]["facts"]] == [  # type: ignore[index]
                ("Alice", "tea")
            ]
        # A wrong secret is refused, as before.
        with conn.transaction():
            bad = token[:-1] + ("0" if token[-1] != "0" else "1")
            assert conn.execute(
                "select key_id from memory_http.authenticate(%s)", (bad,)
            ).fetchone() == (None,)
    migrate(owner)  # idempotent on the migrated database


def test_0046_rejection_counters_keep_their_values_under_a_reason_label(
    server_admin: str,
) -> None:
    owner, admin = at_revision(server_admin, "0045")
    org, project = uuid.uuid4(), uuid.uuid4()
    stored = {
        "extraction_rejected_unknown_predicate": 3,
        "extraction_rejected_low_confidence": 5,
        "redactions_email_total": 2,  # control: another counter keeps its name
    }
    with psycopg.connect(admin) as conn:
        conn.execute("insert into memory.orgs (org_id, name) values (%s, 'o')", (org,))
        conn.execute(
            "insert into memory.projects (org_id, project_id, name) values (%s, %s, 'p')",
            (org, project),
        )
        for shard, (metric, value) in enumerate(stored.items()):
            conn.execute(
                "insert into memory_internal.counters (org_id, project_id, metric, shard, value) "
                "values (%s, %s, %s, %s, %s)",
                (org, project, metric, shard, value),
            )
    migrate(owner)
    with psycopg.connect(admin) as conn:
        rows = dict(
            conn.execute(
                "select metric, sum(value)::bigint from memory_internal.counters "
                "where org_id = %s and project_id = %s group by metric",
                (org, project),
            ).fetchall()
        )
    assert rows == {
        "extraction_rejected:unknown_predicate": 3,
        "extraction_rejected:low_confidence": 5,
        "redactions_email_total": 2,
    }
