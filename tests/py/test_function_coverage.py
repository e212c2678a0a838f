"""Every public SQL function (schema memory) has a test that names it: a pgTAP file in
tests/sql, or, for the few a pgTAP file cannot drive, a pytest module. The HTTP API's
wrappers (memory.api_*) are each called by a route of thin_api, which the API tests
exercise over a real server process."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_DEFINED = re.compile(r"create\s+or\s+replace\s+function\s+memory\.(\w+)\s*\(", re.I)

# Functions whose tests are pytest modules, with why not pgTAP.
PYTEST_ONLY = {
    # Owner-only and installation-wide: switches every embedding column's dimension
    # and rebuilds the HNSW indexes (DDL), then the worker re-embeds.
    "reembed": "test_reembed.py",
    "embedding_model": "test_reembed.py",
}


def _defined() -> set[str]:
    return {
        m.group(1)
        for f in sorted((REPO / "functions").glob("*.sql"))
        for m in _DEFINED.finditer(f.read_text())
    }


def _text(folder: str, pattern: str, *, skip: tuple[str, ...] = ()) -> str:
    return "\n".join(
        f.read_text() for f in sorted((REPO / folder).glob(pattern)) if f.name not in skip
    )


def _named(name: str, text: str) -> bool:
    return re.search(rf"\bmemory\.{name}\s*\(", text) is not None


def test_every_public_function_has_a_test_that_names_it() -> None:
    defined = _defined()
    pgtap = _text("tests/sql", "test_*.sql")
    routes = _text("thin_api", "**/*.py")
    missing = []
    for name in sorted(defined):
        if name.startswith("api_") and _named(name, routes):
            continue  # an HTTP route's wrapper: the API tests call the route
        if name in PYTEST_ONLY:
            module = (REPO / "tests" / "py" / PYTEST_ONLY[name]).read_text()
            if name not in module:
                missing.append(f"memory.{name}: not named in tests/py/{PYTEST_ONLY[name]}")
        elif not _named(name, pgtap):
            missing.append(f"memory.{name}: no pgTAP file in tests/sql calls it")
    assert not missing, "\n".join(missing)


def test_the_coverage_check_sees_the_functions() -> None:
    """Positive control: the scan finds the core functions and the pgTAP calls of them,
    and a name no file calls is reported."""
    defined = _defined()
    assert {"assert_facts", "facts_at", "search", "wipe", "api_search"} <= defined
    assert len(defined) > 80
    pgtap = _text("tests/sql", "test_*.sql")
    assert _named("assert_facts", pgtap) and not _named("no_such_function", pgtap)
    assert set(PYTEST_ONLY) <= defined
