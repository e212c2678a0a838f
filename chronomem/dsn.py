"""Small DSN transformations: same server, another user or database.

Everything is normalised to the URI form, which psql, psycopg and (with a dialect
prefix) SQLAlchemy all accept, so one string can be printed and reused everywhere.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from psycopg.conninfo import conninfo_to_dict

from chronomem.settings import ANALYST_ROLE, APP_ROLE, Settings


def to_uri(params: dict[str, str]) -> str:
    """Build a postgresql:// URI from libpq keywords (empty values are dropped)."""
    p = {k: v for k, v in params.items() if v}
    user, password, dbname = p.pop("user", ""), p.pop("password", ""), p.pop("dbname", "")
    auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    host = p.get("host", "")
    netloc = ""
    # A single TCP host goes in the authority (the usual form); unix-socket paths and
    # multi-host lists stay as query parameters, which libpq and SQLAlchemy both accept.
    if host and not host.startswith("/") and "," not in host:
        netloc = p.pop("host") + (f":{p.pop('port')}" if "port" in p else "")
    uri = f"postgresql://{auth + '@' if auth else ''}{netloc}/{quote(dbname, safe='')}"
    query = urlencode(p, safe="/,:", quote_via=quote)
    return f"{uri}?{query}" if query else uri


def with_params(dsn: str, **overrides: str | None) -> str:
    """Return `dsn` (URI or key=value form) with some libpq keywords replaced or removed."""
    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    for key, value in overrides.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value
    return to_uri(params)


def sqlalchemy_url(dsn: str) -> str:
    """The same DSN for SQLAlchemy's psycopg3 dialect."""
    return "postgresql+psycopg://" + with_params(dsn).removeprefix("postgresql://")


def role_dsn(owner_dsn: str, role: str, password: str | None) -> str:
    """Log in as another role on the owner's server and database."""
    return with_params(owner_dsn, user=role, password=password)


def app_dsn(owner_dsn: str, password: str | None = None) -> str:
    """DSN of the app role; password defaults to CHRONOMEM_APP_PASSWORD (trust auth on
    the embedded socket needs none)."""
    return role_dsn(owner_dsn, APP_ROLE, password or Settings.from_env().app_password)


def analyst_dsn(owner_dsn: str, password: str | None = None) -> str:
    return role_dsn(owner_dsn, ANALYST_ROLE, password)
