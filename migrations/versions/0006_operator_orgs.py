"""Operators list orgs before choosing one: sql/0006_operator_orgs.sql.

Revision ID: 0006
Revises: 0005
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0006_operator_orgs.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
