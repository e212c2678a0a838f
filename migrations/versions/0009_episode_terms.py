"""Postings of episode full text for the BM25 leg: sql/0009_episode_terms.sql.

Revision ID: 0009
Revises: 0008
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0009_episode_terms.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
