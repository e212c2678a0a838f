"""Webhook events for expired and restored windows: sql/0023_webhook_window_events.sql.

Revision ID: 0023
Revises: 0022
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0023_webhook_window_events.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
