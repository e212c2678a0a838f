"""Schema migrations: one revision per file of sql/, then functions/.

A schema change is one new file, `sql/NNNN_name.sql`: its number is its revision and
the file before it is its parent, so the chain is the files in order and nothing else
is written per revision. Alembic is the runner (its version table, one transaction per
revision, the upgrade path from any revision); `SqlRevisions` hands it the files as its
revisions instead of Python scripts. Revisions are forward-only. functions/ holds
CREATE OR REPLACE files that are re-applied after every upgrade, so changing a
function never needs a revision.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import Script, ScriptDirectory
from sqlalchemy import create_engine, pool

from chronomem.dsn import sqlalchemy_url
from chronomem.paths import ALEMBIC_INI, FUNCTIONS_DIR, MIGRATIONS_DIR, SQL_DIR
from chronomem.sql_statements import split_statements


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
        for statement in _statements(conn, script):
            cur.execute(statement.encode())  # bytes: sent as-is, never parsed for placeholders


def on_citus(conn: psycopg.Connection[Any]) -> bool:
    """Whether the database is a Citus coordinator's (`chronomem distribute`)."""
    row = conn.execute("select 1 from pg_extension where extname = 'citus'").fetchone()
    return row is not None


def _statements(conn: psycopg.Connection[Any], script: str) -> list[str]:
    """The script as one query, or on Citus statement by statement: Citus forwards
    some DDL to the workers as the text of its query, which there must be one
    statement (chronomem.sql_statements). There the transaction also works over one
    connection per node: Citus refuses a function's DDL after a parallel operation
    on a distributed table in the same transaction."""
    if not on_citus(conn):
        return [script]
    return ["set local citus.multi_shard_modify_mode = 'sequential'", *split_statements(script)]


_REVISION_FILE = re.compile(r"^(?P<revision>[0-9]{4})_[a-z0-9_]+\.sql$")


def revision_files() -> list[tuple[str, Path]]:
    """The files of sql/ with their revisions, in order; numbered 0001, 0002, ... with
    no gap (a gap or a misnamed file is a mistake, not a branch)."""
    files = sorted(SQL_DIR.glob("*.sql"))
    revisions: list[tuple[str, Path]] = []
    for index, path in enumerate(files, start=1):
        match = _REVISION_FILE.match(path.name)
        if not match or int(match["revision"]) != index:
            raise MigrationError(
                f"sql/{path.name}: schema files are named NNNN_name.sql (lower case), "
                f"numbered from 0001 without gaps; expected {index:04d}_..."
            )
        revisions.append((match["revision"], path))
    return revisions


def _revision_module(revision: str, down_revision: str | None, path: Path) -> types.ModuleType:
    """What Alembic reads from a revision script, for one file of sql/."""
    module = types.ModuleType(f"chronomem_revision_{revision}")
    first_line = path.read_text().split("\n", 1)[0]
    module.__doc__ = first_line.removeprefix("--").strip() or path.name
    module.revision = revision  # type: ignore[attr-defined]
    module.down_revision = down_revision  # type: ignore[attr-defined]
    module.branch_labels = None  # type: ignore[attr-defined]
    module.depends_on = None  # type: ignore[attr-defined]

    def upgrade() -> None:
        from alembic import op

        run_sql_file(op, path.name)

    def downgrade() -> None:
        raise NotImplementedError("migrations are forward-only")

    module.upgrade = upgrade  # type: ignore[attr-defined]
    module.downgrade = downgrade  # type: ignore[attr-defined]
    return module


class SqlRevisions(ScriptDirectory):
    """Alembic's script directory, whose revisions are the files of sql/."""

    def _load_revisions(self) -> Iterator[Script]:
        down: str | None = None
        for revision, path in revision_files():
            yield Script(_revision_module(revision, down, path), revision, path)
            down = revision

    @classmethod
    def from_config(cls, config: Config) -> SqlRevisions:
        base = ScriptDirectory.from_config(config)
        return cls(base.dir)


def upgrade(owner_dsn: str, revision: str = "head") -> None:
    """Upgrade the schema to `revision` (what `alembic upgrade` does, over sql/)."""
    config = alembic_config(owner_dsn)
    script = SqlRevisions.from_config(config)

    def steps(rev: Any, context: Any) -> Any:
        return script._upgrade_revs(revision, rev)

    with EnvironmentContext(config, script, fn=steps, as_sql=False, destination_rev=revision):
        script.run_env()


def function_files() -> list[Path]:
    return sorted(FUNCTIONS_DIR.glob("*.sql"))


def apply_functions(owner_dsn: str) -> list[Path]:
    """Apply every functions/*.sql in lexical order, each in its own transaction."""
    files = function_files()
    with psycopg.connect(owner_dsn) as conn:
        for path in files:
            try:
                with conn.transaction():
                    for statement in _statements(conn, path.read_text()):
                        conn.execute(statement.encode())
            except psycopg.Error as err:
                raise MigrationError(f"functions/{path.name}: {err}") from err
    return files


def migrate(owner_dsn: str) -> None:
    """`alembic upgrade head`, then functions/. Idempotent: run it on every start."""
    upgrade(owner_dsn)
    apply_functions(owner_dsn)


def head_revision() -> str | None:
    return SqlRevisions.from_config(alembic_config()).get_current_head()


def current_revision(dsn: str) -> str | None:
    """The revision the database is at (None before the first migration)."""
    engine = create_engine(sqlalchemy_url(dsn), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
