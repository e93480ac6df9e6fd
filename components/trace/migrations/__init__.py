"""Alembic migrations of the trace database (`components.trace.migrate` runs them; no alembic.ini)."""
