"""Static lints over the SQL sources (no database needed).

1. Invariant 3: every read of facts goes through the effective-at function. Only
   ``memory.facts_at`` and ``memory_internal.fact_versions`` may read ``memory.facts``;
   every other function, DO block or statement in functions/*.sql may only write it
   (UPDATE / INSERT INTO / DELETE FROM / MERGE INTO with memory.facts as the target).
2. Invariant 5: every table in sql/*.sql carries ``org_id``, and every PRIMARY KEY,
   UNIQUE and EXCLUDE constraint and every unique index includes ``org_id``.

Function bodies are extracted from their dollar-quoted (or single-quoted) bodies, also
when nested in another body (``execute format($f$ create function ... $f$)``). SQL
bodies are split into statements and parsed with sqlglot; PL/pgSQL bodies are split at
top-level ';' and the SQL inside each piece is located heuristically and parsed. Every
reference to the facts table that no clean sqlglot parse accounts for is classified by a
token/regex fallback that errs on the side of reporting a read, so nothing is silently
skipped. The lint is self-tested on small synthetic snippets below.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest
import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

REPO = Path(__file__).resolve().parents[2]
ALLOWED_FACT_READERS = frozenset({"memory.facts_at", "memory_internal.fact_versions"})

# sqlglot logs a warning for each statement it falls back to exp.Command on; the lint
# handles those itself.
logging.getLogger("sqlglot").setLevel(logging.ERROR)


# --------------------------------------------------------------------------------------
# A small PostgreSQL lexer: enough to find comments, strings, dollar quotes and ';'.
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Seg:
    kind: str  # code | comment | string | ident | dollar
    text: str  # the raw text of the segment
    inner: str = ""  # string / dollar-quote contents


_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_][A-Za-z_0-9]*)?\$")


def lex(src: str) -> list[Seg]:
    segs: list[Seg] = []
    code_start = 0
    i = 0
    n = len(src)

    def flush(upto: int) -> None:
        if upto > code_start:
            segs.append(Seg("code", src[code_start:upto]))

    while i < n:
        ch = src[i]
        nxt = src[i + 1] if i + 1 < n else ""
        if ch == "-" and nxt == "-":
            flush(i)
            end = src.find("\n", i)
            end = n if end < 0 else end
            segs.append(Seg("comment", src[i:end]))
            i = code_start = end
        elif ch == "/" and nxt == "*":
            flush(i)
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            segs.append(Seg("comment", src[i:j]))
            i = code_start = j
        elif ch == "'":
            flush(i)
            escapes = i > 0 and src[i - 1] in "eE" and (i < 2 or not src[i - 2].isalnum())
            j = i + 1
            while j < n:
                if (escapes and src[j] == "\\") or (src[j] == "'" and src[j + 1 : j + 2] == "'"):
                    j += 2
                elif src[j] == "'":
                    break
                else:
                    j += 1
            segs.append(Seg("string", src[i : j + 1], src[i + 1 : j].replace("''", "'")))
            i = code_start = j + 1
        elif ch == '"':
            flush(i)
            j = src.find('"', i + 1)
            j = n - 1 if j < 0 else j
            segs.append(Seg("ident", src[i : j + 1], src[i + 1 : j]))
            i = code_start = j + 1
        elif ch == "$" and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = _DOLLAR_TAG.match(src, i)
            if not m:
                i += 1
                continue
            tag = m.group(0)
            end = src.find(tag, m.end())
            end = n if end < 0 else end
            flush(i)
            segs.append(Seg("dollar", src[i : end + len(tag)], src[m.end() : end]))
            i = code_start = min(n, end + len(tag))
        else:
            i += 1
    flush(n)
    return segs


def split_statements(segs: list[Seg]) -> list[list[Seg]]:
    """Split at ';' in code (never inside strings, comments or dollar quotes)."""
    out: list[list[Seg]] = []
    cur: list[Seg] = []
    for seg in segs:
        if seg.kind != "code" or ";" not in seg.text:
            cur.append(seg)
            continue
        parts = seg.text.split(";")
        for k, part in enumerate(parts):
            if part:
                cur.append(Seg("code", part))
            if k < len(parts) - 1:
                out.append(cur)
                cur = []
    out.append(cur)
    return [s for s in out if any(x.kind != "comment" and x.text.strip() for x in s)]


def render(segs: list[Seg], *, keep_strings: bool) -> str:
    """Code with comments dropped; strings and dollar quotes kept or blanked to ''."""
    parts: list[str] = []
    for seg in segs:
        if seg.kind == "comment":
            parts.append(" ")
        elif seg.kind in ("string", "dollar") and not keep_strings:
            parts.append("''")
        else:
            parts.append(seg.text)
    return "".join(parts)


# --------------------------------------------------------------------------------------
# Units of code: functions (with their bodies), DO blocks, other statements.
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    kind: str  # function | do | statement
    name: str  # qualified function name, or a label
    language: str  # sql | plpgsql
    body: str


_CREATE_FUNCTION = re.compile(
    r"^\s*create\s+(?:or\s+replace\s+)?(?:function|procedure)\s+([\w.\"]+)\s*\(", re.I | re.S
)
_LANGUAGE = re.compile(r"\blanguage\s+'?(\w+)'?", re.I)
_DO = re.compile(r"^\s*do\b", re.I)


def _unquote_name(name: str) -> str:
    return name.replace('"', "").lower()


def extract_units(src: str, origin: str) -> list[Unit]:
    units: list[Unit] = []
    for k, stmt in enumerate(split_statements(lex(src))):
        blank = render(stmt, keep_strings=False)
        lang_m = _LANGUAGE.search(blank)
        language = lang_m.group(1).lower() if lang_m else "plpgsql"
        func_m = _CREATE_FUNCTION.match(blank)
        bodies = [s for s in stmt if s.kind in ("dollar", "string")]
        if func_m or _DO.match(blank):
            # The body: the first dollar-quoted string (or, failing that, the first
            # single-quoted string) after AS / after DO.
            body_seg = next((s for s in bodies if s.kind == "dollar"), None) or next(
                iter(bodies), None
            )
            body = body_seg.inner if body_seg else ""
            if func_m and body_seg is None:
                # A SQL-standard body (RETURN expr / BEGIN ATOMIC): scan the whole
                # statement, locating the SQL in it as in PL/pgSQL.
                units.append(Unit("function", _unquote_name(func_m.group(1)), "plpgsql", blank))
            elif func_m:
                units.append(Unit("function", _unquote_name(func_m.group(1)), language, body))
            else:
                units.append(Unit("do", f"{origin}: DO block #{k}", language, body))
            units.extend(_nested_units(body, origin))
        else:
            units.append(Unit("statement", f"{origin}: statement #{k}", "sql", blank))
            for seg in bodies:
                if seg.kind == "dollar":
                    units.extend(extract_units(seg.inner, origin))
    return units


def _nested_units(body: str, origin: str) -> Iterator[Unit]:
    """Code inside a body's own dollar quotes (dynamic DDL such as execute format($f$...))."""
    for seg in lex(body):
        if seg.kind == "dollar" and _CREATE_FUNCTION.search(
            render(lex(seg.inner), keep_strings=False)
        ):
            yield from extract_units(seg.inner, origin)


# --------------------------------------------------------------------------------------
# Finding reads of memory.facts in a unit.
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FactRead:
    unit: str
    snippet: str
    how: str  # sqlglot | fallback | dynamic-sql


@dataclass
class ScanStats:
    parsed: int = 0  # pieces whose facts references sqlglot accounted for
    fallback: int = 0  # references classified by the regex fallback
    reads: list[FactRead] = field(default_factory=list)


# A reference to the facts table, qualified or not ("facts_at", "p_facts", "v.facts",
# "fact_events" do not match).
_FACTS_REF = re.compile(r'(?<![\w.$"])(?P<q>"?memory"?\s*\.\s*)?"?facts"?(?![\w$"])', re.I)
_WRITE_TARGET_BEFORE = re.compile(
    r"(?:\bupdate\s+(?:only\s+)?|\binsert\s+into\s+|\bdelete\s+from\s+(?:only\s+)?"
    r"|\bmerge\s+into\s+|\btruncate\s+(?:table\s+)?(?:only\s+)?)$",
    re.I,
)
_TYPE_BEFORE = re.compile(r"(?:\bsetof|\breturns|::)\s*$", re.I)
_DECLARATION_BEFORE = re.compile(r"(?:^|[(,;]|\bdeclare)\s*([a-z_]\w*)\s+(?:constant\s+)?$", re.I)
_TYPE_AFTER = re.compile(r"^\s*(?:%rowtype|\[\])", re.I)
_DDL_STATEMENT = re.compile(r"^\s*(?:create|alter|drop|comment|grant|revoke)\b", re.I)
_DDL_BEFORE = re.compile(
    r"(?:\bon\s+(?:table\s+)?|\btable\s+(?:if\s+(?:not\s+)?exists\s+)?)$", re.I
)
_SQL_KEYWORDS = frozenset(
    {
        *("from", "join", "using", "only", "lateral", "into", "table", "update", "insert"),
        *("delete", "merge", "select", "where", "and", "or", "on", "not", "in", "exists"),
        *("returning", "set", "with", "as"),
    }
)
# Unqualified "facts" is only taken for the table where a table name can stand.
_UNQUALIFIED_TABLE_BEFORE = re.compile(
    r"(?:\b(?:from|join|using|table|lateral)\s+(?:only\s+)?|,\s*)$", re.I
)
_DYNAMIC_READ = re.compile(
    r'\b(?:from|join|using)\s+(?:only\s+)?"?memory"?\s*\.\s*"?facts"?(?![\w$"])', re.I
)
_SQL_START = re.compile(r"\b(with|select|insert|update|delete|merge|perform|table)\b", re.I)
_PIECE_END = re.compile(r"\b(loop|then)\b|[()]", re.I)


def _is_facts_table(t: exp.Table) -> bool:
    return (
        isinstance(t.this, exp.Identifier)
        and t.name.lower() == "facts"
        and t.db.lower() in ("", "memory")
        and not t.catalog
    )


def _table_role(t: exp.Table) -> str:
    """'write' (the target of a write), 'read' (a row source of a query, or the USING /
    FROM source of a write) or 'ddl' (named by DDL such as CREATE TRIGGER ... ON)."""
    parent, key = t.parent, t.arg_key
    if isinstance(parent, exp.Schema) and isinstance(parent.parent, exp.Insert):
        parent, key = parent.parent, parent.arg_key
    if isinstance(parent, (exp.Update, exp.Delete, exp.Insert, exp.Merge)):
        return "write" if key == "this" else "read"
    if t.find_ancestor(exp.Query, exp.From, exp.Join) is not None:
        return "read"
    return "ddl"


def _parse_clean(sql: str) -> exp.Expression | None:
    """One statement that sqlglot fully understands, else None."""
    text = re.sub(r"^\s*perform\b", "select", sql, flags=re.I)
    try:
        trees = sqlglot.parse(text, dialect="postgres", error_level=ErrorLevel.RAISE)
    except (SqlglotError, RecursionError, ValueError):
        return None
    found = [t for t in trees if t is not None]
    if len(found) != 1 or any(True for _ in found[0].find_all(exp.Command)):
        return None
    return cast("exp.Expression", found[0])


def _fallback_is_read(piece: str, m: re.Match[str]) -> bool:
    before = piece[: m.start()]
    after = piece[m.end() :]
    if _WRITE_TARGET_BEFORE.search(before) or _TYPE_AFTER.match(after):
        return False
    if _TYPE_BEFORE.search(before):
        return False
    decl = _DECLARATION_BEFORE.search(before)
    if decl and decl.group(1).lower() not in _SQL_KEYWORDS:
        return False  # "f memory.facts := ..." in a DECLARE section, or an argument type
    if _DDL_STATEMENT.match(piece) and _DDL_BEFORE.search(before):
        return False
    if not m.group("q"):
        return bool(_UNQUALIFIED_TABLE_BEFORE.search(before))
    return True  # any other mention of the qualified table counts as a read


def _sql_candidates(piece: str) -> Iterator[tuple[int, int]]:
    """Spans of piece that may hold one SQL statement: from a SQL keyword to the end of
    the piece, or to the first LOOP/THEN or unbalanced ')' after it."""
    for m in _SQL_START.finditer(piece):
        start = m.start()
        yield start, len(piece)
        depth = 0
        for e in _PIECE_END.finditer(piece, m.end()):
            tok = e.group(0).lower()
            if tok == "(":
                depth += 1
            elif tok == ")":
                depth -= 1
                if depth < 0:
                    yield start, e.start()
                    break
            elif depth == 0:
                yield start, e.start()
                break


def scan_piece(unit: Unit, piece: str, stats: ScanStats) -> None:
    refs = list(_FACTS_REF.finditer(piece))
    if not refs:
        return
    covered: list[tuple[int, int]] = []
    candidates = [(0, len(piece))] if unit.language == "sql" else list(_sql_candidates(piece))
    for start, end in candidates:
        if any(s <= start < e for s, e in covered):
            continue  # inside a statement already parsed
        if not any(start <= r.start() < end for r in refs):
            continue
        tree = _parse_clean(piece[start:end])
        if tree is None:
            continue
        tables = [t for t in tree.find_all(exp.Table) if _is_facts_table(t)]
        qualified = [r for r in refs if start <= r.start() < end and r.group("q")]
        if len([t for t in tables if t.db]) < len(qualified):
            continue  # sqlglot dropped part of the text: leave it to the fallback
        covered.append((start, end))
        stats.parsed += 1
        for t in tables:
            if _table_role(t) == "read":
                stats.reads.append(FactRead(unit.name, _snippet(piece, start, end), "sqlglot"))
    for r in refs:
        if any(s <= r.start() < e for s, e in covered):
            continue
        stats.fallback += 1
        if _fallback_is_read(piece, r):
            stats.reads.append(FactRead(unit.name, _snippet(piece, r.start(), r.end()), "fallback"))


def _snippet(text: str, start: int, end: int) -> str:
    return " ".join(text[max(0, start - 60) : min(len(text), end + 60)].split())[:200]


def scan_unit(unit: Unit, stats: ScanStats) -> None:
    segs = lex(unit.body)
    # Dynamic SQL: a read spelled inside a string literal of the body.
    for seg in segs:
        nested_function = seg.kind == "dollar" and _CREATE_FUNCTION.search(
            render(lex(seg.inner), keep_strings=False)
        )
        if seg.kind in ("string", "dollar") and not nested_function:  # nested: own unit
            for m in _DYNAMIC_READ.finditer(seg.inner):
                stats.reads.append(
                    FactRead(unit.name, _snippet(seg.inner, m.start(), m.end()), "dynamic-sql")
                )
    for stmt in split_statements(segs):
        scan_piece(unit, render(stmt, keep_strings=False), stats)


def fact_reads(sources: dict[str, str]) -> ScanStats:
    stats = ScanStats()
    for origin, src in sources.items():
        for unit in extract_units(src, origin):
            scan_unit(unit, stats)
    return stats


def forbidden_reads(sources: dict[str, str]) -> list[FactRead]:
    return [r for r in fact_reads(sources).reads if r.unit not in ALLOWED_FACT_READERS]


# --------------------------------------------------------------------------------------
# Tenancy of tables and keys.
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableInfo:
    name: str
    columns: tuple[str, ...]
    keys: tuple[tuple[str, tuple[str, ...]], ...]  # (constraint kind, key columns)
    parser: str  # sqlglot | fallback


_CREATE_TABLE = re.compile(
    r"^\s*create\s+(?:(?:global\s+|local\s+)?(?:temp|temporary|unlogged)\s+)?table\s+"
    r"(?:if\s+not\s+exists\s+)?([\w.\"]+)",
    re.I,
)
_CREATE_UNIQUE_INDEX = re.compile(r"^\s*create\s+unique\s+index\b", re.I)
_ALTER_ADD_KEY = re.compile(
    r"^\s*alter\s+table\s+(?:if\s+exists\s+)?(?:only\s+)?([\w.\"]+)\s+(.*)$", re.I | re.S
)


def _col_names(node: exp.Expression) -> tuple[str, ...]:
    names = [c.name.lower() for c in node.find_all(exp.Column)]
    names += [
        i.name.lower()
        for i in node.find_all(exp.Identifier)
        if not isinstance(i.parent, (exp.Column, exp.Table, exp.Constraint, exp.Var))
    ]
    return tuple(dict.fromkeys(names))


def _table_from_sqlglot(stmt: str) -> TableInfo | None:
    tree = _parse_clean(stmt)
    if not isinstance(tree, exp.Create) or not isinstance(tree.this, exp.Schema):
        return None
    schema = tree.this
    table = schema.this
    name = f"{table.db}.{table.name}".lower() if table.db else table.name.lower()
    columns: list[str] = []
    keys: list[tuple[str, tuple[str, ...]]] = []
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            col = item.name.lower()
            columns.append(col)
            for cons in item.args.get("constraints") or []:
                kind = cons.args.get("kind")
                if isinstance(kind, exp.PrimaryKeyColumnConstraint):
                    keys.append(("primary key", (col,)))
                elif isinstance(kind, exp.UniqueColumnConstraint):
                    keys.append(("unique", (col,)))
            continue
        for node in item.find_all(exp.Expression):
            if isinstance(node, exp.PrimaryKey):
                keys.append(("primary key", _col_names(exp.Tuple(expressions=node.expressions))))
            elif isinstance(node, exp.UniqueColumnConstraint) and node.this is not None:
                keys.append(("unique", _col_names(node.this)))
            elif isinstance(node, exp.ExcludeColumnConstraint):
                params = node.this
                cols = (
                    params.args.get("columns") or []
                    if isinstance(params, exp.IndexParameters)
                    else []
                )
                keys.append(("exclude", tuple(c for e in cols for c in _col_names(e))))
    return TableInfo(name, tuple(columns), tuple(keys), "sqlglot")


def _split_top_level_commas(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


_KEY_ELEMENT = re.compile(
    r"^(?:constraint\s+[\w\"]+\s+)?(primary\s+key|unique(?:\s+nulls\s+(?:not\s+)?distinct)?"
    r"|exclude(?:\s+using\s+\w+)?)\s*\((.*)\)",
    re.I | re.S,
)


def _paren_prefix(text: str) -> str:
    depth = 0
    for k, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and ch == ")":
            return text[: k + 1]
    return text


def _key_from_element(element: str) -> tuple[str, tuple[str, ...]] | None:
    m = _KEY_ELEMENT.match(element)
    if not m:
        return None
    kind = m.group(1).lower().split()[0]
    kind = "primary key" if kind == "primary" else kind
    body = _paren_prefix("(" + m.group(2) + ")")[1:-1]
    cols = []
    for part in _split_top_level_commas(body):
        part = re.sub(r"\s+with\s+\S+$", "", part, flags=re.I)  # EXCLUDE: col WITH op
        cols += [w.lower() for w in re.findall(r"[A-Za-z_]\w*", part)]
    return kind, tuple(cols)


def _table_from_fallback(stmt: str) -> TableInfo:
    """Token-level reading of CREATE TABLE name (element, element, ...)."""
    name = _unquote_name(_CREATE_TABLE.match(stmt).group(1))  # type: ignore[union-attr]
    body = _paren_prefix(stmt[stmt.index("(") :])[1:-1]
    columns: list[str] = []
    keys: list[tuple[str, tuple[str, ...]]] = []
    for element in _split_top_level_commas(body):
        key = _key_from_element(element)
        if key:
            keys.append(key)
            continue
        if re.match(r"^(?:constraint|check|foreign|like)\b", element, re.I):
            continue
        col = element.split()[0].strip('"').lower()
        columns.append(col)
        if re.search(r"\bprimary\s+key\b", element, re.I):
            keys.append(("primary key", (col,)))
        if re.search(r"\bunique\b", element, re.I):
            keys.append(("unique", (col,)))
    return TableInfo(name, tuple(columns), tuple(keys), "fallback")


def _unique_index_key(stmt: str) -> tuple[str, tuple[str, ...]]:
    """Name and key columns of CREATE UNIQUE INDEX (sqlglot, else the first parenthesised
    list after ON table)."""
    tree = _parse_clean(stmt)
    if isinstance(tree, exp.Create) and isinstance(tree.this, exp.Index):
        params = tree.this.args.get("params")
        cols = (params.args.get("columns") or []) if params is not None else []
        return tree.this.name, tuple(c for e in cols for c in _col_names(e))
    m = re.search(r"\bon\s+(?:only\s+)?[\w.\"]+\s*(?:using\s+\w+\s*)?(\(.*)", stmt, re.I | re.S)
    key = _key_from_element("unique " + _paren_prefix(m.group(1))) if m else None
    return stmt[:60], key[1] if key else ()


def table_problems(src: str) -> tuple[list[str], list[TableInfo]]:
    problems: list[str] = []
    tables: list[TableInfo] = []
    for stmt_segs in split_statements(lex(src)):
        stmt = render(stmt_segs, keep_strings=True).strip()
        if _CREATE_TABLE.match(stmt):
            info = _table_from_sqlglot(stmt) or _table_from_fallback(stmt)
            tables.append(info)
            if "org_id" not in info.columns:
                problems.append(f"table {info.name} has no org_id column")
            for kind, cols in info.keys:
                if "org_id" not in cols:
                    problems.append(f"{kind} ({', '.join(cols)}) on {info.name} lacks org_id")
        elif _CREATE_UNIQUE_INDEX.match(stmt):
            label, key = _unique_index_key(stmt)
            if "org_id" not in key:
                problems.append(f"unique index {label} ({', '.join(key)}) lacks org_id")
        elif alter := _ALTER_ADD_KEY.match(stmt):
            for clause in _split_top_level_commas(alter.group(2)):
                add = re.match(r"^add\s+(?:column\s+)?(.*)$", clause, re.I | re.S)
                if not add:
                    continue
                element = add.group(1)
                added = _key_from_element(element)
                if added is None and re.search(r"\b(primary\s+key|unique)\b", element, re.I):
                    added = ("unique", (element.split()[0].strip('"').lower(),))
                if added and "org_id" not in added[1]:
                    table = _unquote_name(alter.group(1))
                    problems.append(f"{added[0]} added to {table} lacks org_id")
    return problems, tables


# --------------------------------------------------------------------------------------
# The lints on the repository.
# --------------------------------------------------------------------------------------
def _function_sources() -> dict[str, str]:
    files = sorted((REPO / "functions").glob("*.sql"))
    assert files, "no functions/*.sql found"
    return {f.name: f.read_text() for f in files}


def _schema_sources() -> dict[str, str]:
    files = sorted((REPO / "sql").glob("*.sql"))
    assert files, "no sql/*.sql found"
    return {f.name: f.read_text() for f in files}


def test_only_the_effective_at_functions_read_facts() -> None:
    sources = _function_sources()
    bad = forbidden_reads(sources)
    assert not bad, "functions read memory.facts directly instead of memory.facts_at / " + (
        "memory_internal.fact_versions:\n"
        + "\n".join(f"  {r.unit} [{r.how}]: {r.snippet}" for r in bad)
    )


def test_lint_sees_the_two_sanctioned_readers() -> None:
    """Positive control on the real code: the scan does find the reads in the two
    functions that are allowed to make them (so a silent scanner cannot pass)."""
    stats = fact_reads(_function_sources())
    assert {r.unit for r in stats.reads} == ALLOWED_FACT_READERS
    # Both are LANGUAGE sql and parse cleanly: sqlglot, not the fallback, saw them.
    assert {r.how for r in stats.reads} == {"sqlglot"}
    assert stats.parsed > 0


def test_every_function_definition_is_extracted() -> None:
    sources = _function_sources()
    created = sum(
        len(re.findall(r"\bcreate\s+or\s+replace\s+function\b", src, re.I))
        for src in sources.values()
    )
    units = [u for origin, src in sources.items() for u in extract_units(src, origin)]
    functions = [u for u in units if u.kind == "function"]
    assert len(functions) == created
    names = {u.name for u in functions}
    # Including the one created by dynamic SQL inside a DO block.
    assert {"memory.normalize_text", "memory.assert_facts", *ALLOWED_FACT_READERS} <= names
    assert all(u.body.strip() for u in functions)
    assert {u.language for u in functions} == {"sql", "plpgsql"}


def test_tables_carry_org_id_and_keys_include_it() -> None:
    problems: list[str] = []
    tables: list[TableInfo] = []
    for name, src in _schema_sources().items():
        found, infos = table_problems(src)
        problems += [f"{name}: {p}" for p in found]
        tables += infos
    assert not problems, "\n".join(problems)
    # Positive control: the lint saw the tables and their keys.
    names = {t.name for t in tables}
    assert {"memory.orgs", "memory.facts", "memory.edges", "memory_internal.counters"} <= names
    facts = next(t for t in tables if t.name == "memory.facts")
    kinds = {k for k, _ in facts.keys}
    assert {"primary key", "exclude"} <= kinds
    orgs = next(t for t in tables if t.name == "memory.orgs")
    assert orgs.keys == (("primary key", ("org_id",)),)


# The project's write lock is taken through memory_internal.hold_project, which looks the
# project up again once it holds the lock (a caller that waited for delete_project then
# gets "not found", never a foreign key's refusal or an audit row of a deleted project).
# store_embeddings locks every project of a set of versions in one statement, and skips
# the versions a deletion took instead of failing.
PROJECT_LOCK_TAKERS = frozenset({"memory_internal.hold_project", "memory_worker.store_embeddings"})
_PROJECT_LOCK = re.compile(
    r"pg_advisory_xact_lock\w*\s*\(\s*memory_internal\.project_lock_key", re.I
)


def project_lock_takers(sources: dict[str, str]) -> set[str]:
    return {
        u.name
        for origin, src in sources.items()
        for u in extract_units(src, origin)
        if u.kind == "function" and _PROJECT_LOCK.search(render(lex(u.body), keep_strings=False))
    }


def test_the_project_lock_is_taken_by_hold_project() -> None:
    assert project_lock_takers(_function_sources()) == PROJECT_LOCK_TAKERS


def test_lint_sees_a_direct_project_lock() -> None:
    """Positive control: a function taking the lock itself is seen, a comment is not."""
    src = (
        "create or replace function memory.x(p uuid) returns void language plpgsql as $$\n"
        "begin\n  -- pg_advisory_xact_lock(memory_internal.project_lock_key(p))\n"
        "  perform pg_advisory_xact_lock_shared(memory_internal.project_lock_key(p));\nend $$;\n"
        "create or replace function memory.y(p uuid) returns void language plpgsql as $$\n"
        "begin\n  -- pg_advisory_xact_lock(memory_internal.project_lock_key(p))\nend $$;\n"
    )
    assert project_lock_takers({"x.sql": src}) == {"memory.x"}


# --------------------------------------------------------------------------------------
# Self-tests of the lint on synthetic snippets.
# --------------------------------------------------------------------------------------
def _fn(name: str, body: str, language: str = "plpgsql") -> str:
    returns = "setof memory.facts" if language == "sql" else "void"
    return (
        f"create or replace function {name}(p_project uuid) returns {returns}\n"
        f"  language {language}\n  as $$\n{body}\n$$;\n"
        f"comment on function {name}(uuid) is 'reads memory.facts_at only';\n"
    )


def _reads(src: str) -> list[FactRead]:
    return forbidden_reads({"snippet.sql": src})


READING_SNIPPETS = {
    "sql from": _fn(
        "memory.bad", "select f.* from memory.facts f where f.project_id = p_project", "sql"
    ),
    "plpgsql select into": _fn(
        "memory.bad",
        "declare n int;\nbegin\n  select count(*) into n from memory.facts f\n"
        "   where f.project_id = p_project;\nend",
    ),
    "join": _fn(
        "memory.bad",
        "begin\n  perform 1 from memory.entities e\n"
        "    join memory.facts f on f.subject_id = e.entity_id;\nend",
    ),
    "comma join in a FOR loop": _fn(
        "memory.bad",
        "declare r record;\nbegin\n  for r in select * from memory.entities e, memory.facts f\n"
        "    where f.subject_id = e.entity_id loop\n    raise notice '%', r;\n  end loop;\nend",
    ),
    "IF EXISTS subquery": _fn(
        "memory.bad",
        "begin\n  if exists (select from memory.facts where project_id = p_project) then\n"
        "    return;\n  end if;\nend",
    ),
    "update ... from facts": _fn(
        "memory.bad",
        "begin\n  update memory.edges e set expired_at = now() from memory.facts f\n"
        "   where f.subject_id = e.source_id;\nend",
    ),
    "delete ... using facts": _fn(
        "memory.bad",
        "begin\n  delete from memory.edges e using memory.facts f\n"
        "   where f.subject_id = e.source_id;\nend",
    ),
    "unqualified via search_path": _fn(
        "memory.bad", "begin\n  perform 1 from facts f where f.project_id = p_project;\nend"
    ),
    "quoted identifiers": _fn("memory.bad", 'begin\n  perform 1 from "memory"."facts" f;\nend'),
    "dynamic SQL": _fn(
        "memory.bad",
        "begin\n  execute 'select count(*) from memory.facts where project_id = $1';\nend",
    ),
    "nested in a DO block": (
        "do $do$ begin execute format($f$ create or replace function memory.bad() returns bigint "
        "language sql as $body$ select count(*) from memory.facts $body$ $f$); end $do$;"
    ),
    "a view": "create view memory.all_facts as select * from memory.facts;",
    "SQL-standard body": (
        "create function memory.bad(p uuid) returns bigint language sql stable\n"
        "  return (select count(*) from memory.facts f where f.project_id = p);"
    ),
    "subquery in an assignment": _fn(
        "memory.bad",
        "begin\n  v_x := coalesce((select max(valid_from) from memory.facts), now());\nend",
    ),
}


@pytest.mark.parametrize("label", list(READING_SNIPPETS))
def test_lint_flags_reads_of_facts(label: str) -> None:
    assert _reads(READING_SNIPPETS[label]), f"lint missed a read ({label})"


# ~>=~ (text pattern comparison) is valid PostgreSQL that sqlglot cannot parse: these
# pieces reach the regex fallback, which must still tell reads from writes.
UNPARSABLE = "f.content ~>=~ 'm'"
FALLBACK_SNIPPETS = {
    "comma join": (
        True,
        f"for r in select * from memory.entities e, memory.facts f where {UNPARSABLE} loop",
    ),
    "from": (True, f"perform 1 from memory.facts f where {UNPARSABLE};"),
    "join": (True, f"perform 1 from memory.edges e join memory.facts f on {UNPARSABLE};"),
    "unqualified": (True, f"perform 1 from facts f where {UNPARSABLE};"),
    "update target": (False, f"update memory.facts f set confidence = 1 where {UNPARSABLE};"),
    "delete target": (False, f"delete from memory.facts f where {UNPARSABLE};"),
    "update with a facts source": (
        True,
        f"update memory.edges e set expired_at = now() from memory.facts f where {UNPARSABLE};",
    ),
    "declaration": (False, f"declare f memory.facts := null; b boolean := {UNPARSABLE};"),
    "facts_at": (False, f"perform 1 from memory.facts_at(p_project) f where {UNPARSABLE};"),
}


@pytest.mark.parametrize("label", list(FALLBACK_SNIPPETS))
def test_lint_fallback_classifies_unparsable_pieces(label: str) -> None:
    is_read, code = FALLBACK_SNIPPETS[label]
    body = code if code.startswith("declare") else f"declare r record;\nbegin\n  {code}\nend"
    unit = Unit("function", "memory.bad", "plpgsql", body)
    pieces = [render(stmt, keep_strings=False) for stmt in split_statements(lex(body))]
    parsable = [
        piece[a:b]
        for piece in pieces
        for a, b in _sql_candidates(piece)
        if _FACTS_REF.search(piece[a:b]) and _parse_clean(piece[a:b]) is not None
    ]
    assert parsable == [], "sqlglot parses the snippet: it would not exercise the fallback"
    stats = ScanStats()
    scan_unit(unit, stats)
    assert stats.fallback == len(_FACTS_REF.findall(body))
    assert [r.how for r in stats.reads] == (["fallback"] if is_read else [])


CLEAN_SNIPPETS = {
    "facts_at in sql": _fn(
        "memory.good",
        "select f.* from memory.facts_at(p_project) f where f.confidence > 0.5",
        "sql",
    ),
    "facts_at in plpgsql": _fn(
        "memory.good",
        "declare n int;\nbegin\n"
        "  select count(*) into n from memory.facts_at(p_project, now(), now()) f;\nend",
    ),
    "update facts": _fn(
        "memory.good",
        "begin\n  update memory.facts f set support_count = f.support_count + 1\n"
        "   where f.fact_id in\n"
        "     (select v.fact_id from memory_internal.fact_versions(p_project) v);\nend",
    ),
    "insert into facts": _fn(
        "memory.good",
        "declare v uuid;\nbegin\n"
        "  insert into memory.facts (org_id, project_id) values (null, p_project)\n"
        "  returning fact_id into v;\nend",
    ),
    "delete from facts": _fn(
        "memory.good", "begin\n  delete from memory.facts where project_id = p_project;\nend"
    ),
    "row type declaration": _fn(
        "memory.good",
        "declare\n  f memory.facts := null;\n  g memory.facts%rowtype;\nbegin\n  return;\nend",
    ),
    "other tables and comments": _fn(
        "memory.good",
        "begin\n  -- never: select * from memory.facts\n"
        "  perform 1 from memory.fact_events e, memory.entities p_facts;\n"
        "  raise notice 'see memory.facts_at';\nend",
    ),
    "sanctioned reader": _fn(
        "memory.facts_at", "select f.* from memory.facts f where f.project_id = p_project", "sql"
    ),
    "trigger and grant DDL": (
        "create trigger t before update on memory.facts for each row execute function x();\n"
        "grant select on memory.facts to chronomem_analyst;\n"
    ),
}


@pytest.mark.parametrize("label", list(CLEAN_SNIPPETS))
def test_lint_accepts_writes_and_effective_at_reads(label: str) -> None:
    assert _reads(CLEAN_SNIPPETS[label]) == []


def test_lint_flags_the_reader_but_not_the_writer_in_one_file() -> None:
    src = CLEAN_SNIPPETS["update facts"] + READING_SNIPPETS["join"]
    bad = _reads(src)
    assert {r.unit for r in bad} == {"memory.bad"}


GOOD_TABLE = """
create table memory.things (
  org_id uuid not null,
  project_id uuid not null,
  thing_id uuid not null,
  name text not null, -- a comment with a comma, and (parens)
  primary key (org_id, thing_id),
  unique (org_id, project_id, name),
  constraint things_no_overlap exclude using gist (org_id with =, thing_id with =) where (true)
);
create unique index things_name_idx on memory.things (org_id, lower(name));
"""


def test_table_lint_accepts_a_tenant_scoped_table() -> None:
    problems, tables = table_problems(GOOD_TABLE)
    assert problems == []
    assert len(tables) == 1 and {k for k, _ in tables[0].keys} == {
        "primary key",
        "unique",
        "exclude",
    }


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ("create table memory.loose (id uuid primary key, name text);", "has no org_id column"),
        ("create table memory.t (org_id uuid, id uuid primary key);", "primary key (id)"),
        ("create table memory.t (org_id uuid, id uuid, primary key (id));", "primary key (id)"),
        ("create table memory.t (org_id uuid, name text unique);", "unique (name)"),
        ("create table memory.t (org_id uuid, a int, b int, unique (a, b));", "unique (a, b)"),
        (
            "create table memory.t (org_id uuid, r tstzrange, exclude using gist (r with &&));",
            "exclude (r)",
        ),
        ("create unique index t_idx on memory.t (name) where name <> '';", "unique index t_idx"),
        ("alter table memory.t add constraint t_u unique (name);", "unique added to memory.t"),
    ],
)
def test_table_lint_flags_keys_without_org_id(snippet: str, expected: str) -> None:
    problems, _ = table_problems(snippet)
    assert any(expected in p for p in problems), problems


def test_table_fallback_parser_agrees_with_sqlglot() -> None:
    """Statements sqlglot cannot parse go to the fallback; on the real schema both
    readers must see the same columns and keys."""
    for src in _schema_sources().values():
        for segs in split_statements(lex(src)):
            stmt = render(segs, keep_strings=True).strip()
            if not _CREATE_TABLE.match(stmt):
                continue
            fallback = _table_from_fallback(stmt)
            parsed = _table_from_sqlglot(stmt)
            assert parsed is not None, f"sqlglot could not parse {fallback.name}"
            assert set(parsed.columns) == set(fallback.columns), fallback.name
            assert sorted(parsed.keys) == sorted(fallback.keys), fallback.name
