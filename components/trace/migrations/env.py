"""Alembic environment of the trace database, shipped inside the package.

No alembic.ini and no `logging.config.fileConfig` (it would reset the host application's logging): the caller,
`components.trace.migrate.upgrade`, passes an open connection in `config.attributes["connection"]`.
"""

from alembic import context

from components.trace.migrate import VERSION_TABLE
from components.trace.trace_store import ToolInvocation


def _include_object(obj, name, type_, reflected, compare_to):  # type: ignore[no-untyped-def]
    # only this project's table: a host application may keep its own tables in the same database
    return name == ToolInvocation.__tablename__ if type_ == "table" else True


connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=ToolInvocation.metadata,
    version_table=VERSION_TABLE,
    include_object=_include_object,
    compare_type=True,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
