"""Revisions of the `tool_invocation` table, oldest first."""
