"""The job kinds defined once, and memory.jobs' check calls them: sql/0031_job_kinds.sql.

Revision ID: 0031
Revises: 0030
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0031_job_kinds.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
