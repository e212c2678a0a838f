"""Test database provisioning, shared by the fixtures in tests/conftest.py.

The server comes from DATABASE_URL, else from testcontainers when a Docker daemon
answers, else from an embedded server in a temp dir. On it, a fresh database
`chronomem_test` is bootstrapped and migrated exactly as `chronomem up` would.

Under pytest-xdist (scripts/test runs the suite so) each worker process provisions
its own: a container or embedded server of its own, and on a shared DATABASE_URL
server a database of its own (`chronomem_test_gw0`, ...), set up one worker at a time
(`server_lock`), since the roles bootstrap and the migrations create are server-wide.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from chronomem import embedded
from chronomem.bootstrap import bootstrap, set_login_passwords
from chronomem.citus_forms import apply_forms
from chronomem.dsn import role_dsn, with_params
from chronomem.migrate import migrate
from chronomem.settings import ANALYST_ROLE, APP_ROLE


def worker_suffix() -> str:
    """The empty string in a plain pytest run; "_gw0", "_gw1", ... in a pytest-xdist
    worker, for the names of databases that must not be another worker's on a shared
    server."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return f"_{worker}" if worker else ""


TEST_DB = "chronomem_test" + worker_suffix()
# pg_advisory_lock key of server_lock (any fixed bigint; its bytes spell "chronote").
_SERVER_LOCK_KEY = 0x6368726F6E6F7465
PGVECTOR_IMAGE = "pgvector/pgvector:pg17"
_IMAGE_EXTENSION_DIR = "/usr/share/postgresql/17/extension"


class MissingPgTap(RuntimeError):
    pass


@dataclass(frozen=True)
class TestDatabase:
    admin: str  # superuser, on the test database
    owner: str
    app: str
    analyst: str

    def env(self) -> dict[str, str]:
        """For subprocess-based tests."""
        return {
            "CHRONOMEM_TEST_ADMIN_DSN": self.admin,
            "CHRONOMEM_TEST_OWNER_DSN": self.owner,
            "CHRONOMEM_TEST_APP_DSN": self.app,
            "CHRONOMEM_TEST_ANALYST_DSN": self.analyst,
        }


def docker_available() -> bool:
    """Cheap check: a socket or DOCKER_HOST must exist, and the daemon must answer a ping."""
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        return False
    try:
        import docker  # comes with testcontainers

        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


@contextmanager
def _container() -> Iterator[str]:
    from testcontainers.postgres import PostgresContainer

    container = PostgresContainer(PGVECTOR_IMAGE, driver=None)
    # The image has no pgTAP: mount the files scripts/test fetched into its share dir.
    pgtap_dir = os.environ.get("CHRONOMEM_PGTAP_DIR")
    for path in sorted(Path(pgtap_dir).glob("pgtap*")) if pgtap_dir else []:
        container.with_volume_mapping(str(path), f"{_IMAGE_EXTENSION_DIR}/{path.name}", "ro")
    with container:
        yield container.get_connection_url()


@contextmanager
def embedded_data_dir() -> Iterator[Path]:
    """A temp dir for an embedded server's data.

    Not under pytest's tmp_path: as root the server runs as another OS user that must
    traverse the path, and every pytest session start (any other one on the machine
    too) resets /tmp/pytest-of-root to 0700.
    """
    path = Path(tempfile.mkdtemp(prefix="chronomem-test-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def admin_server() -> Iterator[str]:
    """Yield a superuser DSN to a server that lives as long as the context."""
    if url := os.environ.get("DATABASE_URL"):
        yield url
    elif docker_available():
        with _container() as url:
            yield url
    else:
        with embedded_data_dir() as data_dir:
            server = embedded.start(data_dir / "pg", cleanup_mode="delete")
            try:
                yield embedded.superuser_dsn(server)
            finally:
                server.cleanup()


@contextmanager
def server_lock(server_admin: str) -> Iterator[None]:
    """Held while a database is bootstrapped and migrated: pytest-xdist workers that
    share a server (DATABASE_URL) would otherwise create the same roles at once. An
    advisory lock belongs to one database, so every holder takes it in `postgres`."""
    with psycopg.connect(with_params(server_admin, dbname="postgres"), autocommit=True) as conn:
        conn.execute("select pg_advisory_lock(%s)", [_SERVER_LOCK_KEY])
        try:
            yield
        finally:
            conn.execute("select pg_advisory_unlock(%s)", [_SERVER_LOCK_KEY])


def provision(server_admin: str) -> TestDatabase:
    """Drop and recreate the test database, bootstrap it, add pgTAP, migrate."""
    with server_lock(server_admin):
        return _provision(server_admin)


def _provision(server_admin: str) -> TestDatabase:
    with psycopg.connect(server_admin, autocommit=True) as conn:
        drop = sql.SQL("drop database if exists {} with (force)")
        conn.execute(drop.format(sql.Identifier(TEST_DB)))

    # Where the server asks for passwords (container, DATABASE_URL over TCP) the roles
    # need one too; roles are server-wide, so use a throwaway server for tests.
    # The same in every xdist worker: tests/conftest.py's pytest_configure sets
    # CHRONOMEM_TEST_ROLE_PASSWORD before the workers start.
    password = None
    if conninfo_to_dict(server_admin).get("password"):
        password = os.environ.get("CHRONOMEM_TEST_ROLE_PASSWORD") or secrets.token_urlsafe(16)

    owner = bootstrap(server_admin, TEST_DB, password)
    admin = with_params(server_admin, dbname=TEST_DB)
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("create extension if not exists pgtap")
    except (psycopg.errors.FeatureNotSupported, psycopg.errors.UndefinedFile) as err:
        raise MissingPgTap(
            f"pgTAP is not installed on the test server ({err}). Run ./scripts/test, which "
            "installs it into the embedded server; for DATABASE_URL install "
            "postgresql-NN-pgtap on that server."
        ) from err
    migrate(owner)
    if os.environ.get("CHRONOMEM_CITUS_FORMS"):
        # The functions as `chronomem distribute` leaves them on Citus, on one server:
        # the suites then check that those forms keep every rule (chronomem.citus_forms).
        with psycopg.connect(owner) as conn:
            print(f"\ncitus forms: {apply_forms(conn).summary()}", flush=True)
    set_login_passwords(admin, {APP_ROLE: password, ANALYST_ROLE: password})
    return TestDatabase(
        admin=admin,
        owner=owner,
        app=role_dsn(owner, APP_ROLE, password),
        analyst=role_dsn(owner, ANALYST_ROLE, password),
    )
