"""The names a fact was written with: sql/0022_written_names.sql.

Revision ID: 0022
Revises: 0021
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0022_written_names.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
