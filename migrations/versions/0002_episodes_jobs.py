"""Episodes searchable, embeddings, ingest idempotency, jobs: sql/0002_episodes_jobs.sql.

Revision ID: 0002
Revises: 0001
"""

import os

from alembic import op

from chronomem.migrate import run_sql_file

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The embedding columns' dimension is fixed here, once per installation
    # (default 384: all-MiniLM-L6-v2); `chronomem reembed` changes it later.
    dim = int(os.environ.get("CHRONOMEM_EMBEDDING_DIM", "384"))
    op.execute(f"select set_config('chronomem.embedding_dim', '{dim}', true)")
    run_sql_file(op, "0002_episodes_jobs.sql")


def downgrade() -> None:
    raise NotImplementedError("migrations are forward-only")
