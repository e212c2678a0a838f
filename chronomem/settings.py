"""Settings read from the environment, and the fixed names of roles and database."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

DATABASE_NAME = "chronomem"
OWNER_ROLE = "chronomem_owner"  # owns the schema and runs migrations
APP_ROLE = "chronomem_app"  # API and workers: owns nothing, RLS forced
ANALYST_ROLE = "chronomem_analyst"  # read-only
ROLES: Mapping[str, str] = {"owner": OWNER_ROLE, "app": APP_ROLE, "analyst": ANALYST_ROLE}


def _get(env: Mapping[str, str], name: str) -> str | None:
    # An empty variable counts as unset, so `FOO= cmd` can switch a setting off.
    return env.get(name) or None


@dataclass(frozen=True)
class Settings:
    database_url: str | None
    """Superuser DSN of an existing server; when None, the embedded server is used."""
    data_dir: Path
    app_password: str | None
    owner_password: str | None
    """Only needed where the server asks for passwords (e.g. DATABASE_URL over TCP)."""

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pg"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        data_dir = _get(env, "CHRONOMEM_DATA_DIR") or platformdirs.user_data_dir("chronomem")
        return cls(
            database_url=_get(env, "DATABASE_URL"),
            data_dir=Path(data_dir).expanduser(),
            app_password=_get(env, "CHRONOMEM_APP_PASSWORD"),
            owner_password=_get(env, "CHRONOMEM_OWNER_PASSWORD"),
        )
