"""Fact postings with tf and length: sql/0015_fact_term_frequencies.sql.

Revision ID: 0015
Revises: 0014
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0015_fact_term_frequencies.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
