"""Write-path indexes: sql/0018_write_path_indexes.sql.

Revision ID: 0018
Revises: 0017
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0018_write_path_indexes.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
