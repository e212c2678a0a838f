"""Postings of episode full text for the BM25 leg: sql/0010_episode_terms.sql.

Revision ID: 0010
Revises: 0007
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0010"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0010_episode_terms.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
