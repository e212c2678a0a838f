"""Drop the unused trigram index on entity names: sql/0020_drop_entity_trigram_index.sql.

Revision ID: 0020
Revises: 0019
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0020_drop_entity_trigram_index.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
