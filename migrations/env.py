"""Alembic environment: online migrations over psycopg3, one transaction per revision."""

from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine, pool

from chronomem.dsn import sqlalchemy_url

config = context.config

if config.config_file_name and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name)


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    dsn = context.get_x_argument(as_dictionary=True).get("dsn")
    if not dsn:
        raise SystemExit("no database: use `chronomem migrate`, or alembic -x dsn=<owner DSN>")
    return sqlalchemy_url(dsn)


def run_migrations_offline() -> None:
    context.configure(url=_url(), literal_binds=True, transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        # One transaction per revision: a failing file leaves the earlier ones applied
        # and recorded, and the failing one entirely absent.
        context.configure(connection=connection, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
