"""Covering indexes for the probes of the text legs: sql/0014_search_covering_indexes.sql.

Revision ID: 0014
Revises: 0013
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0014_search_covering_indexes.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
