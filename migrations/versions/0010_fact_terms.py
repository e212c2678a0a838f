"""Postings of fact full text for the fact full-text leg: sql/0010_fact_terms.sql.

Revision ID: 0010
Revises: 0009
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0010_fact_terms.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
