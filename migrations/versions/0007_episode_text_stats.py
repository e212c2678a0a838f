"""BM25 statistics of episodes stored before their counters: sql/0007_episode_text_stats.sql.

Revision ID: 0007
Revises: 0006
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0007_episode_text_stats.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
