"""Revisions that convert stored rows, run against rows stored at the revision before them.

Each test builds its own database (bootstrapped as `chronomem up` does), migrates it to the
revision before the one under test, stores rows the way that revision's code did, then
migrates to head and reads what became of them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from alembic import command
from psycopg import sql

from chronomem.bootstrap import bootstrap
from chronomem.dsn import with_params
from chronomem.migrate import alembic_config, migrate

DB = "chronomem_migration_data_test"

# The vocabulary before revision 0023, and since.
TYPES_0005 = ["episode.enriched", "fact.contradicted", "fact.retracted", "fact.superseded",
              "memory.wiped"]  # fmt: skip
TYPES_0023 = sorted([*TYPES_0005, "fact.expired", "fact.restored"])


@pytest.fixture
def server_admin(admin_dsn: str) -> Iterator[str]:
    admin = with_params(admin_dsn, dbname="postgres")
    yield admin
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(DB)))


def at_revision(server_admin: str, revision: str) -> tuple[str, str]:
    """A new database migrated to `revision`: (owner DSN, superuser DSN)."""
    with psycopg.connect(server_admin, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(DB)))
    owner = bootstrap(server_admin, DB)
    command.upgrade(alembic_config(owner), revision)
    return owner, with_params(server_admin, dbname=DB)


def test_0024_every_type_lists_become_the_wildcard(server_admin: str) -> None:
    owner, admin = at_revision(server_admin, "0023")
    org, project = uuid.uuid4(), uuid.uuid4()
    stored: dict[str, list[str]] = {
        "five": TYPES_0005,  # "no filter" before 0023
        "seven": TYPES_0023,  # "no filter" since
        "narrow": ["fact.retracted", "fact.superseded"],
        "six": sorted([*TYPES_0005, "fact.expired"]),  # chosen one by one: kept
    }
    # The superuser writes past row-level security, as the revision's own code wrote.
    with psycopg.connect(admin) as conn:
        conn.execute("insert into memory.orgs (org_id, name) values (%s, 'o')", (org,))
        conn.execute(
            "insert into memory.projects (org_id, project_id, name) values (%s, %s, 'p')",
            (org, project),
        )
        for name, types in stored.items():
            conn.execute(
                "insert into memory.webhook_endpoints (org_id, project_id, url, event_types) "
                "values (%s, %s, %s, %s)",
                (org, project, f"https://example.com/{name}", types),
            )
    migrate(owner)
    with psycopg.connect(admin) as conn:
        rows: dict[str, Any] = dict(
            conn.execute(
                "select substr(url, 21), event_types from memory.webhook_endpoints"
            ).fetchall()
        )
        assert rows == {
            "five": ["*"],
            "seven": ["*"],
            "narrow": ["fact.retracted", "fact.superseded"],
            "six": stored["six"],
        }
        # The wildcard is the only entry it may be.
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(
                "update memory.webhook_endpoints set event_types = '{*,memory.wiped}' "
                "where url like '%%/narrow'"
            )
