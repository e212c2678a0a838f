"""The Citus forms of Chronomem's functions: the same bodies, in the forms Citus runs.

On one server the API's readers run as their caller, and SQL-language helpers such as
`memory.facts_at` are inlined into the statements that call them, which lets the
planner push a caller's filters and joins into their indexes. Citus runs neither
(docs/decisions/020-citus-forms-of-the-functions.md):

- a transaction may reach an org's shards as one role only, and the writers are
  SECURITY DEFINER (the owner): so every invoker-rights function of the API schemas,
  and every internal reader of a table the tenant's roles are granted, becomes
  SECURITY DEFINER, with the search_path every definer function has. Forced
  row-level security keeps the owner in the org's scope; the owner's cross-org
  policies are read only by the functions `tests/py/test_citus_lint.py` names, and
  every other statement on their tables names the org;
- Citus plans no query of a SQL-language function on a distributed table, inlined or
  not: so every SQL function whose body names a table becomes PL/pgSQL, its statements
  unchanged (`#variable_conflict use_column`: a column wins over a parameter of the
  same name, as in SQL functions), the last one returned;
- a generic plan of a statement Citus cannot route with its parameters unknown is not
  planned: so `plan_cache_mode = force_generic_plan` is reset, and each call plans
  with its values, which Citus routes by org;
- Citus routes on a value, not on a call: so the scope a statement names
  (`memory_internal.current_org()`) is read once into a variable, where the function
  cannot change it; and the PL/pgSQL statements Citus cannot run as written (an
  `INSERT ... SELECT` under forced row-level security, a trigger's transition table, a
  join of rows of a table with a dropped column) take the shapes the comments below
  give.

`chronomem distribute` applies them after distributing (and again after every
`migrate`, which restores the one-server forms); `apply_forms` also runs on a plain
server, where the test suites check that the forms keep every rule (tests/testdb.py
applies them when asked; ./scripts/test reruns the SQL-level suites so).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from chronomem.sql_statements import split_statements

API_SCHEMAS = ("memory", "memory_http", "memory_worker")
SCHEMAS = ("memory", "memory_internal", "memory_http", "memory_worker")
DEFINER_SEARCH_PATH = "memory_internal, memory, public, pg_temp"


class FormError(RuntimeError):
    pass


@dataclass
class Forms:
    plpgsql: list[str] = field(default_factory=list)
    definer: list[str] = field(default_factory=list)
    custom_plans: list[str] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{len(self.plpgsql)} SQL function(s) as PL/pgSQL, {len(self.definer)} "
            f"reader(s) as SECURITY DEFINER, {len(self.custom_plans)} function(s) "
            f"planned per call, {len(self.statements)} PL/pgSQL bod(ies) rewritten (inserts,"
            " transition tables, the scope as a variable, rows read through a subquery)"
        )


# A condition on pg_proc p: its body names a table of the schemas (not a function of
# the same name: `memory.facts_at(` is a call).
_NAMES_A_TABLE = """exists (
     select from pg_class c join pg_namespace cn on cn.oid = c.relnamespace
      where cn.nspname = any(%(schemas)s) and c.relkind in ('r', 'p')
        and p.prosrc ~* ('\\m' || cn.nspname || '\\.' || c.relname || '\\M(?!\\s*\\()'))"""

# SQL-language functions whose body names a table, or reads a setting.
_SQL_ON_TABLES = (
    """
select p.oid::regprocedure::text as signature,
       quote_ident(n.nspname) || '.' || quote_ident(p.proname) as name,
       pg_get_function_arguments(p.oid) as arguments,
       pg_get_function_result(p.oid) as result,
       p.proretset as returns_set,
       p.prorettype = 'void'::regtype as returns_void,
       format_type(p.prorettype, null) as result_type,
       p.provolatile as volatility, p.proisstrict as strict, p.proparallel as parallel,
       p.prosecdef as definer, coalesce(p.proconfig, '{}') as config,
       p.prosrc as body, p.prosqlbody is not null as atomic,
       coalesce(p.proargnames, '{}') as argument_names, p.pronargs as arity,
       p.pronargdefaults as defaults, t.typrelid <> 0 as returns_rows,
       -- The types of the rows a SETOF function returns, in order (SQL functions cast
       -- their last statement's columns to them; RETURN QUERY does not).
       case when not p.proretset then '{}'::text[]
            when p.proargmodes is not null and 't' = any (p.proargmodes) then
              array(select format_type(a.t, null)
                      from unnest(p.proallargtypes, p.proargmodes) with ordinality a(t, m, i)
                     where a.m = 't' order by a.i)
            when t.typrelid <> 0 then
              array(select format_type(a.atttypid, a.atttypmod) from pg_attribute a
                     where a.attrelid = t.typrelid and a.attnum > 0 and not a.attisdropped
                     order by a.attnum)
            else array[format_type(p.prorettype, null)] end as row_types
  from pg_proc p
  join pg_type t on t.oid = p.prorettype
  join pg_namespace n on n.oid = p.pronamespace
  join pg_language l on l.oid = p.prolang
 where n.nspname = any(%(schemas)s) and l.lanname = 'sql' and p.prokind = 'f'
   and ("""
    + _NAMES_A_TABLE
    + """
        -- A setting's reader (the scope, the record-time instant): inlined, its
        -- COALESCE of non-immutable calls is refused in a routed UPDATE or DELETE.
        or p.provolatile <> 'i' and p.prosrc ~* 'current_setting\\s*\\(')
 order by 1
"""
)

# Functions that return the rows of a table with a dropped column (memory.facts_at):
# Citus fails on such a function joined with a distributed table (`cache lookup
# failed for type 0`: the dropped column's type), and not on a subquery of its
# columns.
_ROWS_WITH_DROPPED_COLUMNS = """
select distinct quote_ident(n.nspname) || '.' || quote_ident(p.proname)
  from pg_proc p
  join pg_namespace n on n.oid = p.pronamespace
  join pg_type t on t.oid = p.prorettype
  join pg_attribute a on a.attrelid = t.typrelid and a.attisdropped
 where n.nspname = any(%(schemas)s) and p.proretset
"""

# Parameters that take a row of a table, by function and position (from 0).
_ROW_PARAMETERS = """
select quote_ident(n.nspname) || '.' || quote_ident(p.proname), a.i::integer - 1,
       format_type(a.t, null)
  from pg_proc p
  join pg_namespace n on n.oid = p.pronamespace
 cross join lateral unnest(p.proargtypes::oid[]) with ordinality a(t, i)
  join pg_type t on t.oid = a.t
  join pg_class c on c.oid = t.typrelid and c.relkind in ('r', 'p')
 where n.nspname = any(%(schemas)s)
 order by 1, 2
"""

_FUNCTION_BODIES = """
select p.proname, p.prosrc
  from pg_proc p join pg_namespace n on n.oid = p.pronamespace
 where n.nspname = any(%(schemas)s) and p.prokind in ('f', 'p')
"""

_PLPGSQL = """
select p.oid::regprocedure::text as signature, p.prosrc as body,
       pg_get_functiondef(p.oid) as definition,
       coalesce((select jsonb_object_agg(x.name, x.row_type) from (
                   select distinct t.tgnewtable as name, t.tgrelid::regclass::text as row_type
                     from pg_trigger t where t.tgfoid = p.oid and t.tgnewtable is not null
                   union
                   select distinct t.tgoldtable, t.tgrelid::regclass::text
                     from pg_trigger t where t.tgfoid = p.oid and t.tgoldtable is not null) x),
                '{}') as transition,
       (select count(distinct t.tgrelid) from pg_trigger t
         where t.tgfoid = p.oid and (t.tgnewtable is not null or t.tgoldtable is not null))
         as transition_tables
  from pg_proc p
  join pg_namespace n on n.oid = p.pronamespace
  join pg_language l on l.oid = p.prolang
 where n.nspname = any(%(schemas)s) and l.lanname = 'plpgsql' and p.prokind in ('f', 'p')
 order by 1
"""

_INVOKER_API = (
    """
select p.oid::regprocedure::text
  from pg_proc p join pg_namespace n on n.oid = p.pronamespace
 where p.prokind = 'f' and not p.prosecdef
   and (n.nspname = any(%(api_schemas)s)
        -- An internal reader of a table that a tenant's role is granted and may call
        -- directly (memory_internal.fact_versions): the same one-role rule.
        or n.nspname = 'memory_internal'
           and (has_function_privilege('chronomem_app', p.oid, 'execute')
                or has_function_privilege('chronomem_analyst', p.oid, 'execute'))
           and """
    + _NAMES_A_TABLE
    + """)
 order by 1
"""
)

_GENERIC_PLANS = """
select p.oid::regprocedure::text
  from pg_proc p join pg_namespace n on n.oid = p.pronamespace
 where n.nspname = any(%(schemas)s)
   and 'plan_cache_mode=force_generic_plan' = any (p.proconfig)
 order by 1
"""

_VOLATILITY = {"i": "immutable", "s": "stable", "v": "volatile"}
_PARALLEL = {"s": "parallel safe", "r": "parallel restricted", "u": "parallel unsafe"}
_LEADING_SELECT = re.compile(r"^\s*select\b", re.I)


def plpgsql_body(
    statements: list[str], *, returns_set: bool, returns_void: bool, row_types: list[str]
) -> str:
    """A SQL function's statements as a PL/pgSQL body that returns what the SQL
    function returns: the last statement's rows (SETOF), its first row's value (a
    scalar: NULL without rows), or nothing (void)."""
    if not statements:
        raise FormError("a SQL function without statements")
    *before, last = statements
    lines = [
        "#variable_conflict use_column",
        "declare v_result %RESULT%;" if not (returns_set or returns_void) else "",
        "begin",
    ]
    for statement in before:
        # A SQL function discards the rows of every statement but the last.
        lines.append(_LEADING_SELECT.sub("perform", statement.strip(), count=1) + ";")
    if returns_set:
        columns = [f"c{i}" for i in range(1, len(row_types) + 1)]
        casts = ", ".join(f"q.{c}::{t}" for c, t in zip(columns, row_types, strict=True))
        lines.append(
            f"return query select {casts}\n  from ({last.strip()}) q({', '.join(columns)});"
        )
    elif returns_void:
        lines.append(_LEADING_SELECT.sub("perform", last.strip(), count=1) + ";")
    else:
        lines.append(f"{last.strip()}\n  into v_result;")
        lines.append("return v_result;")
    lines.append("end")
    return "\n".join(line for line in lines if line)


def _as_plpgsql(conn: psycopg.Connection[Any], fn: dict[str, Any]) -> None:
    if fn["atomic"]:
        raise FormError(f"{fn['signature']}: a BEGIN ATOMIC body has no PL/pgSQL form here")
    body = plpgsql_body(
        split_statements(fn["body"]),
        returns_set=fn["returns_set"],
        returns_void=fn["returns_void"],
        row_types=fn["row_types"],
    ).replace("%RESULT%", fn["result_type"])
    attributes = [
        "language plpgsql",
        _VOLATILITY[fn["volatility"]],
        "strict" if fn["strict"] else "called on null input",
        _PARALLEL[fn["parallel"]],
        "security definer" if fn["definer"] else "security invoker",
    ]
    settings = []
    for setting in fn["config"]:
        name, _, value = setting.partition("=")
        settings.append(sql.SQL("set {} = {}").format(sql.Identifier(name), sql.Literal(value)))
    statement = sql.SQL(
        "create or replace function {name}({arguments}) returns {result} "
        "{attributes} {settings} as {body}"
    ).format(
        name=sql.SQL(fn["name"]),
        arguments=sql.SQL(fn["arguments"]),
        result=sql.SQL(fn["result"]),
        attributes=sql.SQL(" ".join(attributes)),
        settings=sql.SQL(" ").join(settings),
        body=sql.Literal(body),
    )
    conn.execute(statement)


def apply_forms(conn: psycopg.Connection[Any]) -> Forms:
    """Put every function in its Citus form; idempotent. `conn` is the functions'
    owner (or a superuser), in a transaction of its caller's."""
    forms = Forms()
    params = {"schemas": list(SCHEMAS)}
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        functions = cur.execute(_SQL_ON_TABLES, params).fetchall()
    readers = inline_readers(functions)
    for fn in functions:
        try:
            _as_plpgsql(conn, fn)
        except psycopg.Error as err:
            raise FormError(f"{fn['signature']} as PL/pgSQL: {err}") from err
        forms.plpgsql.append(fn["signature"])
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        bodies = cur.execute(_PLPGSQL, params).fetchall()
    row_functions = frozenset(
        name for (name,) in conn.execute(_ROWS_WITH_DROPPED_COLUMNS, params).fetchall()
    )
    changers = scope_changers(conn.execute(_FUNCTION_BODIES, params).fetchall())
    row_parameters: dict[str, dict[int, str]] = {}
    for name, position, row_type in conn.execute(_ROW_PARAMETERS, params).fetchall():
        row_parameters.setdefault(name, {})[position] = row_type
    for fn in bodies:
        if fn["transition_tables"] > 1:
            raise FormError(f"{fn['signature']}: transition tables of several tables")
        try:
            body = citus_plpgsql_body(
                fn["body"], fn["transition"], row_functions, changers, row_parameters, readers
            )
        except FormError as err:
            raise FormError(f"{fn['signature']}: {err}") from err
        if body == fn["body"]:
            continue
        definition = fn["definition"]
        if definition.count(fn["body"]) != 1:
            raise FormError(f"{fn['signature']}: its body is not found in its definition")
        try:
            conn.execute(definition.replace(fn["body"], body))
        except psycopg.Error as err:
            raise FormError(f"{fn['signature']} in its Citus form: {err}") from err
        forms.statements.append(fn["signature"])
    api = {"schemas": list(SCHEMAS), "api_schemas": list(API_SCHEMAS)}
    for (signature,) in conn.execute(_INVOKER_API, api).fetchall():
        conn.execute(
            sql.SQL("alter function {} security definer set search_path = {}").format(
                sql.SQL(signature), sql.SQL(DEFINER_SEARCH_PATH)
            )
        )
        forms.definer.append(signature)
    for (signature,) in conn.execute(_GENERIC_PLANS, params).fetchall():
        conn.execute(sql.SQL("alter function {} reset plan_cache_mode").format(sql.SQL(signature)))
        forms.custom_plans.append(signature)
    return forms


# -- PL/pgSQL bodies ---------------------------------------------------------------
#
# Two statement shapes Citus does not run under forced row-level security:
#
# - INSERT ... SELECT from anything but a colocated table (a batch in jsonb, an
#   unnest, a join) is sent to the shards as COPY, which PostgreSQL refuses on a table
#   with row-level security. With RETURNING, Citus instead collects the rows into
#   intermediate results and runs an INSERT ... SELECT on each shard, under its
#   policies: so each one becomes `with citus_inserted as (<insert> returning 1)
#   select count(*) into citus_rows ...`, and a GET DIAGNOSTICS ... ROW_COUNT after it
#   reads citus_rows (FOUND keeps its meaning: no row is selected when none went in).
# - a statement trigger's transition table is not available to the statements Citus
#   sends on: the trigger reads it once into an array of its table's rows, and the
#   statements read `unnest(citus_new_rows)`.

_CODE_MASK = re.compile(
    r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|(\$[A-Za-z_]*\$).*?\1", re.S
)
_INSERT = re.compile(r"\binsert\s+into\b", re.I)
_WITH = re.compile(r"\bwith\b", re.I)
_ROW_COUNT = re.compile(r"^\s*get\s+diagnostics\s+(\w+)\s*(?:=|:=)\s*row_count\s*$", re.I)
_BODY_START = re.compile(
    r"^\s*(?:#variable_conflict\s+\w+\s*)?(?:<<\w+>>\s*)?(declare\b|begin\b)", re.I
)


def mask_code(text: str) -> str:
    """`text` with comments, string literals, quoted names and dollar-quoted strings
    blanked (same length, newlines kept): positions in it are positions in text."""
    return _CODE_MASK.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _depths(masked: str) -> list[int]:
    depth, out = 0, []
    for c in masked:
        if c == "(":
            depth += 1
        out.append(depth)
        if c == ")":
            depth -= 1
    return out


def _statement_start(masked: str, depth: list[int], pos: int) -> int:
    """Where the SQL statement around `pos` starts in a PL/pgSQL statement: after the
    last block word before it (IF ... THEN, ELSE, LOOP, BEGIN), not counting the
    THEN and ELSE of a CASE expression."""
    start, cases = 0, 0
    for m in re.finditer(r"\b(?:case|end|then|else|loop|begin|declare)\b", masked[:pos], re.I):
        if depth[m.start()] != 0:
            continue
        word = m.group(0).lower()
        if word == "case":
            cases += 1
        elif word == "end":
            cases = max(cases - 1, 0)
        elif not cases or word in ("loop", "begin", "declare"):
            start = m.end()
    return start


_CTE_INSERT = re.compile(r"\bas\s*(?:not\s+)?(?:materialized\s*)?\(\s*insert\s+into\b", re.I)


def _cte_inserts_returning(statement: str) -> str:
    """The statement with each INSERT ... SELECT that is a CTE's body ending in
    RETURNING: without it, Citus sends that CTE's rows as COPY, as it does a top-level
    INSERT ... SELECT's."""
    masked = mask_code(statement)
    depth = _depths(masked)
    ends = []
    for m in _CTE_INSERT.finditer(masked):
        opening = masked.index("(", m.start())
        level = depth[opening]
        close = next(
            i for i in range(opening + 1, len(masked)) if depth[i] == level and masked[i] == ")"
        )
        words = {
            w.group(0).lower()
            for w in re.finditer(r"\b(?:select|returning)\b", masked[opening:close], re.I)
            if depth[opening + w.start()] == level
        }
        if words == {"select"}:
            ends.append(close)
    for close in reversed(ends):
        statement = statement[:close].rstrip() + "\n    returning 1" + statement[close:]
    return statement


def _wrap_insert(statement: str) -> str | None:
    """The statement with its top-level INSERT ... SELECT in the RETURNING form, or None
    when it has none (VALUES, RETURNING already, or an insert inside a CTE)."""
    masked = mask_code(statement)
    depth = _depths(masked)
    found = [m for m in _INSERT.finditer(masked) if depth[m.start()] == 0]
    if not found:
        return None
    insert = found[0].start()
    head = _statement_start(masked, depth, insert)
    # An INSERT led by a WITH keeps its CTEs at the top level (a data-modifying CTE may
    # not hold a WITH), citus_inserted joining them.
    led = any(depth[m.start()] == 0 for m in _WITH.finditer(masked, head, insert))
    tail = masked[insert:]
    tail_depth = depth[insert:]
    words = {
        m.group(0).lower()
        for m in re.finditer(r"\b(?:select|values|returning)\b", tail, re.I)
        if tail_depth[m.start()] == 0
    }
    if "returning" in words or "select" not in words:
        return None
    lead = statement[:insert].rstrip() + ",\n  " if led else statement[:insert] + "with "
    return (
        lead
        + "citus_inserted as ("
        + statement[insert:].rstrip()
        + "\n  returning 1)\n  select count(*) into citus_rows from citus_inserted"
        + " having count(*) > 0"
    )


_NOT_ALIASES = {"where", "group", "order", "join", "on", "cross", "left", "inner", "limit"}
_CLOCK = re.compile(r"\bclock_timestamp\s*\(\s*\)", re.I)
_UPDATE = re.compile(r"\bupdate\b", re.I)
_WORD_BEFORE = re.compile(r"(\w+)\W*$")


def _clock_read_first(statement: str) -> tuple[str, bool]:
    """An UPDATE's `clock_timestamp()` calls as `citus_now`, assigned just before the
    statement: Citus refuses a volatile function in an UPDATE of a distributed table,
    routed or not."""
    masked = mask_code(statement)
    calls = list(_CLOCK.finditer(masked))
    updates = [  # not a row lock's FOR [NO KEY] UPDATE
        m.start()
        for m in _UPDATE.finditer(masked)
        if not (w := _WORD_BEFORE.search(masked[: m.start()]))
        or w.group(1).lower() not in ("for", "key")
    ]
    if not updates:
        return statement, False
    start = _statement_start(masked, _depths(masked), updates[0])
    # The UPDATE's own calls: a block's head before it (FOREACH ... LOOP) reads the
    # clock as it is.
    calls = [m for m in calls if m.start() >= start]
    if not calls:
        return statement, False
    for m in reversed(calls):
        statement = statement[: m.start()] + "citus_now" + statement[m.end() :]
    statement = (
        statement[:start] + "\n  citus_now := clock_timestamp();\n  " + statement[start:].lstrip()
    )
    return statement, True


def _read_transition(statement: str, names: list[str]) -> tuple[str, set[str]]:
    """The statement reading `unnest(citus_<name>)` for each transition table it reads,
    after an assignment of that array from the table; and the names it reads."""
    read: set[str] = set()
    for name in names:
        masked = mask_code(statement)
        refs = list(
            re.finditer(rf"\b(?:from|join|using)\s+({name})\b(?:\s+(?:as\s+)?(\w+))?", masked, re.I)
        )
        # The array's own assignment (a body in its form already) is not a read.
        refs = [m for m in refs if (m.group(2) or "").lower() != "citus_row"]
        if not refs:
            continue
        if any(m.group(2) is None or m.group(2).lower() in _NOT_ALIASES for m in refs):
            raise FormError(f"a read of {name} without an alias")
        start = _statement_start(masked, _depths(masked), refs[0].start())
        for m in reversed(refs):
            statement = statement[: m.start(1)] + f"unnest(citus_{name})" + statement[m.end(1) :]
        statement = (
            statement[:start]
            + f"\n  citus_{name} := array(select citus_row from {name} citus_row);\n  "
            + statement[start:].lstrip()
        )
        read.add(name)
    return statement, read


def citus_plpgsql_body(
    body: str,
    transition: dict[str, str],
    row_functions: frozenset[str] = frozenset(),
    scope_changers: frozenset[str] = frozenset(),
    row_parameters: dict[str, dict[int, str]] | None = None,
    readers: dict[str, tuple[list[str], str]] | None = None,
) -> str:
    """A PL/pgSQL body in its Citus form. `transition` maps a trigger's transition
    table names (new_rows) to its table's row type (memory.episodes). A function may
    serve triggers with different transition tables (one per TG_OP branch), so each
    statement reads its table into the array just before it, in its own branch.
    `row_functions` return rows of a table with a dropped column; `scope_changers`
    change the org scope (`scope_changers()`); `row_parameters` take rows of a table
    (function -> position -> table); `readers` are inlined (`inline_readers()`)."""
    body = _readers_inlined(body, readers or {})
    out, pos, wrapped, pending_count, timed = [], 0, False, False, False
    read: set[str] = set()
    for chunk in split_statements(body):
        at = body.find(chunk, pos)
        if at < 0:
            raise FormError("a statement not found in its body")
        out.append(body[pos:at])
        text = chunk
        if pending_count and (m := _ROW_COUNT.match(mask_code(text))):
            text = f"{m.group(1)} := coalesce(citus_rows, 0)"
        pending_count = False
        text, reads = _read_transition(text, sorted(transition))
        read |= reads
        text, clocked = _clock_read_first(text)
        timed = timed or clocked
        text = _cte_inserts_returning(text)
        if (new := _wrap_insert(text)) is not None:
            text, wrapped, pending_count = new, True, True
        out.append(text)
        pos = at + len(chunk)
    out.append(body[pos:])
    result = "".join(out)
    if transition:
        # A trigger's statements run inside the shard's task; there Citus cannot send a
        # materialized CTE's rows to the other nodes, as it does for a subplan: so the
        # CTEs are inlined into their statements.
        masked = mask_code(result)
        for m in reversed(list(re.finditer(r"\bas\s+(materialized)\s*\(", masked, re.I))):
            result = result[: m.start(1)] + "not materialized" + result[m.end(1) :]
    declarations = [f"citus_{name} {transition[name]}[];" for name in sorted(read)]
    if wrapped:
        declarations.append("citus_rows bigint;")
    if timed:
        declarations.append("citus_now timestamptz;")
    result, scoped = _org_as_variable(result, scope_changers)
    result = _row_functions_as_subqueries(result, row_functions)
    result = _table_rows_as_their_type(result, row_parameters or {})
    if scoped:
        # First, so that the function's own declarations may read it.
        declarations.insert(0, "citus_org uuid := memory_internal.current_org();")
    if not declarations:
        return result
    m = _BODY_START.match(mask_code(result))
    if m is None:
        raise FormError("a PL/pgSQL body that starts with neither DECLARE nor BEGIN")
    keyword = m.group(1).lower()
    insert_at = m.end(1) if keyword == "declare" else m.start(1)
    block = "\n  ".join(declarations)
    text = f"\n  {block}\n" if keyword == "declare" else f"declare\n  {block}\n"
    return result[:insert_at] + text + result[insert_at:]


# Citus routes a statement to one shard only on a constant or a parameter: the scope
# read once into a variable (a parameter of each statement's custom plan) routes
# `org_id = memory_internal.current_org()`, which as a call asks every shard, and a
# nested query on a shard then stays on its node. Not in a function that changes
# the scope, nor calls one that does: there the scope at entry is not the scope of
# every statement.
_CURRENT_ORG = re.compile(r"\bmemory_internal\.current_org\s*\(\s*\)", re.I)
# A write of the org scope (tests/py/test_citus_lint.py names the functions that may).
SCOPE_WRITE = re.compile(r"set_local\s*\(\s*'chronomem\.org_id'", re.I)


def scope_changers(bodies: list[tuple[str, str]]) -> frozenset[str]:
    """The names of the functions, of (name, body) pairs, that change the org scope:
    those that write it, and those that call such a function."""
    changers = {name for name, body in bodies if SCOPE_WRITE.search(body)}
    code = [(name, mask_code(body)) for name, body in bodies]
    while changers:
        calls = _calls_of(frozenset(changers))
        more = changers | {name for name, masked in code if calls.search(masked)}
        if more == changers:
            break
        changers = more
    return frozenset(changers)


def _calls_of(names: frozenset[str]) -> re.Pattern[str]:
    alternatives = "|".join(map(re.escape, sorted(names)))
    return re.compile(rf"\b(?:{alternatives})\s*\(", re.I)


def _org_as_variable(body: str, changers: frozenset[str]) -> tuple[str, bool]:
    masked = mask_code(body)
    if (
        "citus_org" in masked
        or SCOPE_WRITE.search(body)
        or (changers and _calls_of(changers).search(masked))
    ):
        return body, False
    calls = list(_CURRENT_ORG.finditer(masked))
    for m in reversed(calls):
        body = body[: m.start()] + "citus_org" + body[m.end() :]
    return body, bool(calls)


_SUBQUERY_OPENING = re.compile(r"\(\s*select\s+\*\s+from\s+$", re.I)


def _row_functions_as_subqueries(body: str, names: frozenset[str]) -> str:
    """Each FROM item `name(args)` of `names` as `(select * from name(args))`."""
    for name in sorted(names):
        pattern = re.compile(rf"(?:\bfrom|\bjoin|,)\s*({re.escape(name)})\s*\(", re.I)
        masked = mask_code(body)
        for m in reversed(list(pattern.finditer(masked))):
            if _SUBQUERY_OPENING.search(masked[: m.start(1)]):
                continue
            _, end = _call_arguments(masked, m.end() - 1)
            call = body[m.start(1) : end + 1]
            body = body[: m.start(1)] + f"(select * from {call})" + body[end + 1 :]
    return body


def _call_arguments(masked: str, opening: int) -> tuple[list[tuple[int, int]], int]:
    """The (start, end) of each top-level argument of the call whose `(` is at
    `opening` (none for `f()`), and where its `)` is."""
    spans: list[tuple[int, int]] = []
    depth, start = 0, opening + 1
    for i in range(opening, len(masked)):
        c = masked[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                if spans or masked[start:i].strip():
                    spans.append((start, i))
                return spans, i
        elif c == "," and depth == 1:
            spans.append((start, i))
            start = i + 1
    raise FormError("a call without its closing parenthesis")


def _table_rows_as_their_type(body: str, row_parameters: dict[str, dict[int, str]]) -> str:
    """Each `f(alias)` whose parameter takes a row of a table, `alias` a FROM item of
    the body, as `f(row(alias.*)::table)`: Citus sends the call to a shard with the
    row typed as the shard (memory.entities_102008), for which there is no f."""
    for name, positions in sorted(row_parameters.items()):
        masked = mask_code(body)
        calls = list(re.finditer(rf"\b{re.escape(name)}\s*\(", masked, re.I))
        for m in reversed(calls):
            spans, _ = _call_arguments(masked, m.end() - 1)
            for position in sorted(positions, reverse=True):
                if position >= len(spans):
                    continue
                start, end = spans[position]
                alias = masked[start:end].strip()
                if not re.fullmatch(r"\w+", alias) or not re.search(
                    rf"\b(?:from|join)\s+[\w.]+\s+(?:as\s+)?{alias}\b", masked, re.I
                ):
                    continue  # a variable of the row type, or an expression
                at = start + masked[start:end].index(alias)
                typed = f"row({alias}.*)::{positions[position]}"
                body = body[:at] + typed + body[at + len(alias) :]
    return body


def inline_readers(functions: list[dict[str, Any]]) -> dict[str, tuple[list[str], str]]:
    """The SQL functions, of `_SQL_ON_TABLES`' rows, that the forms inline where a
    PL/pgSQL body reads them in FROM, as PostgreSQL inlines them on one server: those
    that return a table's rows from one SELECT, every argument named and given (no
    defaults). As PL/pgSQL functions (their form) they would be table functions to
    Citus, which it cannot join with a distributed table; inlined, the statement reads
    the table, by the org named, and is routed. Name -> (argument names, the SELECT)."""
    out: dict[str, tuple[list[str], str]] = {}
    for fn in functions:
        statements = split_statements(fn["body"])
        names = list(fn["argument_names"])[: fn["arity"]]
        if (
            fn["returns_set"]
            and fn["returns_rows"]
            and not fn["defaults"]
            and not fn["definer"]
            and len(statements) == 1
            and _LEADING_SELECT.match(mask_code(statements[0]))
            and len(names) == fn["arity"]
            and all(names)
        ):
            out[fn["name"]] = (names, statements[0].strip())
    return out


_ALIASES = re.compile(r"\b(?:from|join)\s+[\w.]+(?:\s+(?:as\s+)?(\w+))?", re.I)


def _readers_inlined(body: str, readers: dict[str, tuple[list[str], str]]) -> str:
    """Each FROM item `name(args)` of `readers` as `(its SELECT, args for parameters)`."""
    for name, (parameters, select) in sorted(readers.items()):
        pattern = re.compile(rf"(?:\bfrom|\bjoin|,)\s*({re.escape(name)})\s*\(", re.I)
        masked = mask_code(body)
        select = _aliases_renamed(select)
        inner = {m.group(1).lower() for m in _ALIASES.finditer(mask_code(select)) if m.group(1)}
        for m in reversed(list(pattern.finditer(masked))):
            spans, end = _call_arguments(masked, m.end() - 1)
            if len(spans) != len(parameters):
                raise FormError(f"{name} called with {len(spans)} argument(s)")
            arguments = [body[a:b].strip() for a, b in spans]
            for argument in arguments:
                qualifiers = {q.lower() for q in re.findall(r"\b(\w+)\.", mask_code(argument))}
                if qualifiers & inner:
                    raise FormError(f"{name}: an argument names an alias of its body")
            text, text_masked = select, mask_code(select)
            for parameter, argument in zip(parameters, arguments, strict=True):
                for p in reversed(list(re.finditer(rf"\b{re.escape(parameter)}\b", text_masked))):
                    text = text[: p.start()] + f"({argument})" + text[p.end() :]
                text_masked = mask_code(text)
            body = body[: m.start(1)] + f"({text})" + body[end + 1 :]
    return body


def _aliases_renamed(select: str) -> str:
    """`select` with each FROM alias `x` as `citus_x`: inlined into a PL/pgSQL body, an
    alias that is also one of its variables' names would be ambiguous."""
    masked = mask_code(select)
    spans = [(m.start(1), m.end(1)) for m in _ALIASES.finditer(masked) if m.group(1)]
    aliases = {masked[a:b] for a, b in spans}
    for alias in aliases:
        spans += [(m.start(), m.end()) for m in re.finditer(rf"\b{alias}\b(?=\s*\.)", masked)]
    for a, b in sorted(set(spans), reverse=True):
        select = select[:a] + "citus_" + select[a:b] + select[b:]
    return select
