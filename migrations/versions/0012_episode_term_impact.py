"""Impact-ordered episode postings for a bounded full-text leg: sql/0012_episode_term_impact.sql.

Revision ID: 0012
Revises: 0011
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0012_episode_term_impact.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
