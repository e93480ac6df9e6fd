"""Schema evolution of the trace database: Alembic migrations run in-process, safe against concurrent callers.

Every `TraceStore` brings its database to the newest revision on first use, so an existing trace database survives
an upgrade of the project. A database made before migrations existed (the table, no version row) is stamped with the
baseline first. Concurrent first uses (several processes starting at once) are serialized: a file lock next to a
SQLite file, a transaction-scoped advisory lock on PostgreSQL (whose DDL is transactional).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic (and the file lock) are imported only when a database is not at HEAD: a database that is, which is every
# first use but the first, is checked with one SELECT, so a one-shot process (`lookup-knowledge ask`) does not pay
# for loading Alembic and its migration scripts.

SCRIPT_LOCATION = "components.trace:migrations"
#: our own version table, so a host application's Alembic in the same database never collides with ours
VERSION_TABLE = "lookup_knowledge_alembic_version"
#: the schema as `create_all` made it before migrations existed
BASELINE = "0001"
#: the newest revision of `migrations/versions` (a test checks it against Alembic's view of the scripts)
HEAD = "0004"
_PG_LOCK_KEY = 7_308_327_318_209_041_921  # any constant bigint, the same in every process
_LOCK_TIMEOUT_S = 60


def alembic_config(connection: Connection) -> Config:
    """
    The Alembic configuration of the trace migrations, bound to an open connection.

    :param connection: The connection the migrations run on.
    :returns: The configuration (no file).
    """
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["connection"] = connection
    return config


def current_revision(connection: Connection) -> str | None:
    """
    The revision the database is at.

    :param connection: An open connection.
    :returns: The revision, or None for a database without our version table.
    """
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE}).get_current_revision()


@contextlib.contextmanager
def _sqlite_file_lock(engine: Engine) -> Iterator[None]:
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        yield
        return
    from filelock import FileLock

    # pysqlite runs DDL outside transactions, so SQLite's own locking cannot serialize two migrations
    with FileLock(f"{database}.migrate.lock", timeout=_LOCK_TIMEOUT_S):
        yield


def upgrade(engine: Engine, revision: str = "head") -> str | None:
    """
    Bring the database to `revision`.

    :param engine: The trace database.
    :param revision: Target revision (`head`: the newest).
    :returns: The revision the database is at afterwards.
    """
    if revision in {"head", HEAD} and at_head(engine):
        return HEAD  # what Alembic's upgrade would find, and leave as it is
    from alembic import command

    with _sqlite_file_lock(engine), engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
        config = alembic_config(connection)
        if current_revision(connection) is None and inspect(connection).has_table("tool_invocation"):
            command.stamp(config, BASELINE)
        command.upgrade(config, revision)
        return current_revision(connection)


def at_head(engine: Engine) -> bool:
    """
    Whether the database is at HEAD already: read without Alembic and without the lock (a migration only moves on).

    An unreachable or locked database raises here as it would from the first statement of Alembic's path.

    :param engine: The trace database.
    :returns: True when no migration is needed.
    """
    with engine.connect() as connection:
        if not inspect(connection).has_table(VERSION_TABLE):  # a new or a pre-migrations database: Alembic decides
            return False
        versions = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()  # noqa: S608
    return list(versions) == [HEAD]
