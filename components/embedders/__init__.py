"""Embedders: the offline text and document embedders (models shipped inside PyPI packages, no download)."""
