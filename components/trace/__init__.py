"""The `tool_invocation` table and the store that writes and reads it."""
