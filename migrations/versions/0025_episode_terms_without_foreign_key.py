"""Episode postings lose their foreign key: sql/0025_episode_terms_without_foreign_key.sql.

Revision ID: 0025
Revises: 0024
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0025_episode_terms_without_foreign_key.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
