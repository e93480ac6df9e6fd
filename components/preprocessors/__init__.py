"""Preprocessors: cleaning and chunking converted Documents."""
