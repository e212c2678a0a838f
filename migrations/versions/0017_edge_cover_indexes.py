"""Edge indexes covering the graph walk's read: sql/0017_edge_cover_indexes.sql.

Revision ID: 0017
Revises: 0016
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0017_edge_cover_indexes.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
