"""Every public SQL function (schemas memory, memory_http and memory_worker) has a test
that names it: a pgTAP file in tests/sql, or, for the few a pgTAP file cannot drive, a
pytest module. The HTTP layer's wrappers (memory_http.*, outside the keys and
authorization of functions/086_http_auth.sql) are each called by a route of thin_api,
which the API tests exercise over a real server process."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCHEMAS = ("memory", "memory_http", "memory_worker")
_DEFINED = re.compile(
    r"create\s+or\s+replace\s+function\s+(memory|memory_http|memory_worker)\.(\w+)\s*\(", re.I
)
# The keys and authorization: pgTAP drives them; a route's call does not count.
AUTH_FILE = "086_http_auth.sql"

# Functions whose tests are pytest modules, with why not pgTAP.
PYTEST_ONLY = {
    # Owner-only and installation-wide: switches every embedding column's dimension
    # and rebuilds the HNSW indexes (DDL), then the worker re-embeds.
    "memory.reembed": "test_reembed.py",
    "memory.embedding_model": "test_reembed.py",
}


def _defined() -> dict[str, str]:
    """Each public function's qualified name, and the file that defines it."""
    return {
        f"{m.group(1)}.{m.group(2)}": f.name
        for f in sorted((REPO / "functions").glob("*.sql"))
        for m in _DEFINED.finditer(f.read_text())
    }


def _text(folder: str, pattern: str, *, skip: tuple[str, ...] = ()) -> str:
    return "\n".join(
        f.read_text() for f in sorted((REPO / folder).glob(pattern)) if f.name not in skip
    )


def _named(qualified: str, text: str) -> bool:
    return re.search(rf"\b{re.escape(qualified)}\s*\(", text) is not None


def test_every_public_function_has_a_test_that_names_it() -> None:
    defined = _defined()
    pgtap = _text("tests/sql", "test_*.sql")
    routes = _text("thin_api", "**/*.py")
    missing = []
    for name, file in sorted(defined.items()):
        wrapper = name.startswith("memory_http.") and file != AUTH_FILE
        if wrapper and _named(name, routes):
            continue  # an HTTP route's wrapper: the API tests call the route
        if name in PYTEST_ONLY:
            module = (REPO / "tests" / "py" / PYTEST_ONLY[name]).read_text()
            if name.split(".")[1] not in module:
                missing.append(f"{name}: not named in tests/py/{PYTEST_ONLY[name]}")
        elif not _named(name, pgtap):
            missing.append(f"{name}: no pgTAP file in tests/sql calls it")
    assert not missing, "\n".join(missing)


def test_the_coverage_check_sees_the_functions() -> None:
    """Positive control: the scan finds the core functions of each schema and the pgTAP
    calls of them, and a name no file calls is reported."""
    defined = _defined()
    assert {
        "memory.assert_facts",
        "memory.facts_at",
        "memory.search",
        "memory.wipe",
        "memory_http.search",
        "memory_http.authorize",
        "memory_worker.claim_jobs",
    } <= defined.keys()
    assert {n.split(".")[0] for n in defined} == set(SCHEMAS)
    assert defined["memory_http.authorize"] == AUTH_FILE
    assert len(defined) > 80
    pgtap = _text("tests/sql", "test_*.sql")
    assert _named("memory.assert_facts", pgtap) and not _named("memory.no_such_function", pgtap)
    # A schema's name is part of the match: memory.search does not count for memory_http's.
    assert not _named("memory_http.search", "select memory.search(1)")
    assert set(PYTEST_ONLY) <= defined.keys()
