"""Baseline: `tool_invocation` exactly as `SQLModel.metadata.create_all` made it before migrations existed.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_invocation",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),  # = DateTime(timezone=True)
        sa.Column("tool_name", AutoString(), nullable=False),
        sa.Column("session_id", AutoString(), nullable=True),
        sa.Column("query", AutoString(), nullable=False),
        sa.Column("found", sa.Boolean(), nullable=False),
        sa.Column("status", AutoString(), nullable=False),
        sa.Column("retrieval_layer", AutoString(), nullable=False),
        sa.Column("fallback_reason", AutoString(), nullable=True),
        sa.Column("candidate_count", sa.Integer(), nullable=False),
        sa.Column("evidence_block_count", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("error", AutoString(), nullable=True),
        sa.Column("retrieval_details", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_tool_invocation_created_at", "tool_invocation", ["created_at"])
    op.create_index("ix_tool_invocation_session_id", "tool_invocation", ["session_id"])
    op.create_index("ix_tool_invocation_tool_name", "tool_invocation", ["tool_name"])


def downgrade() -> None:
    op.drop_table("tool_invocation")
