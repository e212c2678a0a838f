"""Words of entity names and aliases for the entity search leg: sql/0011_entity_name_tokens.sql.

Revision ID: 0011
Revises: 0010
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0011_entity_name_tokens.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
