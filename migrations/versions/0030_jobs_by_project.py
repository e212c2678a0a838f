"""A project's jobs by key: sql/0030_jobs_by_project.sql.

Revision ID: 0030
Revises: 0029
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0030_jobs_by_project.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
