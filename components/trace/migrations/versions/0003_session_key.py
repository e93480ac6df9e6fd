"""A session key per row (`session_key`): the digest of the whole normalized session id, what session memory matches.

The readable `session_id` is cut (to 200 characters), so two sessions that differ only after the cut shared their
memory; the key covers the whole id and fits an indexed column on every database. Rows written before this revision
get the key of the `session_id` they have (already cut and trimmed when it was written).

Revision ID: 0003
Revises: 0002
"""

import hashlib

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _digest(session_id: str) -> str:
    # frozen here on purpose: `components.trace.session_key.session_key` of an id stored by an earlier revision
    return hashlib.sha256(session_id.strip().encode("utf-8", "surrogatepass")).hexdigest()


def upgrade() -> None:
    with op.batch_alter_table("tool_invocation") as batch:
        batch.add_column(sa.Column("session_key", AutoString(), nullable=True))
        batch.create_index("ix_tool_invocation_session_key", ["session_key"])
    table = sa.table("tool_invocation", sa.column("session_id", AutoString()), sa.column("session_key", AutoString()))
    connection = op.get_bind()
    # one UPDATE per distinct session, not per row: sessions are far fewer than calls
    sessions = connection.execute(
        sa.select(table.c.session_id).where(table.c.session_id.is_not(None)).distinct()
    ).scalars()
    for session_id in list(sessions):
        if session_id.strip():
            connection.execute(
                table.update().where(table.c.session_id == session_id).values(session_key=_digest(session_id))
            )


def downgrade() -> None:
    with op.batch_alter_table("tool_invocation") as batch:
        batch.drop_index("ix_tool_invocation_session_key")
        batch.drop_column("session_key")
