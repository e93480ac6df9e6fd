"""The caller's principal per row (`principal`): session memory, and the rows a caller may see, are per principal.

Rows written before this revision were written before callers had principals: they keep a null principal (an
anonymous caller's) and their session key, which is what an anonymous caller's session key still is, so they keep
matching their sessions.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tool_invocation") as batch:
        batch.add_column(sa.Column("principal", AutoString(), nullable=True))
        batch.create_index("ix_tool_invocation_principal", ["principal"])


def downgrade() -> None:
    with op.batch_alter_table("tool_invocation") as batch:
        batch.drop_index("ix_tool_invocation_principal")
        batch.drop_column("principal")
