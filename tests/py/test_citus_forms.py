"""The Citus forms of the functions (chronomem.citus_forms), on one server.

The rewrites are checked here statement by statement, and on the schema in a rolled-
back transaction; that the forms keep every rule is what the SQL suites check when
run on them (`CHRONOMEM_CITUS_FORMS=1`, which ./scripts/test does after the default
run), and tests/citus/run.sh on a cluster.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from chronomem.citus_forms import (
    FormError,
    apply_forms,
    citus_plpgsql_body,
    plpgsql_body,
    scope_changers,
)


def squash(text: str) -> str:
    return " ".join(text.split())


def test_a_sql_function_returns_its_last_statement() -> None:
    body = plpgsql_body(
        ["update t set a = 1", "select a, b from t"],
        returns_set=True,
        returns_void=False,
        row_types=["integer", "text"],
    )
    assert squash(body) == squash(
        "#variable_conflict use_column begin update t set a = 1;"
        " return query select q.c1::integer, q.c2::text from (select a, b from t) q(c1, c2);"
        " end"
    )
    scalar = plpgsql_body(["select 1"], returns_set=False, returns_void=False, row_types=[])
    assert "select 1\n  into v_result;" in scalar and "declare v_result %RESULT%;" in scalar
    void = plpgsql_body(["select f(1)"], returns_set=False, returns_void=True, row_types=[])
    assert "perform f(1);" in void


def test_an_insert_select_returns_its_rows_and_row_count_reads_them() -> None:
    body = (
        "declare v bigint;\nbegin\n"
        "  if p then insert into memory.notes (org_id) select o from unnest(a) o;\n"
        "    get diagnostics v = row_count; end if;\n"
        "  insert into memory.notes (org_id) values (1);\n"
        "  with s as (select 1 as o) insert into memory.notes (org_id) select o from s;\n"
        "  insert into memory.notes (org_id) select 1 returning org_id into v;\n"
        "  perform 'insert into x select 1';\n"
        "end"
    )
    out = squash(citus_plpgsql_body(body, {}))
    assert out.startswith("declare citus_rows bigint; v bigint; begin")
    assert (
        "if p then with citus_inserted as (insert into memory.notes (org_id) select o from"
        " unnest(a) o returning 1) select count(*) into citus_rows from citus_inserted"
        " having count(*) > 0; v := coalesce(citus_rows, 0); end if;" in out
    )
    # VALUES, RETURNING already, and a string are left as they are.
    assert "insert into memory.notes (org_id) values (1);" in out
    assert "select 1 returning org_id into v;" in out
    assert "perform 'insert into x select 1';" in out
    # A leading WITH keeps its CTEs at the top level.
    assert (
        "with s as (select 1 as o), citus_inserted as (insert into memory.notes (org_id)"
        " select o from s returning 1)" in out
    )


def test_an_insert_select_in_a_cte_returns_its_rows() -> None:
    body = (
        "begin\n"
        "  with a as (select 1 as o), made as (\n"
        "    insert into memory.x (org_id) select o from a\n"
        "  ), kept as (insert into memory.y (org_id) select 1 returning org_id),\n"
        "  listed as (insert into memory.z (org_id) values (1))\n"
        "  select count(*) from a;\n"
        "end"
    )
    out = squash(citus_plpgsql_body(body, {}))
    assert "made as ( insert into memory.x (org_id) select o from a returning 1)" in out
    # RETURNING already, and VALUES, are left as they are.
    assert "kept as (insert into memory.y (org_id) select 1 returning org_id)" in out
    assert "listed as (insert into memory.z (org_id) values (1))" in out


def test_a_row_of_a_table_is_passed_as_the_table_s_type() -> None:
    body = (
        "declare e memory.notes;\nbegin\n"
        "  select jsonb_agg(memory_internal.note_json(v_org, m) order by m.at)\n"
        "    from memory.notes m where m.org_id = v_org;\n"
        "  return memory_internal.note_json(v_org, e);\n"
        "end"
    )
    out = squash(
        citus_plpgsql_body(
            body, {}, row_parameters={"memory_internal.note_json": {1: "memory.notes"}}
        )
    )
    assert "memory_internal.note_json(v_org, row(m.*)::memory.notes) order by m.at" in out
    # A variable of the row type is not a FROM item: left as it is.
    assert "return memory_internal.note_json(v_org, e);" in out


def test_an_update_reads_the_clock_into_a_variable_first() -> None:
    body = (
        "declare v integer;\nbegin\n"
        "  if p then update memory.jobs j set done_at = clock_timestamp() where j.id = 1;\n"
        "    get diagnostics v = row_count; end if;\n"
        "  with d as (update memory.jobs j set at = clock_timestamp() returning 1)\n"
        "    select count(*) into v from d;\n"
        "  for r in select x.id from memory.jobs x where x.at < clock_timestamp()\n"
        "    for update skip locked loop null; end loop;\n"
        "  foreach o in array array(select x.org from memory.jobs x\n"
        "      where x.at < clock_timestamp())\n"
        "  loop update memory.jobs j set at = clock_timestamp() where j.org = o; end loop;\n"
        "end"
    )
    out = squash(citus_plpgsql_body(body, {}))
    assert out.startswith("declare citus_now timestamptz; v integer; begin")
    assert (
        "if p then citus_now := clock_timestamp(); update memory.jobs j set done_at = citus_now"
        " where j.id = 1; get diagnostics v = row_count; end if;" in out
    )
    assert (
        "citus_now := clock_timestamp(); with d as (update memory.jobs j set at = citus_now" in out
    )
    # A locking read is not an UPDATE: its clock stays.
    assert "where x.at < clock_timestamp() for update skip locked" in out
    # Nor the head of the loop the UPDATE is in.
    assert (
        "where x.at < clock_timestamp()) loop citus_now := clock_timestamp();"
        " update memory.jobs j set at = citus_now where j.org = o; end loop;" in out
    )


def test_a_reader_of_a_table_s_rows_is_inlined_with_its_arguments() -> None:
    readers = {
        "memory_internal.note_versions": (
            ["p_project"],
            "select n.* from memory.notes n where n.org_id = memory_internal.current_org()"
            " and n.project_id = p_project",
        )
    }
    body = (
        "begin\n  perform 1 from memory_internal.note_versions(ev.project_id) v where v.id = 1;\n"
        "end"
    )
    out = squash(citus_plpgsql_body(body, {}, readers=readers))
    # Its aliases renamed, so that none is taken for a variable or an outer alias.
    assert (
        "perform 1 from (select citus_n.* from memory.notes citus_n where citus_n.org_id ="
        " citus_org and citus_n.project_id = (ev.project_id)) v where v.id = 1;" in out
    )
    with pytest.raises(FormError, match="alias of its body"):
        citus_plpgsql_body(
            "begin perform 1 from memory_internal.note_versions(citus_n.project_id) v; end",
            {},
            readers=readers,
        )


def test_a_transition_table_is_read_into_an_array_in_its_own_branch() -> None:
    body = (
        "begin\n  if tg_op = 'DELETE' then\n"
        "    delete from memory.notes x using old_rows o where x.org_id = o.org_id;\n"
        "  else\n    for r in select n.org_id from new_rows n loop null; end loop;\n"
        "  end if;\n  return null;\nend"
    )
    out = squash(citus_plpgsql_body(body, {"new_rows": "memory.notes", "old_rows": "memory.notes"}))
    # A DELETE ... USING reads it as a FROM does.
    assert (
        "then citus_old_rows := array(select citus_row from old_rows citus_row);"
        " delete from memory.notes x using unnest(citus_old_rows) o" in out
    )
    assert out.startswith(
        "declare citus_new_rows memory.notes[]; citus_old_rows memory.notes[]; begin"
    )
    assert (
        "else citus_new_rows := array(select citus_row from new_rows citus_row);"
        " for r in select n.org_id from unnest(citus_new_rows) n loop" in out
    )
    with pytest.raises(FormError, match="without an alias"):
        citus_plpgsql_body("begin perform 1 from new_rows; end", {"new_rows": "memory.notes"})


def test_the_scope_is_read_once_into_a_variable_where_it_cannot_change() -> None:
    body = (
        "declare v_scope uuid := memory_internal.current_org();\nbegin\n"
        "  perform 1 from memory.notes n where n.org_id = memory_internal.current_org();\n"
        "  perform 'memory_internal.current_org()';\nend"
    )
    out = squash(citus_plpgsql_body(body, {}))
    # First, so the function's own declarations read it.
    assert out.startswith(
        "declare citus_org uuid := memory_internal.current_org(); v_scope uuid := citus_org;"
    )
    assert "where n.org_id = citus_org;" in out
    assert "perform 'memory_internal.current_org()';" in out  # a string is text
    assert citus_plpgsql_body(out, {}) == out  # idempotent
    # A function that changes the scope reads it at each call.
    writer = (
        "begin perform memory.use_org(p_org);\n"
        "  perform 1 from memory.notes n where n.org_id = memory_internal.current_org(); end"
    )
    assert citus_plpgsql_body(writer, {}, scope_changers=frozenset({"use_org"})) == writer
    # Which functions change it is derived: a writer, and whoever calls one.
    assert scope_changers(
        [
            ("use_org", "perform memory_internal.set_local('chronomem.org_id', p::text)"),
            ("authenticate", "perform memory.use_org(v_org)"),
            ("authorize", "perform memory_http.authenticate(p_token)"),
            ("reader", "select memory_internal.current_org()"),
        ]
    ) == {"use_org", "authenticate", "authorize"}


def test_rows_of_a_table_with_a_dropped_column_are_read_through_a_subquery() -> None:
    body = (
        "begin return query select f.fact_id from memory.facts_at(p, coalesce(a, b)) f\n"
        "  join memory.entities e on e.entity_id = f.subject_id, memory.facts_at(q) g;\nend"
    )
    names = frozenset({"memory.facts_at"})
    out = citus_plpgsql_body(body, {}, names)
    assert squash(out) == squash(
        "begin return query select f.fact_id from (select * from memory.facts_at(p, coalesce(a,"
        " b))) f join memory.entities e on e.entity_id = f.subject_id, (select * from"
        " memory.facts_at(q)) g; end"
    )
    assert citus_plpgsql_body(out, {}, names) == out
    # A call outside FROM is left as it is.
    assert citus_plpgsql_body("begin perform memory.facts_at(p); end", {}, names) == (
        "begin perform memory.facts_at(p); end"
    )


def test_every_function_takes_its_form(owner_dsn: str) -> None:
    with psycopg.connect(owner_dsn) as conn:
        with conn.transaction(force_rollback=True):
            forms = apply_forms(conn)
            assert "memory.facts_at(uuid,timestamp with time zone,timestamp with time zone)" in (
                forms.plpgsql
            )
            # An internal reader of a table the app role may call runs as the owner too;
            # an internal helper that reads no table stays as it is.
            assert "memory_internal.fact_versions(uuid)" in forms.definer
            assert "memory_internal.in_scope(uuid)" not in forms.definer
            left: list[Any] = conn.execute(
                """
                select p.oid::regprocedure::text from pg_proc p
                  join pg_namespace n on n.oid = p.pronamespace
                  join pg_language l on l.oid = p.prolang
                 where n.nspname like 'memory%%' and p.prokind = 'f'
                   and ((n.nspname <> 'memory_internal' and not p.prosecdef)
                        or (l.lanname = 'sql' and p.prosrc ~ 'memory\\.facts\\M')
                        or 'plan_cache_mode=force_generic_plan' = any (p.proconfig))
                """
            ).fetchall()
            assert left == []
            # Idempotent: distribute runs after every migrate.
            again = apply_forms(conn)
            assert (again.plpgsql, again.definer, again.custom_plans, again.statements) == ([],) * 4
        conn.rollback()
