"""One-time, superuser-only setup: the owner role, the database, the extensions.

Everything after this (schema, app and analyst roles, functions) is done by
migrations running as the owner, which is neither superuser nor owner of the server.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from chronomem.dsn import with_params
from chronomem.settings import OWNER_ROLE

# pgvector is not a trusted extension, so a superuser has to create these.
EXTENSIONS = ("vector", "btree_gist", "pg_trgm")


class BootstrapError(RuntimeError):
    pass


def owner_dsn(superuser_dsn: str, dbname: str, owner_password: str | None = None) -> str:
    """The owner's DSN: same server as `superuser_dsn`, user chronomem_owner, `dbname`."""
    return with_params(superuser_dsn, user=OWNER_ROLE, dbname=dbname, password=owner_password)


def bootstrap(superuser_dsn: str, dbname: str, owner_password: str | None = None) -> str:
    """Idempotently create the owner role, the database and its extensions.

    Returns the owner DSN. Safe to run on every start.
    """
    # CREATE DATABASE cannot run inside a transaction block, hence autocommit.
    with psycopg.connect(superuser_dsn, autocommit=True) as conn:
        row = conn.execute("select rolsuper from pg_roles where rolname = current_user").fetchone()
        if not (row and row[0]):
            raise BootstrapError(
                "bootstrap needs a superuser connection (it creates the owner role, the "
                "database and the vector extension); DATABASE_URL must name a superuser"
            )
        owner = sql.Identifier(OWNER_ROLE)
        exists = conn.execute("select 1 from pg_roles where rolname = %s", [OWNER_ROLE])
        if exists.fetchone() is None:
            conn.execute(sql.SQL("create role {} login").format(owner))
        # Re-assert the attributes every time so a hand-edited role converges back.
        # CREATEROLE: migrations create the app and analyst roles.
        conn.execute(sql.SQL("alter role {} login nosuperuser createrole").format(owner))
        if owner_password:
            conn.execute(
                sql.SQL("alter role {} password {}").format(owner, sql.Literal(owner_password))
            )
        exists = conn.execute("select 1 from pg_database where datname = %s", [dbname])
        if exists.fetchone() is None:
            conn.execute(
                sql.SQL("create database {} owner {}").format(sql.Identifier(dbname), owner)
            )

    with psycopg.connect(with_params(superuser_dsn, dbname=dbname), autocommit=True) as conn:
        for ext in EXTENSIONS:
            conn.execute(sql.SQL("create extension if not exists {}").format(sql.Identifier(ext)))

    return owner_dsn(superuser_dsn, dbname, owner_password)


def set_login_passwords(dsn: str, passwords: dict[str, str | None]) -> None:
    """Set passwords of existing roles (skipping None and missing roles).

    Passwords are deployment secrets, so they are set here rather than in versioned
    SQL. The owner may do it for the roles its migrations created.
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        for role, password in passwords.items():
            exists = conn.execute("select 1 from pg_roles where rolname = %s", [role])
            if password and exists.fetchone() is not None:
                conn.execute(
                    sql.SQL("alter role {} password {}").format(
                        sql.Identifier(role), sql.Literal(password)
                    )
                )
