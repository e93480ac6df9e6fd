"""Query understanding: the query transform and the L0 hints (never evidence)."""
