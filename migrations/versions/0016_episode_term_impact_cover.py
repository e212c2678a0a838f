"""Episode impact index covering tf and dl: sql/0016_episode_term_impact_cover.sql.

Revision ID: 0016
Revises: 0015
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0016_episode_term_impact_cover.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
