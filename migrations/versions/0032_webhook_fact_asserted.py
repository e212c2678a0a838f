"""A webhook event for a new fact, the types defined once: sql/0032_webhook_fact_asserted.sql.

Revision ID: 0032
Revises: 0031
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0032_webhook_fact_asserted.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
