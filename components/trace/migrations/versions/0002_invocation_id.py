"""An idempotency key per call (`invocation_id`) and the query's original length (`query_chars`).

A row replayed twice from the spool is stored once: the key is unique. Rows written before this revision keep a
null key (unique allows any number of nulls).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tool_invocation") as batch:
        batch.add_column(sa.Column("invocation_id", AutoString(), nullable=True))
        batch.add_column(sa.Column("query_chars", sa.Integer(), nullable=True))
        batch.create_index("ix_tool_invocation_invocation_id", ["invocation_id"], unique=True)
        batch.create_index("ix_tool_invocation_status", ["status"])


def downgrade() -> None:
    with op.batch_alter_table("tool_invocation") as batch:
        batch.drop_index("ix_tool_invocation_status")
        batch.drop_index("ix_tool_invocation_invocation_id")
        batch.drop_column("query_chars")
        batch.drop_column("invocation_id")
