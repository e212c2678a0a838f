"""Session fixtures: one migrated test database for pgTAP files and pytest tests.

This conftest sits in tests/ rather than tests/py/ because pytest only applies a
conftest to tests below it, and the pgTAP files in tests/sql/ need the same database
(through the pgtap_connection and _pgtap_runner overrides below).
"""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.abc import Query
from psycopg.rows import scalar_row
from pytest_pgtap.pgtap import Runner
from testdb import (
    MissingPgTap,
    TestDatabase,
    admin_server,
    provision,
    server_lock,
    worker_suffix,
)

from chronomem.bootstrap import bootstrap
from chronomem.dsn import with_params
from chronomem.migrate import migrate


def pytest_configure(config: pytest.Config) -> None:
    """In the main process, before pytest-xdist starts its workers (they inherit the
    environment): one password for the test roles, which are server-wide, so that
    workers sharing a DATABASE_URL server do not reset each other's."""
    if not hasattr(config, "workerinput"):
        os.environ.setdefault("CHRONOMEM_TEST_ROLE_PASSWORD", secrets.token_urlsafe(16))


# The slowest files (tens of seconds each), slowest first: under pytest-xdist they
# start first, so that none starts last and holds the run while the other workers idle.
SLOW_FILES = (
    "tests/py/test_python_lint.py",
    "tests/py/test_known_at_replay.py",
    "tests/py/test_cli_smoke.py",
    "tests/py/test_client_typescript.py",
    "tests/py/test_console.py",
    "tests/py/test_embedded_memory.py",
    "tests/py/test_api_limits.py",
    "tests/py/test_api.py",
    "tests/py/test_worker.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker (scripts/test runs with `--dist loadfile
    --no-loadscope-reorder`: files go out in this order), the pgTAP files first, as
    in pytest's order (some count rows, such as queued jobs, that the Python tests
    leave behind in the worker's database), then SLOW_FILES, and the files of a light
    environment (their module's LIGHT_ENV, tests/py/light_env.py) last, so that pip
    has built those environments by the time their tests start. Every worker sorts
    the same collection the same way, as xdist requires; a run in one process keeps
    pytest's order."""
    if not hasattr(config, "workerinput"):
        return
    slow = {path: rank for rank, path in enumerate(SLOW_FILES)}

    def place(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::", 1)[0]
        if path.startswith("tests/sql/"):
            return (0, 0)
        if path in slow:
            return (1, slow[path])
        module = getattr(item, "module", None)
        return (3, 0) if getattr(module, "LIGHT_ENV", None) is not None else (2, 0)

    items.sort(key=place)  # stable: pytest's order within each group and file


@pytest.fixture(scope="session")
def chronomem_db() -> Iterator[TestDatabase]:
    with admin_server() as server_admin:
        try:
            db = provision(server_admin)
        except MissingPgTap as err:
            pytest.fail(str(err), pytrace=False)
        os.environ.update(db.env())
        yield db


@pytest.fixture(scope="session")
def admin_dsn(chronomem_db: TestDatabase) -> str:
    """Superuser on the test database."""
    return chronomem_db.admin


@pytest.fixture(scope="session")
def owner_dsn(chronomem_db: TestDatabase) -> str:
    return chronomem_db.owner


@pytest.fixture(scope="session")
def app_dsn(chronomem_db: TestDatabase) -> str:
    return chronomem_db.app


@pytest.fixture(scope="session")
def analyst_dsn(chronomem_db: TestDatabase) -> str:
    return chronomem_db.analyst


@pytest.fixture(scope="module")
def conn(app_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """One app-role connection for a test module (no autocommit; a stuck lock fails
    after 30 s instead of hanging). Modules that need another kind define their own."""
    with psycopg.connect(app_dsn, autocommit=False) as c:
        c.execute("set statement_timeout = '30s'")
        c.commit()
        yield c


@pytest.fixture(scope="module")
def org(conn: psycopg.Connection[Any], request: pytest.FixtureRequest) -> uuid.UUID:
    """An org of the test module's own, named after it."""
    with conn.transaction():
        row = conn.execute("select memory.create_org(%s)", (request.module.__name__,)).fetchone()
    assert row is not None
    org_id: uuid.UUID = row[0]
    return org_id


PGTAP_FIXTURES = Path(__file__).parent / "sql" / "fixtures.sql"


@pytest.fixture(scope="session")
def pgtap_connection(admin_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """Superuser connection, so pgTAP files can `set role` to the app/analyst roles,
    with the files' shared fixtures (tests/sql/fixtures.sql: temp tables and pg_temp
    functions) created once, committed; each file's rows in them roll back with it."""
    with psycopg.connect(admin_dsn) as conn:
        conn.execute(PGTAP_FIXTURES.read_text())
        conn.commit()
        yield conn


class RollbackRunner(Runner):
    """Runs a test file, then always rolls back.

    The stock Runner wraps each file in conn.transaction(). A file in the standard
    `BEGIN; select plan(n); ... ROLLBACK;` form works under it (the server only warns
    "already a transaction in progress" / "no transaction in progress"), but a file
    that forgets its ROLLBACK would be committed into the shared test database. Here
    the file runs in the connection's implicit transaction and is rolled back whatever
    it did, so it cannot leak state into the next file.
    """

    def run(self, query: Query) -> list[str]:
        try:
            cur = self.conn.cursor(row_factory=scalar_row)
            cur.execute(query)
            return self._collectrows(cur)
        finally:
            self.conn.rollback()


@pytest.fixture(scope="session")
def _pgtap_runner(pgtap_connection: psycopg.Connection[Any]) -> Runner:
    return RollbackRunner(pgtap_connection)


@contextmanager
def _fresh_database(admin_dsn: str, owner_dsn: str, name: str) -> Iterator[str]:
    server = with_params(admin_dsn, dbname="postgres")
    name += worker_suffix()  # xdist workers may share the server (DATABASE_URL)
    drop = sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(drop)
    with server_lock(server):
        bootstrap(server, name)
        migrate(with_params(owner_dsn, dbname=name))
    try:
        yield with_params(admin_dsn, dbname=name)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(drop)


@pytest.fixture
def fresh_install(admin_dsn: str, owner_dsn: str) -> Iterator[str]:
    """A new database on the test server, bootstrapped and migrated as `chronomem up`
    sets one up, with nothing written and nothing analyzed; yields a superuser DSN."""
    with _fresh_database(admin_dsn, owner_dsn, "chronomem_test_fresh") as dsn:
        yield dsn


@pytest.fixture(scope="module")
def fresh_install_module(admin_dsn: str, owner_dsn: str) -> Iterator[str]:
    """fresh_install shared by a module's tests (which must leave it as they found it)."""
    with _fresh_database(admin_dsn, owner_dsn, "chronomem_test_fresh_module") as dsn:
        yield dsn
