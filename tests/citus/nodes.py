"""A database on every node of a Citus cluster, as a Chronomem install needs it.

Citus keeps its metadata per database and does not create databases on the workers,
so a new database is made on each node, gets the extension there, and its
coordinator learns the workers again. The workers are the ones the coordinator's
maintenance database (the DSN given) already knows, as tests/citus/cluster.sh sets
it up.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from chronomem.dsn import with_params


def worker_dsns(server_admin: str) -> list[str]:
    """Superuser DSNs of the workers the coordinator of `server_admin` knows."""
    with psycopg.connect(server_admin, autocommit=True) as conn:
        rows = conn.execute(
            "select nodename, nodeport from pg_dist_node"
            " where groupid <> 0 and noderole = 'primary' order by nodeport"
        ).fetchall()
    return [with_params(server_admin, host=host, port=str(port)) for host, port in rows]


def coordinator_address(server_admin: str) -> tuple[str, int]:
    with psycopg.connect(server_admin, autocommit=True) as conn:
        row = conn.execute(
            "select nodename, nodeport from pg_dist_node where groupid = 0"
        ).fetchone()
    if row is None:
        raise RuntimeError(f"{server_admin}: not a Citus coordinator (no node of group 0)")
    return row[0], row[1]


def create_database(server_admin: str, dbname: str, owner: str | None = None) -> str:
    """Drop and create `dbname` on every node with the citus extension, the
    coordinator's metadata naming the same workers. Returns its superuser DSN."""
    workers = worker_dsns(server_admin)
    host, port = coordinator_address(server_admin)
    for node in [server_admin, *workers]:
        with psycopg.connect(node, autocommit=True) as conn:
            conn.execute("set client_min_messages = warning")
            name = sql.Identifier(dbname)
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(name))
            conn.execute(sql.SQL("create database {}").format(name))
        with psycopg.connect(with_params(node, dbname=dbname), autocommit=True) as conn:
            conn.execute("create extension citus")
    admin = with_params(server_admin, dbname=dbname)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("select citus_set_coordinator_host(%s, %s)", (host, port))
        for worker in workers:
            info = psycopg.conninfo.conninfo_to_dict(worker)
            conn.execute("select citus_add_node(%s, %s)", (info["host"], int(str(info["port"]))))
    return admin


def hand_to_owner(admin: str, dbname: str, owner_role: str) -> None:
    """The owner role (made by bootstrap) owns the database and its public schema on
    every node, as on a single server where it creates the database."""
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("alter database {} owner to {}").format(
                sql.Identifier(dbname), sql.Identifier(owner_role)
            )
        )
        conn.execute(sql.SQL("alter schema public owner to {}").format(sql.Identifier(owner_role)))
