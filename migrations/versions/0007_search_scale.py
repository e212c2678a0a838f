"""Search at scale: stored facts.content_tsv: sql/0007_search_scale.sql.

Revision ID: 0007
Revises: 0005
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0007"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0007_search_scale.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
