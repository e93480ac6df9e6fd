"""Retrievers: the attempts that read the knowledge store (the main one and the sidecar comparison)."""
