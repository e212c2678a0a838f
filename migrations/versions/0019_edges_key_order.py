"""Edge key index in record-time order: sql/0019_edges_key_order.sql.

Revision ID: 0019
Revises: 0018
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0019_edges_key_order.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
