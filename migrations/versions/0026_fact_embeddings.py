"""Fact embeddings in a table of their own: sql/0026_fact_embeddings.sql.

Revision ID: 0026
Revises: 0025
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0026_fact_embeddings.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
