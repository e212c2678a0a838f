"""Writes that meet a project being deleted: a writer that waited for the project's
lock while memory.delete_project held it finds the project gone (not found, an API
404), never a foreign key's refusal of a row it wrote (which the API would answer with
a 500), nor a wipe or deletion of nothing audited as if it had happened. Every taker of
the project lock looks the project up again once it holds it
(memory_internal.hold_project; test_lint_sql checks that no function takes the lock
otherwise). A foreign key's refusal that still happens (a write by hand) is 409
conflict in the API (thin_api/errors.py)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from org_scope import one_in

from thin_api.errors import from_db_error

FACT = json.dumps(
    [{"subject": "Ann", "predicate": "knows", "object": "Ben", "object_type": "entity"}]
)


def _nothing(conn: psycopg.Connection[Any], org: uuid.UUID, project: uuid.UUID) -> tuple[Any, ...]:
    return ()


def _ann(conn: psycopg.Connection[Any], org: uuid.UUID, project: uuid.UUID) -> tuple[Any, ...]:
    one_in(conn, org, "select memory.upsert_entity(%s, 'Ann')", (project,))
    return ()


def _entities(conn: psycopg.Connection[Any], org: uuid.UUID, project: uuid.UUID) -> tuple[Any, ...]:
    """Ann (also called Annie) and Ben, for a merge or a split."""
    one_in(conn, org, "select memory.upsert_entity(%s, 'Ben')", (project,))
    one_in(conn, org, "select memory.upsert_entity(%s, 'Ann')", (project,))
    one_in(conn, org, "select memory.add_alias(%s, 'Ann', 'Annie')", (project,))
    return ()


def _a_fact(conn: psycopg.Connection[Any], org: uuid.UUID, project: uuid.UUID) -> tuple[Any, ...]:
    out = one_in(conn, org, "select memory.assert_facts(%s, %s::jsonb)", (project, FACT))
    return (out["results"][0]["fact_id"],)


# name: (query taking the project and then the setup's values, setup)
Setup = Callable[[psycopg.Connection[Any], uuid.UUID, uuid.UUID], tuple[Any, ...]]
WRITES: dict[str, tuple[str, Setup]] = {
    "assert_facts": ("select memory.assert_facts(%s, %s::jsonb)", lambda *_: (FACT,)),
    "ingest": (
        "select memory.ingest(%s, 'chat', %s::jsonb)",
        lambda *_: (json.dumps([{"role": "user", "content": "hello"}]),),
    ),
    "compute_communities": ("select memory.compute_communities(%s)", _nothing),
    "refresh_communities": ("select memory.refresh_communities(%s)", _nothing),
    "declare_predicate": ("select memory.declare_predicate(%s, 'plan', 'one')", _nothing),
    "wipe": ("select memory.wipe(%s)", _nothing),
    "delete_project": ("select memory.delete_project(%s)", _nothing),
    "merge_entities": ("select memory.merge_entities(%s, 'Ann', 'Ben')", _entities),
    "split_entity": ("select memory.split_entity(%s, 'Annie')", _entities),
    "retract_fact": ("select memory.retract_fact(%s, %s, 'wrong')", _a_fact),
    "upsert_entity": ("select memory.upsert_entity(%s, 'Cy')", _nothing),
    "add_alias": ("select memory.add_alias(%s, 'Ann', 'Nan')", _ann),
}


def _during_deletion(
    app_dsn: str, org: uuid.UUID, project: uuid.UUID, query: str, args: Any
) -> Any:
    """Run `query` while another transaction deletes the project, starting after the
    deletion took the lock and committing after it: the error's SQLSTATE, or None."""
    out: dict[str, Any] = {}
    with psycopg.connect(app_dsn) as deleting, psycopg.connect(app_dsn) as writing:
        deleting.execute("select memory.use_org(%s)", (org,))
        deleting.execute("select memory.delete_project(%s)", (project,))

        def write() -> None:
            try:
                writing.execute("select memory.use_org(%s)", (org,))
                writing.execute(query, (project, *args))
                writing.commit()
                out["sqlstate"] = None
            except psycopg.Error as err:
                out["sqlstate"], out["message"] = err.sqlstate, str(err)

        thread = threading.Thread(target=write)
        thread.start()
        time.sleep(0.3)  # the writer is waiting (for the lock or for the deleted row)
        deleting.commit()
        thread.join(30)
    return out


@pytest.mark.parametrize("name", sorted(WRITES))
def test_a_writer_waiting_for_a_deleted_project_finds_it_gone(app_dsn: str, name: str) -> None:
    query, setup = WRITES[name]
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        org = conn.execute("select memory.create_org(%s)", (f"race {name}",)).fetchone()[0]  # type: ignore[index]
        project = one_in(conn, org, "select memory.create_project(%s, 'doomed')", (org,))
        other = one_in(conn, org, "select memory.create_project(%s, 'kept')", (org,))
        args = setup(conn, org, project)
        # Control: the same write succeeds on a project nobody deletes.
        one_in(conn, org, query, (other, *setup(conn, org, other)))
    out = _during_deletion(app_dsn, org, project, query, args)
    assert out["sqlstate"] == "P0002", out
    assert from_db_error(psycopg.errors.NoDataFound(out["message"])).status == 404
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        audited = one_in(
            conn,
            org,
            "select array_agg(action order by audit_id) from memory.audit_log"
            " where project_id = %s",
            (project,),
        )
    # The deletion's own rows only: nothing the waiting call did was audited.
    assert audited == ["wipe", "project.delete"], audited


def test_a_foreign_key_refusal_is_a_conflict(admin_dsn: str) -> None:
    """What a write that meets a deleted project without looking it up would get: a
    real referential refusal, which the API answers with 409 conflict, not a 500."""
    with psycopg.connect(admin_dsn) as conn, pytest.raises(psycopg.Error) as caught:
        conn.execute(
            "insert into memory.sessions (org_id, project_id, external_id) "
            "values (gen_random_uuid(), gen_random_uuid(), 'orphan')"
        )
    assert caught.value.sqlstate == "23503", caught.value
    error = from_db_error(caught.value)
    assert (error.status, error.code) == (409, "conflict")
