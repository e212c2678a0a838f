"""fact_events -> projects checked per statement: sql/0017_fact_events_project_check.sql.

Revision ID: 0017
Revises: 0014
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0017"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0017_fact_events_project_check.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
