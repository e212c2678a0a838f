"""One foreign key of memory.facts where there were two: sql/0013_write_path.sql.

Revision ID: 0013
Revises: 0012
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0013_write_path.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
