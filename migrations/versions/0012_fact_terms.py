"""Postings of fact full text for the fact full-text leg: sql/0012_fact_terms.sql.

Revision ID: 0012
Revises: 0008
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0012"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0012_fact_terms.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
