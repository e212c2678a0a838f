"""Where the repo's non-Python parts live.

Installs are editable (`pip install -e .`), so the repo root is simply the parent of
this package; sql/, functions/ and migrations/ are read from there, not packaged.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SQL_DIR = REPO_ROOT / "sql"
FUNCTIONS_DIR = REPO_ROOT / "functions"
MIGRATIONS_DIR = REPO_ROOT / "migrations"
ALEMBIC_INI = REPO_ROOT / "alembic.ini"
DEMO_SQL = Path(__file__).resolve().parent / "demo.sql"
