"""BM25 statistics of episodes stored before their counters: sql/0008_episode_text_stats.sql.

Revision ID: 0008
Revises: 0005
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0008"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0008_episode_text_stats.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
