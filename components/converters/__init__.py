"""Converters: files of one type into Documents with their metadata (the indexing pipeline routes files to them)."""
