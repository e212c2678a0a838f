"""Fact embeddings lose their foreign key: sql/0028_fact_embeddings_without_foreign_key.sql.

Revision ID: 0028
Revises: 0027
"""

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op, "0028_fact_embeddings_without_foreign_key.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
