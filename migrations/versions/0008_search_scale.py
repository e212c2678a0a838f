"""Search at scale: stored facts.content_tsv: sql/0008_search_scale.sql.

Revision ID: 0008
Revises: 0007
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0008_search_scale.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
