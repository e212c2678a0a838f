"""The relation joins the key of edges_target_idx: sql/0027_edges_target_order.sql.

Revision ID: 0027
Revises: 0026
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0027_edges_target_order.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
