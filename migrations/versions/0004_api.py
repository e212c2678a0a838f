"""HTTP API: API keys, owner-only cross-org reads: sql/0004_api.sql.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0004_api.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
