"""An entity or alias renamed in place (by an operator's UPDATE: no API renames) is found by
its new name and no longer by its old one: the name-token postings the entity leg
reads follow the UPDATE. Both names are rare words that no other entity has, so a
stale token would put the entity first; the unrenamed entity is the control. (Names
are one word: the leg's word-similarity threshold does not let a surname alone find a
two-word name.)"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest


@pytest.fixture
def people(app_dsn: str) -> Iterator[tuple[psycopg.Connection[Any], uuid.UUID, dict[str, Any]]]:
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        org = conn.execute("select memory.create_org('entity rename')").fetchone()[0]  # type: ignore[index]
        conn.execute("select memory.use_org(%s, false)", (org,))
        project = conn.execute("select memory.create_project(%s, 'p')", (org,)).fetchone()[0]  # type: ignore[index]
        ids = {
            name: conn.execute(
                "select memory.upsert_entity(%s, %s, 'person')", (project, name)
            ).fetchone()[0]  # type: ignore[index]
            for name in ("Okonkwo", "Lindqvist")
        }
        conn.execute("select memory.add_alias(%s, 'Lindqvist', 'Tobbe')", (project,))
        yield conn, project, ids


def _entities(conn: psycopg.Connection[Any], project: uuid.UUID, question: str) -> list[Any]:
    result = conn.execute(
        "select memory.search(%s, %s, null, p_k => 10, p_legs => array['entity'])",
        (project, question),
    ).fetchone()[0]  # type: ignore[index]
    assert not result["degraded"], result["failed_legs"]
    return [uuid.UUID(r["id"]) for r in result["results"] if r["kind"] == "entity"]


def _tokens(admin_dsn: str, project: uuid.UUID) -> tuple[set[Any], set[Any]]:
    """(the entity leg's name-token postings, the words of the current names and
    aliases) of the project, as (token, entity) pairs."""
    with psycopg.connect(admin_dsn) as conn:
        kept = set(
            conn.execute(
                "select token, entity_id from memory_internal.entity_name_tokens "
                "where project_id = %s",
                (project,),
            ).fetchall()
        )
        words = set(
            conn.execute(
                "select distinct w, x.entity_id from ("
                "  select entity_id, normalized_name as n from memory.entities"
                "   where project_id = %s"
                "  union all select entity_id, normalized_alias from memory.entity_aliases"
                "   where project_id = %s) x"
                " cross join lateral unnest(memory_internal.name_tokens(x.n)) w",
                (project, project),
            ).fetchall()
        )
    return kept, words


def _rename(admin_dsn: str, update: str, entity: uuid.UUID) -> None:
    """Run an operator's UPDATE of one entity's row (RLS does not apply to the
    superuser, so it is not silently a no-op)."""
    with psycopg.connect(admin_dsn) as admin:
        assert admin.execute(update, (entity,)).rowcount == 1


def test_renamed_entity_is_found_by_its_new_name_only(people: Any, admin_dsn: str) -> None:
    conn, project, ids = people
    marguerite, tobias = ids["Okonkwo"], ids["Lindqvist"]
    assert _entities(conn, project, "Who is Okonkwo?") == [marguerite]
    assert _entities(conn, project, "Who is Adeyemi?") == []
    kept, words = _tokens(admin_dsn, project)
    assert kept == words and ("okonkwo", marguerite) in kept
    _rename(
        admin_dsn,
        "update memory.entities set name = 'Adeyemi', "
        "normalized_name = memory.normalize_text('Adeyemi') where entity_id = %s",
        marguerite,
    )
    assert _entities(conn, project, "Who is Adeyemi?") == [marguerite]
    assert _entities(conn, project, "Who is Okonkwo?") == []
    kept, words = _tokens(admin_dsn, project)
    assert kept == words and ("adeyemi", marguerite) in kept
    assert ("okonkwo", marguerite) not in kept
    # Control: the entity not renamed is found as before.
    assert _entities(conn, project, "Who is Lindqvist?") == [tobias]


def test_renamed_alias_is_found_by_its_new_name_only(people: Any, admin_dsn: str) -> None:
    conn, project, ids = people
    tobias = ids["Lindqvist"]
    assert _entities(conn, project, "Where is Tobbe?") == [tobias]
    assert ("tobbe", tobias) in _tokens(admin_dsn, project)[0]
    _rename(
        admin_dsn,
        "update memory.entity_aliases set alias = 'Tobster', "
        "normalized_alias = memory.normalize_text('Tobster') where entity_id = %s",
        tobias,
    )
    assert _entities(conn, project, "Where is Tobster?") == [tobias]
    assert _entities(conn, project, "Where is Tobbe?") == []
    kept, words = _tokens(admin_dsn, project)
    assert kept == words and ("tobster", tobias) in kept and ("tobbe", tobias) not in kept
    assert _entities(conn, project, "Who is Lindqvist?") == [tobias]
