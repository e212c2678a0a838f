"""Core schema: sql/0001_core.sql.

Revision ID: 0001
Revises:
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0001_core.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
