"""Community runs: the job recomputes only changed projects: sql/0029_community_runs.sql.

Revision ID: 0029
Revises: 0028
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0029_community_runs.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
