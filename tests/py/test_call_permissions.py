"""Which permission a call needs is stated once, in SQL (memory_http.call_permissions()):
every SQL call a route or an MCP tool makes is listed there, and the API's permission
vocabulary is SQL's."""

from __future__ import annotations

import ast
import typing
from pathlib import Path
from typing import Any

import psycopg

from thin_api import models
from thin_api.db import called_function

THIN_API = Path(__file__).resolve().parents[2] / "thin_api"


def _queries() -> dict[str, set[str]]:
    """Every SQL string (a literal beginning with select) in the routes, the console's
    pages and the MCP server that calls a memory or memory_http function: the function
    -> the files."""
    found: dict[str, set[str]] = {}
    files = [
        *sorted((THIN_API / "routes").glob("*.py")),
        *sorted((THIN_API / "console").glob("*.py")),
        THIN_API / "mcp_server.py",
    ]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value.strip()
                if text.startswith("select ") and ("memory." in text or "memory_http." in text):
                    found.setdefault(called_function(text), set()).add(path.name)
    return found


def test_every_call_the_routes_and_tools_make_is_listed(conn: psycopg.Connection[Any]) -> None:
    calls = _queries()
    # Control: the scan sees both layers and the calls a user relies on.
    assert {"memory_http.assert_facts", "memory.list_facts", "memory_http.search"} <= set(calls)
    assert any("mcp_server.py" in files for files in calls.values())
    listed = {row[0] for row in conn.execute("select call from memory_http.call_permissions()")}
    assert set(calls) <= listed, sorted(set(calls) - listed)
    # Nothing is listed that no route or tool calls (a stale row would grant nothing, but
    # it would mislead).
    assert listed <= set(calls), sorted(listed - set(calls))


def test_the_api_permission_vocabulary_is_sqls(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute("select memory_http.permissions()").fetchone()
    assert row is not None
    assert set(typing.get_args(models.Permission)) == set(row[0])
    assert "project:write" in row[0]  # control
