"""Auto objects follow the entities they name: sql/0021_auto_objects.sql.

Revision ID: 0021
Revises: 0020
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0021_auto_objects.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
