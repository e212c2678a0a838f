"""Retrieval: fact full-text index, communities: sql/0003_retrieval.sql.

Revision ID: 0003
Revises: 0002
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0003_retrieval.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
