"""Joiners: the candidates of the retrieval attempts into one list, once per chunk."""
