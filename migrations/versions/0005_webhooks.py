"""Webhooks: endpoints, signing secrets, delivery log: sql/0005_webhooks.sql.

Revision ID: 0005
Revises: 0004
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0005_webhooks.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
