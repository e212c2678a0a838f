"""Writes that meet a project being deleted: a writer that waited for the project's
lock while memory.delete_project held it finds the project gone (not found, an API
404), never a foreign key's refusal of a row it wrote (which the API would answer with
a 500); a writer that does not look the project up again after its lock
(declare_predicate, which takes it exclusively) gets that refusal, which the API
answers with 409 conflict."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
from org_scope import one_in

from thin_api.errors import from_db_error

FACT = json.dumps(
    [{"subject": "Ann", "predicate": "knows", "object": "Ben", "object_type": "entity"}]
)
WRITES = {
    "assert_facts": ("select memory.assert_facts(%s, %s::jsonb)", (FACT,)),
    "ingest": (
        "select memory.ingest(%s, 'chat', %s::jsonb)",
        (json.dumps([{"role": "user", "content": "hello"}]),),
    ),
    "compute_communities": ("select memory.compute_communities(%s)", ()),
    "refresh_communities": ("select memory.refresh_communities(%s)", ()),
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
    query, args = WRITES[name]
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        org = conn.execute("select memory.create_org(%s)", (f"race {name}",)).fetchone()[0]  # type: ignore[index]
        project = one_in(conn, org, "select memory.create_project(%s, 'doomed')", (org,))
        other = one_in(conn, org, "select memory.create_project(%s, 'kept')", (org,))
        # Control: the same write succeeds on a project nobody deletes.
        one_in(conn, org, query, (other, *args))
    out = _during_deletion(app_dsn, org, project, query, args)
    assert out["sqlstate"] == "P0002", out
    assert from_db_error(psycopg.errors.NoDataFound(out["message"])).status == 404


def test_a_writer_that_does_not_look_again_gets_a_conflict(app_dsn: str) -> None:
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        org = conn.execute("select memory.create_org('race predicate')").fetchone()[0]  # type: ignore[index]
        project = one_in(conn, org, "select memory.create_project(%s, 'doomed')", (org,))
    out = _during_deletion(
        app_dsn, org, project, "select memory.declare_predicate(%s, 'plan', 'one')", ()
    )
    assert out["sqlstate"] == "23503", out
    error = from_db_error(psycopg.errors.ForeignKeyViolation(out["message"]))
    assert (error.status, error.code) == (409, "conflict")
