"""Webhook endpoints subscribed to every event type, now and later: sql/0024_webhook_every_type.sql.

Revision ID: 0024
Revises: 0023
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0024_webhook_every_type.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
