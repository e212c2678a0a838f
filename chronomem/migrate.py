"""Schema migrations: Alembic revisions (versioned DDL from sql/), then functions/.

Revisions are forward-only and each one runs one file of sql/ verbatim; functions/
holds CREATE OR REPLACE files that are re-applied after every upgrade, so changing a
function never needs a revision.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool

from chronomem.dsn import sqlalchemy_url
from chronomem.paths import ALEMBIC_INI, FUNCTIONS_DIR, MIGRATIONS_DIR, SQL_DIR


class MigrationError(RuntimeError):
    pass


def alembic_config(dsn: str | None = None) -> Config:
    cfg = Config(str(ALEMBIC_INI))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if dsn is not None:
        # Config values go through ConfigParser interpolation: escape percent-encodings.
        cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(dsn).replace("%", "%%"))
    # Keep the caller's logging setup; env.py only configures logging for the alembic CLI.
    cfg.attributes["configure_logger"] = False
    return cfg


def run_sql_file(op: Any, name: str) -> None:
    """Run sql/<name> as one script, inside the revision's transaction.

    It goes through the raw psycopg connection as a single simple-protocol query:
    the files hold DO blocks and $$ bodies (no splitting on semicolons), and
    SQLAlchemy's text() would read `:word` inside them as bind parameters.
    The file must not BEGIN/COMMIT itself.
    """
    from alembic import context

    script = (SQL_DIR / name).read_text()
    if context.is_offline_mode():
        op.execute(script)
        return
    conn: psycopg.Connection[Any] = op.get_bind().connection.driver_connection
    with conn.cursor() as cur:
        cur.execute(script.encode())  # bytes: sent as-is, never parsed for placeholders


def function_files() -> list[Path]:
    return sorted(FUNCTIONS_DIR.glob("*.sql"))


def apply_functions(owner_dsn: str) -> list[Path]:
    """Apply every functions/*.sql in lexical order, each in its own transaction."""
    files = function_files()
    with psycopg.connect(owner_dsn) as conn:
        for path in files:
            try:
                with conn.transaction():
                    conn.execute(path.read_bytes())
            except psycopg.Error as err:
                raise MigrationError(f"functions/{path.name}: {err}") from err
    return files


def migrate(owner_dsn: str) -> None:
    """`alembic upgrade head`, then functions/. Idempotent: run it on every start."""
    command.upgrade(alembic_config(owner_dsn), "head")
    apply_functions(owner_dsn)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(dsn: str) -> str | None:
    """The revision the database is at (None before the first migration)."""
    engine = create_engine(sqlalchemy_url(dsn), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
